"""``tether.Model`` over the Anthropic Messages API, with native tool use.

Optional: ``pip install 'tether[anthropic]'`` brings the ``anthropic`` package; any client
object with the same ``messages.create`` method works too::

    from anthropic import AsyncAnthropic
    from tether.models.anthropic import AnthropicModel

    class Refunds(tether.AgentSession):
        tools = (lookup_order, refund)
        model = AnthropicModel(AsyncAnthropic(max_retries=0), model="claude-sonnet-4-6")

**The conversation.** The context bundle's head (goal, constraints, summary, checkpoint) is
the ``system=`` prompt; its history goes as the API's own turns: the model's earlier tool
calls as ``tool_use`` blocks of an assistant message (under the ids the API issued, which the
session journals with each decision, so a replayed or resumed session sends the same ids),
answered by ``tool_result`` blocks with the matching ``tool_use_id`` (``is_error`` set for a
failed call) at the head of the next user message (``tether.models.conversation``). Turns of
the same role are merged, as the API wants them alternating, and a history that no longer
starts with the user's message (trimmed to the token budget) gets the checkpoint as its first
user turn. The tools go with their JSON schema as ``input_schema``.

**The answer.** Text blocks become a ``tether.FinalAnswer`` (``stop_reason`` ``end_turn`` or
``stop_sequence``); one ``tool_use`` block a ``tether.ToolCall``, several a
``tether.ToolCalls``, the text before them its thought: the session makes the calls in order,
each its own effect, and answers every ``tool_use`` id before the next request, as the API
requires. An input that is not a JSON object goes back to the model as the call's result
("the arguments are not valid JSON: …"), the session's invalid-arguments path. Each decision
carries a ``tether.Usage``: ``input_tokens`` there counts the cache reads and writes too (the
API's own ``input_tokens`` leaves them out), as the OpenTelemetry GenAI conventions ask. A
refusal, an answer cut at ``max_tokens`` or at the context window, and a paused server-tool
turn are errors naming the ``stop_reason``: the task stops with it. Extended thinking is not
supported: its signed thinking blocks would have to be journaled and sent back.

**Errors** are sorted into tether's taxonomy (``tether.models.sdk_errors``): a connection
error, a 429, a 500, a 529 (overloaded) and other 5xx were not carried out and are retried
(waiting at least the ``Retry-After``); a timeout, a 408 or a 504 maybe were, and are retried
too (a model call has no side effect); a 429 for a spending limit
(``enforced_spend_limit_reached``) and any other 4xx are failures, recorded, never retried.

**Retries: set ``max_retries=0`` on the client**, for the reasons given in
``tether.models.openai``: tether's own retries are recorded attempt by attempt and counted by
the ``model`` circuit breaker; the SDK's (2 by default) would multiply them unseen. Keep the
client's ``timeout`` below the session's ``model_timeout``.
"""

from __future__ import annotations

from typing import Any

from tether.actors.model import Decision, ModelRequest, Usage
from tether.errors import ConfigError
from tether.models import sdk_errors
from tether.models.conversation import (
    Said,
    answer,
    int_field,
    object_schema,
    opening_text,
    system_text,
    tool_call,
    turns,
)

PROVIDER = "anthropic"

# What each stop_reason that is not an answer means, said to whoever reads the task's outcome.
_NOT_AN_ANSWER = {
    "max_tokens": "the model's answer was cut off at max_tokens (stop_reason 'max_tokens'); "
    "raise max_tokens",
    "model_context_window_exceeded": "the model's answer was cut off at its context window "
    "(stop_reason 'model_context_window_exceeded'); lower the session's context_budget",
    "refusal": "the model refused to answer (stop_reason 'refusal')",
    "pause_turn": "the model paused a long server-tool turn (stop_reason 'pause_turn'), "
    "which this adapter does not continue",
}


