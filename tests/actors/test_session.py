"""Agent sessions on real SQLite files: one step per message, the ask answered by the task's
final answer, recovery at the frontier, the error taxonomy wired in, cancellation, approvals."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import tether
from tests.actors import session_agents as sa
from tests.actors.session_agents import (
    LoopingAgent,
    ParallelAgent,
    QuietAgent,
    RefundAgent,
    ResetMidAnswerAgent,
    ScriptedAgent,
    ShortMemoryAgent,
    SlowAgent,
    StubbornAgent,
)
from tether.actors.context import ChatMessage, ToolCallRecord
from tether.actors.session import (
    GetSessionInfo,
    SessionEvent,
    SessionState,
    StepBegun,
    TaskEnded,
    TaskStarted,
    session_status,
)
from tether.models import anthropic, openai
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
        result = await s.ask(tether.UserMessage("please refund order 42"), timeout=10)
        info = await s.ask(GetSessionInfo(), timeout=5)
        ledger = {e.key: e for e in await rt.store.find_effects(actor_id="s1")}
    assert isinstance(result, tether.TaskResult)
    assert (result.session_id, result.task) == ("s1", 1)
    assert (result.status, result.outcome) == ("finished", "finished")
    assert result.answer == "Done: refunded 1500 on 42."
    assert [(c.tool, c.args, c.error) for c in result.calls] == [
        ("lookup_order", {"order_id": "42"}, None),
        ("refund", {"order_id": "42", "amount_cents": 1500}, None),
    ]
    assert result.calls[1].result == "refunded 1500 on 42"
    # Each call names its row of the effects ledger: the key the tool was given.
    for call in result.calls:
        assert call.effect_key is not None
        assert ledger[call.effect_key].tool == call.tool
        assert ledger[call.effect_key].status == "done"
    assert sa.LOG[1] == ("refund", ("42", 1500, result.calls[1].effect_key))
    assert [name for name, _ in sa.LOG] == ["lookup_order", "refund"]
    assert info.status == "finished"
    assert info.outcome == "finished"
    assert info.steps == 3
    assert info.last_answer == result.answer


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
        result = await s.ask(tether.UserMessage("check order 42"), timeout=10)
        request = sa.SCRIPTED.requests[1]
    assert result.answer == "order 42 is delivered"
    # The invalid call is reported, with no ledger row (nothing was recorded for it).
    assert [(c.tool, c.effect_key is None) for c in result.calls] == [
        ("lookup_order", True),
        ("lookup_order", False),
    ]
    assert (result.calls[0].error or "").startswith("Invalid call: ")
    # The second decision saw the validation error of the first call.
    [first] = request.bundle.tool_results
    assert first.error is not None
    assert "Expected `str`, got `int` - at `$.order_id`" in first.error
    assert [name for name, _ in sa.LOG] == ["lookup_order"]


async def test_invalid_arguments_twice_escalate_the_task(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(StubbornAgent, "s1", goal="Check orders")
        with pytest.raises(tether.TaskFailed) as caught:
            await s.ask(tether.UserMessage("check order 42"), timeout=10)
        info = await s.ask(GetSessionInfo(), timeout=5)
    failed = caught.value
    assert (failed.session_id, failed.task, failed.status) == ("s1", 1, "stopped")
    assert failed.reason.startswith("escalated: invalid tool call twice")
    assert str(failed).startswith("task 1 of session 's1' stopped: escalated: invalid tool call")
    assert failed.result.answer.startswith("I need a person's help: escalated: invalid tool")
    assert len(failed.result.calls) == 2
    assert info.status == "stopped"
    assert info.outcome.startswith("stopped: escalated")
    assert sa.LOG == []


async def test_a_loop_follows_the_session_loop_policy(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(LoopingAgent, "s1", goal="Check orders")
        with pytest.raises(tether.TaskFailed) as caught:
            await s.ask(tether.UserMessage("check order 42"), timeout=10)
        info = await s.ask(GetSessionInfo(), timeout=5)
    assert info.outcome.startswith("stopped: loop detected: lookup_order was called 3 times")
    assert caught.value.result.outcome == info.outcome
    assert caught.value.result.answer.startswith("I stopped before finishing")
    assert len(sa.LOG) == 2


async def test_a_context_reset_summary_counts_every_call_of_the_task_not_only_the_kept_ones(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(sa.ForgetfulLoopingAgent, "s1", goal="Check orders")
        result = await s.ask(tether.UserMessage("check order 42"), timeout=10)
        state: SessionState = rt.cells["s1"].state
    assert result.answer == "order 42 is delivered"
    assert len(sa.LOG) == 3  # the fourth call was the repeat: not made
    assert state.summary.startswith("The context was reset because the session repeated itself")
    # The bound kept one call of the three; the summary tells the model about all three.
    assert sum(isinstance(e, ToolCallRecord) for e in state.history) <= 1
    assert state.summary.endswith("Tool calls so far: 3 (lookup_order).")
    assert (state.task_calls, state.task_tools) == (3, ("lookup_order",))


async def test_a_cancel_stops_the_running_task_between_steps(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(SlowAgent, "s1", goal="Look orders up")
        await s.tell(tether.UserMessage("keep looking"), dedup_key="task")
        with anyio.fail_after(5):
            while len(sa.LOG) < 3:
                await anyio.sleep(0.01)
        assert await s.ask(tether.CancelTask(reason="enough"), timeout=5) == "cancelled"
        calls = len(sa.LOG)
        await anyio.sleep(0.2)
        info = await s.ask(GetSessionInfo(), timeout=5)
        assert info.status == "cancelled"
        assert info.outcome == "cancelled: enough"
        with pytest.raises(tether.TaskFailed, match=r"^task 1 of session 's1' cancelled: enough$"):
            await s.ask(tether.UserMessage("keep looking"), timeout=5, dedup_key="task")
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
        result = await s.ask(
            tether.UserMessage("please refund order 43"), timeout=10, dedup_key="ask-43"
        )
    assert result.answer == "Done: refunded 90000 on 43 (approved)."


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
            while (info := await s.ask(GetSessionInfo(), timeout=5)).status == "working":
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


def _task_entries(order_id: str, turn: int) -> list[ChatMessage | ToolCallRecord]:
    """What one ShortMemoryAgent task adds to the history (its call made in decision ``turn``)."""
    result = msgspec.json.encode(msgspec.to_builtins(sa.ORDERS[order_id]), order="sorted")
    return [
        ChatMessage(role="user", text=f"check order {order_id}"),
        ChatMessage(role="assistant", text="look"),
        ToolCallRecord(
            tool="lookup_order", args={"order_id": order_id}, result=result.decode(), turn=turn
        ),
        ChatMessage(role="assistant", text=f"found: {result.decode()}"),
    ]


async def _run_tasks(s: tether.ActorRef, n: int) -> list[ChatMessage | ToolCallRecord]:
    """Run ``n`` tasks one after the other; every entry they add, oldest first."""
    added: list[ChatMessage | ToolCallRecord] = []
    for i in range(n):
        order_id = "42" if i % 2 == 0 else "43"
        result = await s.ask(tether.UserMessage(f"check order {order_id}"), timeout=10)
        assert result.answer.startswith("found: ")
        added.extend(_task_entries(order_id, turn=2 * i + 1))  # two decisions per task
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
    with closing(sqlite3.connect(tmp_path / "agents.db")) as con, con:
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
    with closing(sqlite3.connect(tmp_path / "agents.db")) as con, con:
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
    old = SessionState(history=tuple(_task_entries("42", turn=1) * 3))  # 12 entries, from before
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


def test_a_tool_that_shares_a_name_with_another_or_with_the_model_is_refused_by_name() -> None:
    @tether.tool(name="model")
    async def model_like(order_id: str) -> str:
        return order_id

    @tether.tool(name="lookup")
    async def lookup_again(order_id: str) -> str:
        return order_id

    @tether.tool(name="lookup")
    async def lookup(order_id: str) -> str:
        return order_id

    attrs: dict[str, Any] = {"model": ScriptedModel([])}
    with pytest.raises(tether.ConfigError, match=r"a tool named 'model'.*rename it"):
        type("Shadowing", (tether.AgentSession,), {**attrs, "tools": (model_like,)})
    with pytest.raises(tether.ConfigError, match=r"Twice\.tools has two tools named 'lookup'"):
        type("Twice", (tether.AgentSession,), {**attrs, "tools": (lookup, lookup_again)})


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
    with closing(sqlite3.connect(tmp_path / "agents.db")) as con, con:
        assert con.execute("SELECT count(*) FROM actors").fetchone() == (0,)


async def test_a_task_too_long_for_the_budget_ends_saying_why_and_the_session_serves_on(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders")
        with pytest.raises(tether.TaskFailed) as caught:
            await s.ask(tether.UserMessage("refund " * 20_000 + "42"), timeout=10)
        info = await s.ask(GetSessionInfo(), timeout=5)
        answer = caught.value.result.answer
        assert answer.startswith("I could not continue: the pinned fragments")
        assert "over the budget of 8000" in answer
        assert info.status == "stopped"
        assert info.outcome.startswith("stopped: the pinned fragments")
        assert await rt.dead_letters.list() == []
        assert sa.LOG == []
        # The next task runs as usual.
        result = await s.ask(tether.UserMessage("refund order 42"), timeout=10)
        assert result.answer == "Done: refunded 1500 on 42."


async def test_a_reset_summary_that_does_not_fit_ends_the_task_saying_why_and_is_not_stored(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(sa.CrampedAgent, "s1", goal="Check orders")
        with pytest.raises(tether.TaskFailed) as refused:
            await s.ask(tether.UserMessage(sa.LONG_TASK), timeout=10)
        info = await s.ask(GetSessionInfo(), timeout=5)
        state: SessionState = rt.cells["s1"].state
        assert info.outcome.startswith(
            "stopped: loop detected: lookup_order was called 3 times in a row with the same "
            "arguments. The context could not be reset: the thread summary needs "
        )
        assert "it is never trimmed" in info.outcome
        assert refused.value.status == "stopped"
        assert refused.value.reason == info.outcome.removeprefix("stopped: ")
        assert len(sa.LOG) == 2  # the third lookup was the repeat: not made
        assert state.summary == ""  # refused, not stored: it would stop every later step
        assert await rt.dead_letters.list() == []
        # The session serves on: a task whose summary fits is reset and answered from it.
        answer = await s.ask(tether.UserMessage("check order 42"), timeout=10)
        assert answer.answer.startswith("answered from the summary: The context was reset")


async def test_a_stored_summary_that_no_longer_fits_ends_the_task_by_name_and_the_session_serves_on(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(sa.CrampedAgent, "s1", goal="Check orders")
        first = await s.ask(tether.UserMessage("check order 42"), timeout=10)
        assert first.answer.startswith("answered from the summary: The context was reset")
        # A long task leaves the summary no room beside its checkpoint: never dropped silently.
        with pytest.raises(tether.TaskFailed) as refused:
            await s.ask(tether.UserMessage(sa.LONG_TASK), timeout=10)
        info = await s.ask(GetSessionInfo(), timeout=5)
        assert info.outcome.startswith("stopped: the thread summary needs "), info.outcome
        assert refused.value.reason.startswith("the thread summary needs ")
        assert len(sa.LOG) == 2  # the long task never reached the model
        # The next task has room for it again.
        again = await s.ask(tether.UserMessage("check order 42"), timeout=10)
        assert again.answer == first.answer


@pytest.mark.parametrize("script", [None, 5, "FinalAnswer"])
def test_a_script_that_is_not_a_list_or_a_function_is_refused(script: Any) -> None:
    with pytest.raises(tether.ConfigError, match="a script is a list"):
        ScriptedModel(script)


async def test_a_task_whose_step_is_dead_lettered_fails_and_its_asker_is_answered_at_once(
    tmp_path: Path,
) -> None:
    """The step message (``Continue``) of a task fails max_attempts times: the task ends
    "failed" with the reason, journaled; whoever asked gets TaskFailed at once, not an
    AskTimeout; and the next message starts a new task instead of joining the dead one."""
    sa.COUNTER_BROKEN[0] = True
    try:
        async with runtime(tmp_path, max_attempts=2) as rt:
            s = await rt.spawn(sa.BreakableAgent, "s1", goal="Look orders up")
            with anyio.fail_after(30):  # far below the ask's own timeout
                with pytest.raises(tether.TaskFailed) as caught:
                    await s.ask(tether.UserMessage("check order 42"), timeout=3600)
            info = await s.ask(GetSessionInfo(), timeout=5)
            sa.COUNTER_BROKEN[0] = False
            result = await s.ask(tether.UserMessage("check order 43"), timeout=10)
            [letter] = await rt.dead_letters.list("s1")
            rows = await rt.store.load_journal("s1", 0, 1000)
    finally:
        sa.COUNTER_BROKEN[0] = False
    failed = caught.value
    assert (failed.task, failed.status) == (1, "failed")
    assert failed.reason.startswith("step 1 was dead-lettered (failed 2 times; max_attempts=2)")
    assert "RuntimeError: the token counter is broken" in failed.reason
    assert info.status == "failed"
    assert info.outcome == f"failed: {failed.reason}"
    assert letter.type == "Continue"
    ended = [
        e
        for e in (msgspec.msgpack.decode(r.payload, type=SessionEvent) for r in rows)
        if isinstance(e, TaskEnded)
    ]
    assert [e.outcome for e in ended] == [info.outcome, "finished"]
    assert (result.task, result.answer) == (2, f"found: {_json_order('43')}")


def _json_order(order_id: str) -> str:
    """An order as the model is shown a tool's structured result."""
    return msgspec.json.encode(sa.ORDERS[order_id], order="sorted").decode()


