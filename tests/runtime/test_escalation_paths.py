"""A person's decision on an escalated call holds, whatever escalated it (I9): every escalation
path — ``requires_approval``, repeated failures, the loop detector's repeat, cycle, window and
no-progress patterns, ``escalation_reason()`` (also one that answers otherwise once it has held
the call) — with every outcome — approve, reject, modify, and a deadline that passes with
``on_timeout`` either way.

The held step is delivered again once the request is settled. What escalated the call may not
be found again then (the loop detector takes the replayed call for no new one, a no-progress
detection was used up): the recorded decision must decide it all the same. So in each case the
right call runs exactly once (or not at all), counted in the world's own record; the model is
told the outcome (its final answer repeats what it heard, a rejection with its reason); and no
second request is made. Crash cases, with a real process SIGKILLed after the decision is
recorded, are in ``tests/chaos/test_escalation_crash.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.runtime.escalation_agents import AGENTS, OUTBOX, PLANS, REASONS, sent
from tether.actors.session import GetSessionInfo, SessionInfo
from tether.testing import FakeClock

pytestmark = pytest.mark.anyio

TIMEOUT = 60.0  # the requests' deadline, on the fake clock: it passes only when a test says so


@pytest.fixture(autouse=True)
def _outbox(tmp_path: Path) -> Iterator[None]:
    OUTBOX.path = str(tmp_path / "sent.jsonl")
    yield
    OUTBOX.path = ""


Decide = Callable[[tether.Runtime, FakeClock, tether.ApprovalRequest], Awaitable[Any]]


@dataclass(frozen=True)
class Outcome:
    """How a request is settled, and what must follow."""

    decide: Decide
    on_timeout: str = "reject"
    runs: str | None = "requested"  # "requested" | "modified" | None: nothing runs
    heard: str = ""  # the start of what the model is told when nothing runs


async def _approve(rt: tether.Runtime, clock: FakeClock, r: tether.ApprovalRequest) -> Any:
    return await rt.approvals.decide(r.request_id, tether.Approve(by="alice"))


async def _reject(rt: tether.Runtime, clock: FakeClock, r: tether.ApprovalRequest) -> Any:
    return await rt.approvals.decide(r.request_id, tether.Reject(by="bob", reason="not today"))


async def _modify(rt: tether.Runtime, clock: FakeClock, r: tether.ApprovalRequest) -> Any:
    return await rt.approvals.decide(r.request_id, tether.Modify(by="carol", args=modified(r.args)))


async def _let_it_expire(rt: tether.Runtime, clock: FakeClock, r: tether.ApprovalRequest) -> None:
    clock.advance(TIMEOUT + 1)


OUTCOMES = {
    "approve": Outcome(_approve),
    "reject": Outcome(_reject, runs=None, heard="A person rejected this call (bob): not today"),
    "modify": Outcome(_modify, runs="modified"),
    "timeout-reject": Outcome(
        _let_it_expire,
        runs=None,
        heard="A person rejected this call (timeout): no decision within the deadline",
    ),
    "timeout-approve": Outcome(_let_it_expire, on_timeout="approve"),
}


def modified(args: dict[str, Any]) -> dict[str, Any]:
    return {**args, "text": "instead"}


def delivered(calls: list[tether.ToolCall]) -> list[dict[str, Any]]:
    """What the world receives from ``calls`` ("fail …" texts are refused)."""
    return [
        {"to": c.args["to"], "text": c.args["text"]}
        for c in calls
        if not c.args["text"].startswith("fail")
    ]


def the_world() -> list[dict[str, Any]]:
    return [{"to": m["to"], "text": m["text"]} for m in sent()]


async def the_request(rt: tether.Runtime) -> tether.ApprovalRequest:
    with anyio.fail_after(10):
        while not (pending := await rt.approvals.pending()):
            await anyio.sleep(0.01)
    [request] = pending
    return request


async def task_ended(session: tether.ActorRef) -> SessionInfo:
    with anyio.fail_after(10):
        while True:
            info: SessionInfo = await session.ask(GetSessionInfo(), timeout=10)
            if info.outcome:
                return info
            await anyio.sleep(0.01)


@pytest.mark.parametrize("outcome", list(OUTCOMES))
@pytest.mark.parametrize("path", list(PLANS))
async def test_a_decision_on_an_escalated_call_holds_whatever_escalated_it(
    tmp_path: Path, path: str, outcome: str
) -> None:
    plan, how = PLANS[path], OUTCOMES[outcome]
    *before, escalated = plan
    clock = FakeClock()
    policy = tether.ApprovalPolicy(timeout=TIMEOUT, on_timeout=how.on_timeout)  # type: ignore[arg-type]
    async with tether.Runtime(
        tmp_path / "agents.db",
        clock=clock,
        lease_ttl=24 * 3600.0,  # the fake clock jumps past the deadline, never past the leases
        poll_interval=0.02,
        approval_policy=policy,
    ) as rt:
        session = await rt.spawn(AGENTS[path], "s1", goal="send the messages")
        await session.tell(tether.UserMessage("go"))
        request = await the_request(rt)
        assert request.reason.startswith(REASONS[path]), request.reason
        assert (request.tool, request.args) == (escalated.tool, escalated.args)
        assert the_world() == delivered(before)  # held: not sent

        await how.decide(rt, clock, request)
        info = await task_ended(session)
        records = await rt.store.find_approvals(actor_id="s1")

    assert info.outcome == "finished"
    if how.runs is None:
        assert the_world() == delivered(before)  # never sent, on any redelivery
        assert info.last_answer.startswith(f"heard: {how.heard}"), info.last_answer
    else:
        args = escalated.args if how.runs == "requested" else modified(escalated.args)
        assert the_world() == [*delivered(before), args]  # exactly once, exactly that call
        assert info.last_answer == f"heard: sent {args['text']} to {args['to']}"
    [record] = records  # the replayed step asked no one again
    assert record.request_id == request.request_id
    assert record.status == ("rejected" if how.runs is None else "approved")
