"""Agent sessions on real SQLite files: one step per message, the ask answered by the task's
final answer, recovery at the frontier, the error taxonomy wired in, cancellation, approvals."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import tether
from tests.actors import session_agents as sa
from tests.actors.session_agents import (
    LoopingAgent,
    RefundAgent,
    ScriptedAgent,
    ShortMemoryAgent,
    SlowAgent,
    StubbornAgent,
)
from tether.actors.context import ChatMessage, ToolCallRecord
from tether.actors.session import GetSessionInfo, SessionState, StepBegun, TaskStarted
from tether.testing import ScriptedModel

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


async def test_a_context_reset_summary_counts_every_call_of_the_task_not_only_the_kept_ones(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(sa.ForgetfulLoopingAgent, "s1", goal="Check orders")
        answer = await s.ask(tether.UserMessage("check order 42"), timeout=10)
        state: SessionState = rt.cells["s1"].state
    assert answer == "order 42 is delivered"
    assert len(sa.LOG) == 3  # the fourth call was the repeat: not made
    assert state.summary.startswith("The context was reset because the session repeated itself")
    # The bound kept one call of the three; the summary tells the model about all three.
    assert sum(isinstance(e, ToolCallRecord) for e in state.history) <= 1
    assert state.summary.endswith("Tool calls so far: 3 (lookup_order).")
    assert (state.task_calls, state.task_tools) == (3, ("lookup_order",))


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


# -- the history bound (max_history) --------------------------------------------------------


def _task_entries(order_id: str) -> list[ChatMessage | ToolCallRecord]:
    """What one ShortMemoryAgent task adds to the history."""
    result = msgspec.json.encode(msgspec.to_builtins(sa.ORDERS[order_id]), order="sorted")
    return [
        ChatMessage(role="user", text=f"check order {order_id}"),
        ChatMessage(role="assistant", text="look"),
        ToolCallRecord(tool="lookup_order", args={"order_id": order_id}, result=result.decode()),
        ChatMessage(role="assistant", text=f"found: {result.decode()}"),
    ]


async def _run_tasks(s: tether.ActorRef, n: int) -> list[ChatMessage | ToolCallRecord]:
    """Run ``n`` tasks one after the other; every entry they add, oldest first."""
    added: list[ChatMessage | ToolCallRecord] = []
    for i in range(n):
        order_id = "42" if i % 2 == 0 else "43"
        answer = await s.ask(tether.UserMessage(f"check order {order_id}"), timeout=10)
        assert answer.startswith("found: ")
        added.extend(_task_entries(order_id))
    return added


async def test_a_session_keeps_only_its_newest_history_entries_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(ShortMemoryAgent, "s1", goal="Check orders")
        added = await _run_tasks(s, 10)
        state: SessionState = rt.cells["s1"].state
    assert len(added) == 40
    assert list(state.history) == added[-5:]
    assert state.history_dropped == 35
    assert state.task == 10
    assert state.outcome == "finished"


async def test_a_restarted_runtime_folds_the_bounded_history_to_the_same_state(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path, snapshot_every=9) as rt:
        s = await rt.spawn(ShortMemoryAgent, "s1", goal="Check orders")
        await _run_tasks(s, 6)
        live: SessionState = rt.cells["s1"].state
    assert live.history_dropped == 24 - 5
    async with runtime(tmp_path, snapshot_every=9) as rt:
        await rt.ref("s1").ask(GetSessionInfo(), timeout=5)
        from_snapshot = rt.cells["s1"].state
    with sqlite3.connect(tmp_path / "agents.db") as con:
        (snap_seq,) = con.execute("SELECT seq FROM snapshots WHERE actor_id = 's1'").fetchone()
        (last_seq,) = con.execute("SELECT max(seq) FROM journal WHERE actor_id = 's1'").fetchone()
        assert 0 < snap_seq < last_seq  # the recovery folds a tail after the snapshot
        con.execute("DELETE FROM snapshots")
    async with runtime(tmp_path, snapshot_every=10**9) as rt:
        await rt.ref("s1").ask(GetSessionInfo(), timeout=5)
        full_fold = rt.cells["s1"].state
    assert from_snapshot == full_fold == live


async def test_a_snapshot_from_before_the_bound_still_loads(tmp_path: Path) -> None:
    async with runtime(tmp_path, snapshot_every=1) as rt:
        s = await rt.spawn(ShortMemoryAgent, "s1", goal="Check orders")
        await _run_tasks(s, 1)
        live: SessionState = rt.cells["s1"].state
    # Rewrite the snapshot as an older tether stored it: without the history_dropped field.
    with sqlite3.connect(tmp_path / "agents.db") as con:
        (blob,) = con.execute("SELECT state FROM snapshots WHERE actor_id = 's1'").fetchone()
        old = msgspec.msgpack.decode(blob)
        assert old.pop("history_dropped") == 0
        con.execute(
            "UPDATE snapshots SET state = ? WHERE actor_id = 's1'", (msgspec.msgpack.encode(old),)
        )
    async with runtime(tmp_path, snapshot_every=10**9) as rt:
        s = rt.ref("s1")
        assert (await s.ask(GetSessionInfo(), timeout=5)).task == 1
        assert rt.cells["s1"].state == live
        await _run_tasks(s, 1)  # and it goes on, now dropping its oldest entries
        assert rt.cells["s1"].state.history_dropped == 8 - 5


def test_a_history_folded_under_a_larger_bound_is_cut_down_at_its_next_append() -> None:
    agent = ShortMemoryAgent(goal="Check orders")
    old = SessionState(history=tuple(_task_entries("42") * 3))  # 12 entries, from before
    state = agent.apply(old, TaskStarted(task=4, text="check order 43", reply_to=""))
    assert state.history == (*old.history[-4:], ChatMessage(role="user", text="check order 43"))
    assert state.history_dropped == 12 + 1 - 5


@pytest.mark.parametrize("limit", [0, -3, 2.5, True, "100", None])
def test_an_invalid_history_bound_is_refused_naming_the_setting(limit: object) -> None:
    with pytest.raises(tether.ConfigError, match=r"Forgetful\.max_history must be an int >= 1"):

        class Forgetful(tether.AgentSession):
            model = ScriptedModel([])
            max_history = limit  # type: ignore[assignment]


# -- bad settings and bad input ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("context_budget", -1),
        ("context_budget", "8000"),
        ("max_steps", 0),
        ("max_steps", 2.5),
        ("max_steps", True),
        ("escalate_after_failures", 0),
        ("escalate_after_failures", "3"),
        ("count_tokens", 5),
        ("loop_policy", "strict"),
        ("approval_policy", 3600),
        ("model", "gpt-4o"),
        ("tools", None),
        ("tools", "lookup_order"),
    ],
)
def test_a_bad_session_setting_is_refused_when_the_class_is_defined(
    setting: str, value: object
) -> None:
    attrs: dict[str, Any] = {"model": ScriptedModel([]), setting: value}
    with pytest.raises(tether.ConfigError, match=rf"Careless\.{setting} must be"):
        type("Careless", (tether.AgentSession,), attrs)


@pytest.mark.parametrize(
    ("cls", "init", "problem"),
    [
        (RefundAgent, {"goal": ""}, "needs a goal"),
        (RefundAgent, {"goal": "   "}, "needs a goal"),
        (sa.ModelessAgent, {"goal": "Check orders"}, r"ModelessAgent\.model must be"),
    ],
)
async def test_a_session_its_constructor_refuses_is_refused_at_spawn_and_nothing_is_stored(
    tmp_path: Path, cls: type[tether.AgentSession], init: dict[str, Any], problem: str
) -> None:
    async with runtime(tmp_path) as rt:
        with pytest.raises(tether.ConfigError, match=rf"cannot spawn 's1': .*{problem}"):
            await rt.spawn(cls, "s1", **init)
        with pytest.raises(tether.ActorNotFound):
            await rt.lookup("s1")
    with sqlite3.connect(tmp_path / "agents.db") as con:
        assert con.execute("SELECT count(*) FROM actors").fetchone() == (0,)


async def test_a_task_too_long_for_the_budget_ends_saying_why_and_the_session_serves_on(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders")
        answer = await s.ask(tether.UserMessage("refund " * 20_000 + "42"), timeout=10)
        info = await s.ask(GetSessionInfo(), timeout=5)
        assert answer.startswith("I could not continue: the pinned fragments")
        assert "over the budget of 8000" in answer
        assert info.status == "idle"
        assert info.outcome.startswith("stopped: the pinned fragments")
        assert await rt.dead_letters.list() == []
        assert sa.LOG == []
        # The next task runs as usual.
        assert await s.ask(tether.UserMessage("refund order 42"), timeout=10) == (
            "Done: refunded 1500 on 42."
        )


@pytest.mark.parametrize("script", [None, 5, "FinalAnswer"])
def test_a_script_that_is_not_a_list_or_a_function_is_refused(script: Any) -> None:
    with pytest.raises(tether.ConfigError, match="a script is a list"):
        ScriptedModel(script)
