"""What defining an ``AgentSession`` subclass checks and builds: its class settings, refused
at once when bad, its tools by name, and its model as the tool every decision goes through.

``AgentSession.__init_subclass__`` calls these (``session.py``); they read the class through
``SessionClass``, the settings it declares, so that this module needs nothing of the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

from tether.actors import genai
from tether.actors.actor import check_items
from tether.actors.context import TokenCounter
from tether.actors.guards.gate import ApprovalPolicy
from tether.actors.guards.loops import LoopPolicy
from tether.actors.model import Decision, Model, ModelRequest
from tether.actors.tool import Tool
from tether.errors import ConfigError

#: The name of a session's model calls in the effects ledger (each one is an effect).
MODEL_TOOL = "model"


class SessionClass(Protocol):
    """The class settings of an ``AgentSession`` subclass (documented there)."""

    tools: ClassVar[Sequence[Tool]]
    model: ClassVar[Model]
    context_budget: ClassVar[int]
    count_tokens: ClassVar[TokenCounter]
    max_steps: ClassVar[int]
    model_timeout: ClassVar[float]
    loop_policy: ClassVar[LoopPolicy | None]
    escalate_after_failures: ClassVar[int | None]
    max_history: ClassVar[int]


def tools_by_name(cls: type[SessionClass]) -> dict[str, Tool]:
    """``cls.tools`` by name; ``ConfigError`` for an item that is not a tool, or two tools of
    one name."""
    check_items(
        cls.tools,
        Tool,
        f"{cls.__qualname__}.tools",
        "a list or tuple of @tether.tool functions",
        "declare tools with @tether.tool",
    )
    names: dict[str, Tool] = {}
    for t in cls.tools:
        if t.name in names:
            raise ConfigError(f"{cls.__qualname__}.tools has two tools named {t.name!r}")
        if t.name == MODEL_TOOL:
            # The model's calls are the tool of this name: a tool sharing it would share its
            # breaker (its failures would stop the session's model) and its ledger rows would
            # read as model decisions in the CLI and the console.
            raise ConfigError(
                f"{cls.__qualname__}.tools has a tool named {MODEL_TOOL!r}, the name of the "
                "session's own model calls: rename it (@tether.tool(name=...); for MCP tools "
                "tether.mcp.tools(..., prefix=...) or options={'model': {'name': ...}})"
            )
        names[t.name] = t
    return names


def model_tool(cls: type[SessionClass]) -> Tool:
    """The tool a session of ``cls`` asks its model through (``cls.model``, read at each call)."""

    async def model(request: ModelRequest) -> Decision:
        return await genai.decide(cls.model, request)  # a GenAI client span and metrics

    return Tool(
        model,
        name=MODEL_TOOL,
        recovery="retry",  # asking again has no side effect; a recorded decision is replayed
        breaker="model",
        timeout=cls.model_timeout,
        description="the session's model",
        loop_guard=False,
        defer_receipt=False,  # I6: once the model answered, it is never asked again
        bound_nesting=False,  # the session's own request (its decisions are bounded: results)
    )


def check_settings(cls: type[SessionClass]) -> None:
    """Refuse a bad class setting when the class is defined. Unchecked, each one failed later
    and far away: a bare TypeError on the first step (a str number, a count_tokens that is not
    callable), a session that could never act (max_steps=0; escalate_after_failures=0 held even
    the model's call for a person), or nothing until a call needed the policy."""
    where = cls.__qualname__
    limit = cls.max_history
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(
            f"{where}.max_history must be an int >= 1 (the number of history "
            f"entries a session keeps), not {limit!r}"
        )

    def positive_int(name: str, value: object, *, optional: bool = False) -> None:
        if optional and value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            none = " or None" if optional else ""
            raise ConfigError(f"{where}.{name} must be an int >= 1{none}, not {value!r}")

    positive_int("context_budget", cls.context_budget)
    positive_int("max_steps", cls.max_steps)
    positive_int("escalate_after_failures", cls.escalate_after_failures, optional=True)
    if not callable(cls.count_tokens):
        raise ConfigError(
            f"{where}.count_tokens must be a function of a str, not {cls.count_tokens!r}"
        )
    if cls.loop_policy is not None and not isinstance(cls.loop_policy, LoopPolicy):
        raise ConfigError(
            f"{where}.loop_policy must be a tether.LoopPolicy or None, not {cls.loop_policy!r}"
        )
    approval = getattr(cls, "approval_policy", None)
    if approval is not None and not isinstance(approval, ApprovalPolicy):
        raise ConfigError(
            f"{where}.approval_policy must be a tether.ApprovalPolicy or None, not {approval!r}"
        )
    # A class without a model may be a base for sessions that set one: spawning it is refused.
    model = getattr(cls, "model", None)
    if model is not None and not isinstance(model, Model):
        raise ConfigError(
            f"{where}.model must be a tether.Model (an object with async decide(request)), "
            f"not {model!r}"
        )