class AnthropicModel:
    """``tether.Model`` over ``client.messages.create`` (see the module docstring).

    ``max_tokens`` is required by the API; ``temperature`` is left to the API's default
    unless given. ``extra`` goes to every request (``top_p``, ``tool_choice``, …).
    """

    provider = PROVIDER  # gen_ai.provider.name of its calls (tether.actors.genai)

    def __init__(
        self,
        client: Any,
        *,
        model: str,
        max_tokens: int = 4096,
        temperature: float | None = None,
        **extra: Any,
    ) -> None:
        if not hasattr(getattr(client, "messages", None), "create"):
            raise ConfigError(
                "AnthropicModel needs a client with messages.create (e.g. anthropic.AsyncAnthropic())"
            )
        if not isinstance(model, str) or not model:
            raise ConfigError(f"AnthropicModel needs a model name, not {model!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigError(f"AnthropicModel: max_tokens must be an int >= 1, not {max_tokens!r}")
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra = extra

    async def decide(self, request: ModelRequest) -> Decision:
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages(request),
        }
        system = system_text(request)
        if system:
            params["system"] = system
        specs = tools(request)
        if specs:
            params["tools"] = specs
        if self.temperature is not None:
            params["temperature"] = self.temperature
        with sdk_errors.sorted_errors(PROVIDER, _out_of_money):
            response = await self.client.messages.create(**params, **self.extra)
        return decision(response)


def _out_of_money(exc: Any) -> bool:
    """A 429 that no wait cures: the organisation's spending limit is reached."""
    return getattr(exc, "error_code", None) == "enforced_spend_limit_reached"


def messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The history as alternating user and assistant messages of content blocks, tool calls
    and results in the API's own form (see the module docstring)."""
    out: list[dict[str, Any]] = []

    def add(role: str, *blocks: dict[str, Any]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)  # the API wants the roles alternating
        else:
            out.append({"role": role, "content": list(blocks)})

    for turn in turns(request.bundle):
        if isinstance(turn, Said):
            if turn.text:  # the API refuses empty text blocks
                add(turn.role, {"type": "text", "text": turn.text})
            continue
        said = [{"type": "text", "text": turn.text}] if turn.text else []
        add(
            "assistant",
            *said,
            *(
                {"type": "tool_use", "id": c.call_id, "name": c.tool, "input": c.args}
                for c in turn.calls
            ),
        )
        # Results open the next user message: nothing else has been added to it yet, since
        # the tool_use blocks just made the assistant the last speaker.
        add(
            "user",
            *(
                {
                    "type": "tool_result",
                    "tool_use_id": c.call_id,
                    "content": c.output,
                    "is_error": c.is_error,
                }
                for c in turn.calls
            ),
        )
    if not out or out[0]["role"] != "user":
        out.insert(
            0, {"role": "user", "content": [{"type": "text", "text": opening_text(request.bundle)}]}
        )
    return out


def tools(request: ModelRequest) -> list[dict[str, Any]]:
    """The tool specs as the API's tools (name, description, ``input_schema``)."""
    return [
        {
            "name": spec["name"],
            "description": spec.get("description", ""),
            "input_schema": object_schema(spec["input_schema"]),
        }
        for spec in request.tools
    ]


def decision(response: Any) -> Decision:
    """A message as a decision (see the module docstring)."""
    blocks = getattr(response, "content", None)
    if not isinstance(blocks, list):
        raise ValueError(f"the model's response has no content blocks: {response!r}")
    stop = getattr(response, "stop_reason", None) or ""
    if stop in _NOT_AN_ANSWER:
        raise ValueError(_NOT_AN_ANSWER[stop])
    usage = _usage(response, stop)
    text = "".join(
        b.text for b in blocks if getattr(b, "type", None) == "text" and isinstance(b.text, str)
    )
    calls = [
        tool_call(getattr(b, "name", None), getattr(b, "id", None), getattr(b, "input", None), b)
        for b in blocks
        if getattr(b, "type", None) == "tool_use"
    ]
    return answer(
        text,
        calls,
        usage,
        f"the model's response has neither text nor a tool call (stop_reason {stop!r})",
    )


def _usage(response: Any, stop: str) -> Usage:
    """The message's usage, ``input_tokens`` with the cache reads and writes added."""
    usage = getattr(response, "usage", None)
    fresh = int_field(getattr(usage, "input_tokens", None))
    read = int_field(getattr(usage, "cache_read_input_tokens", None))
    written = int_field(getattr(usage, "cache_creation_input_tokens", None))
    output = int_field(getattr(usage, "output_tokens", None))
    model = getattr(response, "model", None)
    response_id = getattr(response, "id", None)
    return Usage(
        input_tokens=fresh + read + written,
        output_tokens=output,
        total_tokens=fresh + read + written + output,
        cache_read_input_tokens=read,
        cache_creation_input_tokens=written,
        model=model if isinstance(model, str) else "",
        response_id=response_id if isinstance(response_id, str) else "",
        finish_reason=stop,
    )
