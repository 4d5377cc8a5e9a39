"""``tether.Model`` over an OpenAI-compatible chat completions API, with native tool calling.

Optional: ``pip install 'tether[openai]'`` brings the ``openai`` package; any client object
with the same ``chat.completions.create`` method works too (Azure, vLLM, Ollama and most
gateways speak this API)::

    from openai import AsyncOpenAI
    from tether.models.openai import OpenAIChatModel

    class Refunds(tether.AgentSession):
        tools = (lookup_order, refund)
        model = OpenAIChatModel(AsyncOpenAI(max_retries=0), model="gpt-4o-mini")

**The conversation.** The context bundle's head (goal, constraints, summary, checkpoint) is
the ``system`` message; its history goes as the API's own messages: the model's earlier tool
calls as an assistant message with ``tool_calls`` (under the ids the API issued, which the
session journals with each decision, so a replayed or resumed session sends the same ids),
each answered by a ``role: "tool"`` message with the matching ``tool_call_id``
(``tether.models.conversation``). The tools go as function tools.

**The answer.** Text becomes a ``tether.FinalAnswer``; one tool call a ``tether.ToolCall``;
several (parallel tool calls) a ``tether.ToolCalls``: the session makes them in order, each its
own effect through the guards and the ledger, and answers every call id before the next
request, as the API requires, so ``parallel_tool_calls`` stays on. Arguments that are not
valid JSON go back to the model as the call's result ("the arguments are not valid JSON: …"),
the session's invalid-arguments path. Each decision carries a ``tether.Usage`` (prompt,
completion and total tokens, cached ones, the model, the completion id, the finish reason).
A refusal, an answer cut at the token limit (``finish_reason`` ``length``) or withheld by the
content filter is an error naming it: the task stops with it instead of passing a partial
answer off as the final one.

**Errors** are sorted into tether's taxonomy (``tether.models.sdk_errors``): a connection
error, a 429 and a 5xx were not carried out and are retried (waiting at least the
``Retry-After``); a timeout (the SDK's, or the session's ``model_timeout``), a 408 or a 504
maybe were, and are retried too (a model call has no side effect); a 429 for an exhausted
quota (``insufficient_quota``) and any other 4xx are failures, recorded, never retried.

**Retries: set ``max_retries=0`` on the client.** The SDK retries connection errors, 408, 409,
429 and 5xx twice by default, inside what tether sees as one attempt. tether retries the same
errors itself, up to 3 attempts (the model tool's ``RetryPolicy``), so the defaults make up to
9 requests for one decision, and the SDK's own retries are invisible: not in the ledger's
attempt history, not counted by the ``model`` circuit breaker (which is what stops a whole
fleet of sessions from hammering a provider that is down), and spent within one
``model_timeout``. With ``max_retries=0`` every request is one recorded attempt, one backoff
policy decides, and the breaker sees every failure. Keep the client's ``timeout`` below the
session's ``model_timeout`` (120 s by default) so that a slow answer is the SDK's timeout,
which names the request, rather than tether cancelling the call.
"""

from __future__ import annotations

from typing import Any

from tether.actors.model import Decision, ModelRequest, ToolCall, Usage
from tether.errors import ConfigError
from tether.models import sdk_errors
from tether.models.conversation import (
    Said,
    answer,
    int_field,
    object_schema,
    system_text,
    tool_call,
    turns,
)

PROVIDER = "openai"


class OpenAIChatModel:
    """``tether.Model`` over ``client.chat.completions.create`` (see the module docstring).
    ``extra`` goes to every request (``max_completion_tokens``, ``tool_choice``, …)."""

    provider = PROVIDER  # gen_ai.provider.name of its calls (tether.actors.genai)

    def __init__(self, client: Any, *, model: str, temperature: float = 0.0, **extra: Any) -> None:
        if not hasattr(getattr(getattr(client, "chat", None), "completions", None), "create"):
            raise ConfigError(
                "OpenAIChatModel needs a client with chat.completions.create "
                "(e.g. openai.AsyncOpenAI())"
            )
        if not isinstance(model, str) or not model:
            raise ConfigError(f"OpenAIChatModel needs a model name, not {model!r}")
        self.client = client
        self.model = model
        self.temperature = temperature
        self.extra = extra

    async def decide(self, request: ModelRequest) -> Decision:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": messages(request),
            "temperature": self.temperature,
        }
        specs = tools(request)
        if specs:  # the API refuses an empty list
            params["tools"] = specs
        with sdk_errors.sorted_errors(PROVIDER, _out_of_money):
            response = await self.client.chat.completions.create(**params, **self.extra)
        return decision(response)


