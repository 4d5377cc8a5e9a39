"""I9 under SIGKILL: a decision on an escalated call holds across a crash, whatever escalated
the call — including what a crash forgets: the count of a tool's failures in a row lives in
memory, and so does a no-progress detection waiting for the session's next call.

The agent (``python -m tests.chaos.escalation_programs agent``) runs one session on a real
SQLite file. Its call is escalated; a person decides (from this test's own process, through a
``Runtime(db, serve=False)``) or the deadline passes; the agent SIGKILLs itself just before
the first commit that follows from the decision (the approved call's intent, or the step that
tells the model of the rejection). A second agent takes over the store. The world is the
outbox file the ``send`` tools append to in whichever process really sends.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.chaos.approval_programs import requests_of
from tests.chaos.escalation_programs import EXPIRY, SESSION
from tests.chaos.harness import Child, Children
from tests.runtime.escalation_agents import PLANS, REASONS

pytestmark = pytest.mark.slow  # crash tests: real child processes, real signals

WAIT = 30.0  # every wait on a child, generously
LONG = 3600.0  # the deadline when a person decides


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.db = tmp_path / "agents.db"
        self.outbox = tmp_path / "sent.jsonl"
        self.children = Children(tmp_path, module="tests.chaos.escalation_programs")

    def agent(self, path: str, on_timeout: str, expiry: float, kill: str) -> Child:
        args = (self.db, self.outbox, path, on_timeout, expiry, kill)
        return self.children.start("agent", "agent", *args)

    def sent(self) -> list[dict[str, Any]]:
        if not self.outbox.exists():
            return []
        lines = self.outbox.read_text().splitlines()
        return [
            {k: v for k, v in json.loads(line).items() if k in ("to", "text")} for line in lines
        ]

    def requests(self) -> list[tether.ApprovalRequest]:
        """The session's requests as the store holds them (read while no agent runs)."""

        async def read() -> list[tether.ApprovalRequest]:
            async with tether.Runtime(self.db, serve=False) as rt:
                return await requests_of(rt, SESSION)

        return anyio.run(read)

    def decide(
        self, request_id: str, decision: tether.Approve | tether.Reject | tether.Modify
    ) -> None:
        async def decide() -> None:
            async with tether.Runtime(self.db, serve=False) as rt:
                await rt.approvals.decide(request_id, decision)

        anyio.run(decide)

    def describe(self) -> str:
        return f"sent: {self.sent()}\n{self.children.describe()}"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    try:
        yield w
    finally:
        w.children.close()


MODIFIED_TEXT = "instead"

# outcome -> (on_timeout, what a person decides or None for the deadline, what runs)
OUTCOMES: dict[str, tuple[str, str | None, str | None]] = {
    "approve": ("reject", "approve", "requested"),
    "reject": ("reject", "reject", None),
    "modify": ("reject", "modify", "modified"),
    "timeout-reject": ("reject", None, None),
    "timeout-approve": ("approve", None, "requested"),
}


def _decision(kind: str, args: dict[str, Any]) -> tether.Approve | tether.Reject | tether.Modify:
    if kind == "approve":
        return tether.Approve(by="alice")
    if kind == "reject":
        return tether.Reject(by="bob", reason="not today")
    return tether.Modify(by="carol", args={**args, "text": MODIFIED_TEXT})


@pytest.mark.parametrize("outcome", list(OUTCOMES))
@pytest.mark.parametrize("path", ["failures", "no_progress"])
def test_a_decision_recorded_before_a_crash_holds_after_it(
    world: World, path: str, outcome: str
) -> None:
    on_timeout, kind, runs = OUTCOMES[outcome]
    *before, escalated = PLANS[path]
    already = [c.args for c in before if not c.args["text"].startswith("fail")]
    first = world.agent(path, on_timeout, LONG if kind else EXPIRY, kill="settled")
    if kind is not None:
        first.wait_for(lambda: first.has("pending"), WAIT, "the escalated call's request")
        [pending] = first.reported("pending")
        world.decide(pending["request_id"], _decision(kind, escalated.args))
    # The agent saw the decision (or the deadline) and died before anything followed from it.
    assert first.wait(WAIT) == -signal.SIGKILL, world.describe()
    assert first.value("dying") == "settled", world.describe()
    assert world.sent() == already, world.describe()
    [asked] = world.requests()
    assert asked.reason.startswith(REASONS[path]), world.describe()
    assert asked.requested_args == escalated.args, world.describe()
    assert asked.status == ("rejected" if runs is None else "approved"), world.describe()

    back = world.agent(path, on_timeout, LONG, kill="none")
    assert back.wait(WAIT) == 0, world.describe()
    outcome_, answer = back.reported("answer")
    assert outcome_ == "finished", world.describe()
    if runs is None:
        assert world.sent() == already, world.describe()  # rejected: never sent
        who = "bob): not today" if kind else "timeout): no decision within the deadline"
        assert answer.startswith(f"heard: A person rejected this call ({who}"), answer
    else:
        args = escalated.args if runs == "requested" else {**escalated.args, "text": MODIFIED_TEXT}
        assert world.sent() == [*already, args], world.describe()  # once, exactly that call
        assert answer == f"heard: sent {args['text']} to {args['to']}", world.describe()
    [request] = back.reported("approvals")  # no second request
    assert request["request_id"] == asked.request_id, world.describe()
    assert not back.has("pending"), world.describe()
