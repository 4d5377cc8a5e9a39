"""The model an agent session asks for its next action: a protocol, and what crosses it.

A model gets a :class:`ModelRequest` — the session, the context bundle assembled for this step
and the specs of the tools it may call — and returns a :class:`Decision`: call one tool, or give
the final answer. The session records every decision in its effects ledger (I6), so a recovered
step replays what the model decided and never asks it again.

Adapters for real providers are thin: map ``request.context`` (role/content dicts) and
``request.tools`` (name, description, JSON schema) to the provider's call, and its answer back
to a ``ToolCall`` or a ``FinalAnswer``. ``tether.testing.ScriptedModel`` is the one tests use.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import msgspec

from tether.actors.context import ContextBundle


class ToolCall(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """The model's decision to call ``tool`` with ``args``. ``thought`` is its reasoning, kept
    as the session's belief."""

    tool: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    thought: str = ""


class FinalAnswer(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """The model's answer to the task: it ends the task and answers whoever asked."""

    text: str
    thought: str = ""


Decision = ToolCall | FinalAnswer


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