def _out_of_money(exc: Any) -> bool:
    """A 429 that no wait cures: the account's quota is used up."""
    return getattr(exc, "code", None) == "insufficient_quota"


def messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The request as chat messages: the system prompt, then the history with its tool calls
    and results in the API's own form (see the module docstring)."""
    out: list[dict[str, Any]] = []
    system = system_text(request)
    if system:
        out.append({"role": "system", "content": system})
    for turn in turns(request.bundle):
        if isinstance(turn, Said):
            out.append({"role": turn.role, "content": turn.text})
            continue
        out.append(
            {
                "role": "assistant",
                "content": turn.text or None,
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.tool, "arguments": call.arguments},
                    }
                    for call in turn.calls
                ],
            }
        )
        out.extend(
            {
                "role": "tool",
                "tool_call_id": call.call_id,
                # The API has no error flag on a tool message: the text says it.
                "content": f"Error: {call.output}" if call.is_error else call.output,
            }
            for call in turn.calls
        )
    return out


def tools(request: ModelRequest) -> list[dict[str, Any]]:
    """The tool specs as function tools (name, description, JSON schema of the input)."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec["name"],
                "description": spec.get("description", ""),
                "parameters": object_schema(spec["input_schema"]),
            },
        }
        for spec in request.tools
    ]


def decision(response: Any) -> Decision:
    """A chat completion as a decision (see the module docstring)."""
    try:
        choice = response.choices[0]
        message = choice.message
    except (AttributeError, IndexError, TypeError) as exc:
        raise ValueError(f"the model's response has no message: {response!r}") from exc
    finish = getattr(choice, "finish_reason", None) or ""
    usage = _usage(response, finish)
    refusal = getattr(message, "refusal", None)
    if refusal:
        raise ValueError(f"the model refused: {refusal}")
    if finish == "length":
        raise ValueError(
            "the model's answer was cut off at its output token limit (finish_reason "
            "'length'); raise max_completion_tokens"
        )
    if finish == "content_filter":
        raise ValueError("the provider's content filter withheld the model's answer")
    raw_calls = getattr(message, "tool_calls", None) or []
    if not isinstance(raw_calls, list):
        raise ValueError(f"the model's tool calls are not a list: {raw_calls!r}")
    text = getattr(message, "content", None) or ""
    return answer(
        text,
        [_call(raw) for raw in raw_calls],
        usage,
        f"the model's response has neither text nor a tool call: {message!r}",
    )


def _call(raw: Any) -> ToolCall:
    """One tool call of the answer. A call that names no function is an error of the
    response; arguments that cannot be read go back to the model (``malformed``)."""
    try:
        fn = raw.function
        name, arguments = fn.name, fn.arguments
    except AttributeError as exc:
        raise ValueError(
            f"the model's tool call has no function name and arguments: {raw!r}"
        ) from exc
    return tool_call(name, getattr(raw, "id", None), arguments, fn)


def _usage(response: Any, finish: str) -> Usage:
    """The completion's usage: prompt (with its cached part), completion and total tokens."""
    usage = getattr(response, "usage", None)
    prompt = int_field(getattr(usage, "prompt_tokens", None))
    completion = int_field(getattr(usage, "completion_tokens", None))
    details = getattr(usage, "prompt_tokens_details", None)
    model = getattr(response, "model", None)
    response_id = getattr(response, "id", None)
    return Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=int_field(getattr(usage, "total_tokens", None)) or prompt + completion,
        cache_read_input_tokens=int_field(getattr(details, "cached_tokens", None)),
        cache_creation_input_tokens=int_field(getattr(details, "cache_write_tokens", None)),
        model=model if isinstance(model, str) else "",
        response_id=response_id if isinstance(response_id, str) else "",
        finish_reason=finish if isinstance(finish, str) else "",
    )