def test_journals_and_snapshots_of_an_older_tether_still_fold() -> None:
    """Written before task results: a ToolResult without its key, a state without the task's
    calls, a task cancelled without a reason in its outcome."""
    record = {"tool": "lookup_order", "args": {"order_id": "42"}, "result": "ok", "error": None}
    old_result = msgspec.msgpack.encode({"type": "ToolResult", "record": record, "invalid": False})
    old_state = msgspec.to_builtins(SessionState(status="working", task=3, steps=1))
    del old_state["calls"]
    state = msgspec.msgpack.decode(msgspec.msgpack.encode(old_state), type=SessionState)
    event = msgspec.msgpack.decode(old_result, type=SessionEvent)
    agent = RefundAgent(goal="Refund delivered orders")
    state = agent.apply(state, event)
    assert [(c.tool, c.effect_key) for c in state.calls] == [("lookup_order", None)]
    ended = agent.apply(state, TaskEnded(task=3, outcome="cancelled", answer="Task cancelled"))
    assert session_status(ended) == "cancelled"
    assert session_status(SessionState()) == "idle"


# -- several tool calls in one answer (ToolCalls) --------------------------------------------


async def test_the_calls_of_one_answer_are_made_in_order_each_its_own_effect(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(ParallelAgent, "s1", goal="Check orders")
        answer = await s.ask(tether.UserMessage("check 43, 404 and 42"), timeout=10)
        effects = await rt.store.find_effects(actor_id="s1")
        state: SessionState = rt.cells["s1"].state
    assert answer.answer == "looked them up"
    # Every call was made, the failing one too (its error is its result), in the answer's order.
    assert sa.LOG == [("lookup_order", "43"), ("lookup_order", "404"), ("lookup_order", "42")]
    calls = [(e.idx, e.tool) for e in effects if e.tool != "model"]
    assert calls == [(1, "lookup_order"), (2, "lookup_order"), (3, "lookup_order")]
    records = [h for h in state.history if isinstance(h, ToolCallRecord)]
    assert [(r.call_id, r.turn) for r in records] == [("c1", 1), ("c2", 1), ("c3", 1)]
    assert records[1].error is not None
    assert "no order 404" in records[1].error
    assert ChatMessage(role="assistant", text="all three") in state.history


async def test_a_context_reset_inside_an_answer_leaves_its_remaining_calls_unmade(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(ResetMidAnswerAgent, "s1", goal="Check orders")
        answer = await s.ask(tether.UserMessage("check 42 and 43"), timeout=10)
        state: SessionState = rt.cells["s1"].state
    assert answer.answer == "started over"
    assert sa.LOG == [("lookup_order", "42")]  # the repeat was refused; 43 never asked
    assert state.summary.startswith("The context was reset")


async def test_a_tool_call_without_a_thought_adds_no_made_up_assistant_message(
    tmp_path: Path,
) -> None:
    # A provider adapter sends the assistant text kept before a call back as what the model
    # said: "I will call lookup_order." would be put in its mouth.
    async with runtime(tmp_path) as rt:
        s = await rt.spawn(QuietAgent, "s1", goal="Check orders")
        await s.ask(tether.UserMessage("check 42"), timeout=10)
        state: SessionState = rt.cells["s1"].state
    result = msgspec.json.encode(msgspec.to_builtins(sa.ORDERS["42"]), order="sorted").decode()
    assert state.history == (
        ChatMessage(role="user", text="check 42"),
        ToolCallRecord(tool="lookup_order", args={"order_id": "42"}, result=result, turn=1),
        ChatMessage(role="assistant", text="done"),
    )


def test_journals_and_snapshots_written_before_call_ids_turns_and_usage_still_fold() -> None:
    from tether.actors.session import ModelDecided, SessionEvent, ToolResult

    def older(value: Any, *dropped: str) -> Any:
        """``value`` as an older tether stored it: without the fields added since."""
        if isinstance(value, dict):
            return {k: older(v, *dropped) for k, v in value.items() if k not in dropped}
        if isinstance(value, list):
            return [older(v, *dropped) for v in value]
        return value

    new_fields = ("call_id", "malformed", "usage", "turn", "invalid_turn")
    call = tether.ToolCall(tool="lookup_order", args={"order_id": "42"}, thought="look")
    record = ToolCallRecord(tool="lookup_order", args={"order_id": "42"}, result="ok")
    events = [ModelDecided(decision=call), ToolResult(record=record)]
    stored = [msgspec.msgpack.encode(older(msgspec.to_builtins(e), *new_fields)) for e in events]
    decoded = [msgspec.msgpack.decode(b, type=SessionEvent) for b in stored]
    assert decoded == events  # the new fields take their defaults
    agent = QuietAgent(goal="Check orders")
    state = SessionState()
    for event in decoded:
        state = agent.apply(state, event)
    snapshot = msgspec.msgpack.encode(older(msgspec.to_builtins(state), *new_fields))
    assert msgspec.msgpack.decode(snapshot, type=SessionState) == state
    assert state.usage == tether.Usage()


async def test_a_call_a_person_modified_is_recorded_and_told_to_its_model_as_it_ran(
    store_url: str,
) -> None:
    """One answer asks for two refunds, each held for a person. Carol halves the first; it
    runs; the second is held, so the step parks and, once Dan approves, replays the first
    from its ledger row. The session's record of the first call (its journal, its model's
    history, the TaskResult's calls) names the arguments that ran, keeps those the model
    asked for, and the model is told plainly that a person changed the call, and to what,
    under the call id it gave (the providers' calls and results still pair up)."""
    async with tether.Runtime(store_url, poll_interval=0.02) as rt:
        s = await rt.spawn(sa.TwoRefundsAgent, "s1", goal="refund the customer's orders")
        answers: list[tether.TaskResult] = []

        async def ask() -> None:
            answers.append(await s.ask(tether.UserMessage("refund 42 and 43"), timeout=30))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            first = await sa.first_pending(rt)
            assert first.args == {"order_id": "42", "amount_cents": 7250}
            modify = tether.Modify(by="carol", args={"order_id": "42", "amount_cents": 3625})
            await rt.approvals.decide(first.request_id, modify)
            with anyio.fail_after(10):
                while (second := await sa.first_pending(rt)).request_id == first.request_id:
                    await anyio.sleep(0.01)
            await rt.approvals.decide(second.request_id, tether.Approve(by="dan"))
        events = await rt.store.load_journal("s1", 0, 1000)
    [result] = answers
    halved, asked = {"order_id": "42", "amount_cents": 3625}, first.args
    # made once each, the first as modified (the replay answered it from its ledger row)
    assert sa.LOG == [("big_refund", ("42", 3625)), ("big_refund", ("43", 90_000))]
    assert result.answer == "refunded 3625 on 42 (approved) | refunded 90000 on 43 (approved)"
    journaled = [msgspec.msgpack.decode(e.payload) for e in events]
    [made, _] = [e["record"] for e in journaled if e["type"] == "ToolResult"]
    assert made["args"] == halved
    assert made.get("asked") == asked
    assert [c.args for c in result.calls] == [halved, {"order_id": "43", "amount_cents": 90_000}]
    assert [c.asked for c in result.calls] == [asked, None]

    request = sa.TWO_REFUNDS.requests[-1]
    told = "A person modified this call before it ran: it ran with "
    ran = '{"amount_cents":3625,"order_id":"42"}.'
    [rendered] = [m["content"] for m in request.context if m["content"].startswith("big_refund")][
        :1
    ]
    assert (
        rendered
        == (  # the rendered context: the call asked for, what ran, its outcome
            f'big_refund({{"amount_cents":7250,"order_id":"42"}}) ({told}{ran[:-1]}) '
            "returned: refunded 3625 on 42 (approved)"
        )
    )
    chat = openai.messages(request)
    [assistant] = [m for m in chat if m["role"] == "assistant" and m.get("tool_calls")]
    calls = assistant["tool_calls"]
    assert [c["id"] for c in calls] == ["c42", "c43"]
    assert json.loads(calls[0]["function"]["arguments"]) == asked  # the model's own call
    results = [m for m in chat if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["c42", "c43"]
    assert results[0]["content"] == f"{told}{ran}\nrefunded 3625 on 42 (approved)"
    assert results[1]["content"] == "refunded 90000 on 43 (approved)"
    uses, answered = anthropic.messages(request)[-2:]
    assert [b["id"] for b in uses["content"] if b["type"] == "tool_use"] == ["c42", "c43"]
    blocks = answered["content"]
    assert [b["tool_use_id"] for b in blocks] == ["c42", "c43"]
    assert blocks[0]["content"].startswith(told + ran)
