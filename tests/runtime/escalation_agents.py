"""Agent sessions that escalate one call to a person, one class per escalation path (module
level: the runtime, and the crash tests' child processes, import them by path).

Each session's scripted model makes the calls of its path's :data:`PLANS` entry in order, the
last of which is the one the path escalates; once that one has an outcome, the model answers
``heard: <what the last call returned, or its error>``, so the task's answer is what the model
was told. The ``send`` tools append one JSON line per call they carry out to the file named by
``OUTBOX.path``: the world's own record, read by the tests (and across processes).
"""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

import tether
from tests.chaos.programs import append_line
from tether.testing import ScriptedModel


class _Outbox:
    path = ""  # set by the test (or the child program) before anything is sent


OUTBOX = _Outbox()


def sent() -> list[dict[str, Any]]:
    """Every message the world received, in order."""
    if not OUTBOX.path or not os.path.exists(OUTBOX.path):
        return []
    with open(OUTBOX.path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


async def _deliver(to: str, text: str, key: str) -> str:
    if text.startswith("fail"):
        raise ValueError(f"the outbox refused {text!r}")  # a failure: recorded, not retried
    append_line(OUTBOX.path, {"to": to, "text": text, "key": key, "pid": os.getpid()})
    return f"sent {text} to {to}"


@tether.tool(recovery="retry", breaker=None)
async def send(to: str, text: str, idempotency_key: str) -> str:
    """Send a message (texts starting with "fail" are refused)."""
    return await _deliver(to, text, idempotency_key)


@tether.tool(recovery="retry", breaker=None, requires_approval=True)
async def send_signed(to: str, text: str, idempotency_key: str) -> str:
    """Send a message in the company's name: a person approves each one."""
    return await _deliver(to, text, idempotency_key)


def _call(text: str, to: str = "ann", tool: str = "send") -> tether.ToolCall:
    return tether.ToolCall(tool=tool, args={"to": to, "text": text})


# path -> the calls the model makes, the escalated one last
PLANS: dict[str, list[tether.ToolCall]] = {
    "requires_approval": [_call("hello", tool="send_signed")],
    "failures": [_call("fail 1"), _call("fail 2"), _call("hello")],
    "repeat": [_call("hello")] * 3,
    "cycle": [_call("a"), _call("b"), _call("a"), _call("b")],
    "window": [_call("a"), _call("b"), _call("a"), _call("c"), _call("a")],
    "no_progress": [_call("a")] * 3 + [_call("hello")],
    "escalation_reason": [_call("hello", to="board")],
    "changed_reason": [_call("hello", to="board")],
}

# path -> why its last call is held (the start of the request's reason)
REASONS: dict[str, str] = {
    "requires_approval": "tool send_signed requires approval",
    "failures": "tool send failed 2 times in a row in this session",
    "repeat": "loop detected: send was called 3 times in a row",
    "cycle": "loop detected: The sequence send → send repeated 2 times",
    "window": "loop detected: send was called 3 times with the same arguments",
    "no_progress": "loop detected: send returned the same result 3 times in a row",
    "escalation_reason": "a message to the board needs a person",
    "changed_reason": "the board's messages need a person (a rule about to change)",
}


def _planned(plan: list[tether.ToolCall]) -> ScriptedModel:
    def decide(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
        done = request.bundle.tool_results
        if len(done) < len(plan):
            return plan[len(done)]
        last = done[-1]
        return tether.FinalAnswer(text=f"heard: {last.error or last.result}")

    return ScriptedModel(decide)


def _only(**pattern: Any) -> tether.LoopPolicy:
    """A loop policy with every pattern off but the given ones."""
    off: dict[str, Any] = {"repeat": None, "cycle_period": None, "window": None}
    return tether.LoopPolicy(**{**off, "no_progress": None, **pattern})


class Escalating(tether.AgentSession):
    """The base: no loop detection and no failure count, unless a path sets one."""

    tools = [send, send_signed]
    model = _planned(PLANS["requires_approval"])
    loop_policy: ClassVar[tether.LoopPolicy | None] = None
    escalate_after_failures: ClassVar[int | None] = None


class RequiresApprovalAgent(Escalating):
    pass


class FailuresAgent(Escalating):
    model = _planned(PLANS["failures"])
    escalate_after_failures = 2


class RepeatAgent(Escalating):
    model = _planned(PLANS["repeat"])
    loop_policy = _only(repeat=3, on_repeat="escalate")


class CycleAgent(Escalating):
    model = _planned(PLANS["cycle"])
    loop_policy = _only(cycle_period=2, cycle_repeats=2, on_cycle="escalate")


class WindowAgent(Escalating):
    model = _planned(PLANS["window"])
    loop_policy = _only(window=3, window_size=10, on_window="escalate")


class NoProgressAgent(Escalating):
    model = _planned(PLANS["no_progress"])
    loop_policy = _only(no_progress=3, on_no_progress="escalate")


class PolicyAgent(Escalating):
    model = _planned(PLANS["escalation_reason"])

    def escalation_reason(self, tool: str, args: dict[str, Any]) -> str | None:
        return "a message to the board needs a person" if args.get("to") == "board" else None


# The tests (by their outbox) whose rule about the board has changed since a call was held.
_RULE_CHANGED: set[str] = set()


class ChangedPolicyAgent(Escalating):
    """``escalation_reason`` answers otherwise once it has held a call: a rule a person changed
    while the call waited. The decision on the held call stands all the same (I9): a rejected
    call must not run because its reason is gone by the time its step is delivered again."""

    model = _planned(PLANS["changed_reason"])

    def escalation_reason(self, tool: str, args: dict[str, Any]) -> str | None:
        if args.get("to") != "board" or OUTBOX.path in _RULE_CHANGED:
            return None
        _RULE_CHANGED.add(OUTBOX.path)
        return REASONS["changed_reason"]


AGENTS: dict[str, type[Escalating]] = {
    "requires_approval": RequiresApprovalAgent,
    "failures": FailuresAgent,
    "repeat": RepeatAgent,
    "cycle": CycleAgent,
    "window": WindowAgent,
    "no_progress": NoProgressAgent,
    "escalation_reason": PolicyAgent,
    "changed_reason": ChangedPolicyAgent,
}
