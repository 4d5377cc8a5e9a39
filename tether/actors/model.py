"""The model an agent session asks for its next action: a protocol, and what crosses it.

A model gets a :class:`ModelRequest` — the session, the context bundle assembled for this step
and the specs of the tools it may call — and returns a :class:`Decision`: call one tool, call
several (one answer with parallel tool calls), or give the final answer. The session records
every decision in its effects ledger (I6), so a recovered step replays what the model decided
and never asks it again.

Adapters for real providers (``tether.models.openai``, ``tether.models.anthropic``) map
``request.bundle`` to the provider's messages — the tool history as the provider's own tool
calls and tool results, with the provider's call ids kept on each :class:`ToolCall` and on the
history's ``ToolCallRecord`` — and ``request.tools`` (name, description, JSON schema) to its
tool definitions; the answer comes back as a decision that carries the call's :class:`Usage`.
``tether.testing.ScriptedModel`` is the one tests use.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import msgspec

from tether.actors.context import ContextBundle
from tether.errors import ConfigError


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """What one model call used and who answered it, as the provider reported it.

    Kept on the decision, so it is in the journal (``ModelDecided``) and in the model call's
    receipt in the effects ledger, and a replayed step shows the same figures. The token
    fields are the OpenTelemetry GenAI semantic conventions' ``gen_ai.usage.*`` attributes:
    ``input_tokens`` counts every prompt token, cached ones included (an Anthropic answer's
    ``input_tokens`` excludes its cache reads and writes, so the adapter adds them), and the
    two ``cache_*`` fields say how many of them were read from or written to the provider's
    prompt cache. ``model``, ``response_id`` and ``finish_reason`` are ``gen_ai.response.*``.
    """

    input_tokens: int = 0  # gen_ai.usage.input_tokens (OpenAI: prompt_tokens)
    output_tokens: int = 0  # gen_ai.usage.output_tokens (OpenAI: completion_tokens)
    total_tokens: int = 0  # input + output, or the provider's own total
    cache_read_input_tokens: int = 0  # gen_ai.usage.cache_read.input_tokens
    cache_creation_input_tokens: int = 0  # gen_ai.usage.cache_creation.input_tokens
    model: str = ""  # gen_ai.response.model: the model that answered
    response_id: str = ""  # gen_ai.response.id
    finish_reason: str = (
        ""  # gen_ai.response.finish_reasons (OpenAI finish_reason, Anthropic stop_reason)
    )

    def __add__(self, other: Usage) -> Usage:
        """The token counts of two calls together (a session's running total), with the
        later call's model; a response id and a finish reason belong to one call, so a sum
        has none."""
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_input_tokens=(
                self.cache_creation_input_tokens + other.cache_creation_input_tokens
            ),
            model=other.model or self.model,
        )


class ToolCall(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """The model's decision to call ``tool`` with ``args``. ``thought`` is its reasoning, kept
    as the session's belief.

    ``call_id`` is the provider's id for the call (``call_…``, ``toolu_…``), empty for models
    without one. It is journaled with the decision and copied to the call's history record, so
    the result goes back under the same id on every later request, after a replay or a restart
    too. ``malformed`` says why the call as the model sent it could not be read (its arguments
    are not valid JSON, or not an object); ``args`` is then empty, the call is not made, and
    the session tells the model the problem as the call's result, as for arguments that do not
    fit the tool's schema.
    """

    tool: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    thought: str = ""
    call_id: str = ""
    malformed: str = ""
    usage: Usage | None = None


class ToolCalls(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """One answer with several tool calls (OpenAI's parallel tool calls, Anthropic's several
    ``tool_use`` blocks). The session makes them in order, each its own effect through the
    guards and the ledger, and answers every one of them before it asks the model again (the
    providers require a result for each call id). ``thought`` and ``usage`` are the answer's;
    each call's own are unused."""

    calls: tuple[ToolCall, ...]
    thought: str = ""
    usage: Usage | None = None

    def __post_init__(self) -> None:
        if not self.calls:
            raise ConfigError("a ToolCalls decision needs at least one call")
        for call in self.calls:
            if not isinstance(call, ToolCall):
                raise ConfigError(f"a ToolCalls decision holds ToolCall items, not {call!r}")


class FinalAnswer(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """The model's answer to the task: it ends the task and answers whoever asked."""

    text: str
    thought: str = ""
    usage: Usage | None = None


Decision = ToolCall | ToolCalls | FinalAnswer

DECISION_TYPES = (ToolCall, ToolCalls, FinalAnswer)
"""The decision classes, for ``isinstance`` checks."""


def calls_of(decision: ToolCall | ToolCalls) -> tuple[ToolCall, ...]:
    """The calls of a decision, in the order the model gave them."""
    return decision.calls if isinstance(decision, ToolCalls) else (decision,)


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a model sees before deciding one step.

    ``decisions`` counts the decisions this session recorded before this one (across tasks and
    restarts), so a scripted model can pick its next line deterministically.
    """

    session_id: str
    task: int
    step: int
    decisions: int
    context: list[dict[str, str]]
    tools: list[dict[str, Any]]
    bundle: ContextBundle


@runtime_checkable
class Model(Protocol):
    """Anything with ``async decide(request) -> Decision``."""

    async def decide(self, request: ModelRequest) -> Decision: ...
