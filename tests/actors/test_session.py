"""Agent sessions on real SQLite files: one step per message, the ask answered by the task's
final answer, recovery at the frontier, the error taxonomy wired in, cancellation, approvals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.actors import session_agents as sa
from tests.actors.session_agents import (
    LoopingAgent,
    RefundAgent,
    ScriptedAgent,
    SlowAgent,
    StubbornAgent,
)
from tether.actors.session import GetSessionInfo, StepBegun

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    sa.LOG.clear()
    yield
    sa.LOG.clear()


def runtime(path: Path, **kw: Any) -> tether.Runtime:
    kw.setdefault("poll_interval", 0.02)
    return tether.Runtime(path / "agents.db", **kw)


async def test_a_session_answers_the_ask_with_its_final_answer(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders", constraints=["x"])
        answer = await s.ask(tether.UserMessage("please refund order 42"), timeout=10)
        info = await s.ask(GetSessionInfo(), timeout=5)
    assert answer == "Done: refunded 1500 on 42."
    assert [name for name, _ in sa.LOG] == ["lookup_order", "refund"]
    assert info.status == "idle"
    assert info.outcome == "finished"
    assert info.steps == 3
    assert info.last_answer == answer


async def test_each_step_commits_on_its_own_with_belief_and_frontier_journaled(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders")
        await s.ask(tether.UserMessage("please refund order 42"), timeout=10)
        rows = await rt.store.load_journal("s1", 0, 1000)
    import msgspec

    from tether.actors.session import SessionEvent

    events = [msgspec.msgpack.decode(r.payload, type=SessionEvent) for r in rows]
    names = [type(e).__name__ for e in events]
    assert names == [
        "TaskStarted",
        "StepBegun", "ModelDecided", "ToolResult",
        "StepBegun", "ModelDecided", "ToolResult",
        "StepBegun", "ModelDecided", "TaskEnded",
    ]  # fmt: skip
    begun = [e for e in events if isinstance(e, StepBegun)]
    assert [b.step for b in begun] == [1, 2, 3]
    assert begun[2].belief == "order 42 is delivered; refund 1500"


async def test_spawning_an_existing_session_resumes_it(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders")
        await s.ask(tether.UserMessage("please refund order 42"), timeout=10)
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders")
        info = await s.ask(GetSessionInfo(), timeout=5)
        assert info.task == 1
        assert info.last_answer == "Done: refunded 1500 on 42."
        fresh = await rt.spawn(RefundAgent, "s2", goal="Refund delivered orders")
        assert (await fresh.ask(GetSessionInfo(), timeout=5)).task == 0


async def test_invalid_arguments_go_back_to_the_model_for_one_correction(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(ScriptedAgent, "s1", goal="Check orders")
        answer = await s.ask(tether.UserMessage("check order 42"), timeout=10)
        request = sa.SCRIPTED.requests[1]
    assert answer == "order 42 is delivered"
    # The second decision saw the validation error of the first call.
    [first] = request.bundle.tool_results
    assert first.error is not None
    assert "Expected `str`, got `int` - at `$.order_id`" in first.error
    assert [name for name, _ in sa.LOG] == ["lookup_order"]


async def test_invalid_arguments_twice_escalate_the_task(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(StubbornAgent, "s1", goal="Check orders")
        answer = await s.ask(tether.UserMessage("check order 42"), timeout=10)
        info = await s.ask(GetSessionInfo(), timeout=5)
    assert answer.startswith("I need a person's help: escalated: invalid tool call twice")
    assert info.outcome.startswith("stopped: escalated")
    assert sa.LOG == []


async def test_a_loop_follows_the_session_loop_policy(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(LoopingAgent, "s1", goal="Check orders")
        answer = await s.ask(tether.UserMessage("check order 42"), timeout=10)
        info = await s.ask(GetSessionInfo(), timeout=5)
    assert info.outcome.startswith("stopped: loop detected: lookup_order was called 3 times")
    assert answer.startswith("I stopped before finishing")
    assert len(sa.LOG) == 2


async def test_a_cancel_stops_the_running_task_between_steps(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(SlowAgent, "s1", goal="Look orders up")
        await s.tell(tether.UserMessage("keep looking"))
        with anyio.fail_after(5):
            while len(sa.LOG) < 3:
                await anyio.sleep(0.01)
        assert await s.ask(tether.CancelTask(reason="enough"), timeout=5) == "cancelled"
        calls = len(sa.LOG)
        await anyio.sleep(0.2)
        info = await s.ask(GetSessionInfo(), timeout=5)
        assert info.status == "idle"
        assert info.outcome == "cancelled"
        assert len(sa.LOG) <= calls + 1  # at most the step already under way
        assert await s.ask(tether.CancelTask(), timeout=5) == "no task is running"


async def test_a_risky_call_waits_for_approval_and_the_task_then_finishes(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders")
        await s.tell(tether.UserMessage("please refund order 43"), dedup_key="ask-43")
        with anyio.fail_after(5):
            while not (pending := await rt.approvals.pending()):
                await anyio.sleep(0.01)
        [request] = pending
        assert request.tool == "big_refund"
        assert request.context["goal"] == "Refund delivered orders"
        assert request.context["task"] == "please refund order 43"
        await rt.approvals.decide(request.request_id, tether.Approve(by="manager"))
        answer = await s.ask(
            tether.UserMessage("please refund order 43"), timeout=10, dedup_key="ask-43"
        )
    assert answer == "Done: refunded 90000 on 43 (approved)."


async def test_a_rejection_reason_reaches_the_model(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders")
        await s.tell(tether.UserMessage("please refund order 43"))
        with anyio.fail_after(5):
            while not (pending := await rt.approvals.pending()):
                await anyio.sleep(0.01)
        await rt.approvals.decide(
            pending[0].request_id, tether.Reject(by="manager", reason="needs a receipt first")
        )
        with anyio.fail_after(5):
            while (info := await s.ask(GetSessionInfo(), timeout=5)).status != "idle":
                await anyio.sleep(0.01)
    assert "needs a receipt first" in info.last_answer
    assert ("big_refund", ("43", 90_000)) not in sa.LOG


async def test_a_session_needs_a_goal_and_a_model(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        with pytest.raises(tether.ConfigError, match="goal"):
            await rt.spawn(RefundAgent, "s1")
        with pytest.raises(tether.ConfigError, match="message"):
            await rt.spawn(RefundAgent, "s2", goal="x", message="y")
    with pytest.raises(tether.ConfigError, match=r"declare tools with @tether\.tool"):

        class Broken(tether.AgentSession):
            tools = [print]  # type: ignore[list-item]
