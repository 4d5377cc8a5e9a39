"""Guards on the effect path, in one process on real stores (I10): a tool's breaker
trips, refuses with when-to-retry, survives a restart with the same remaining time, and shows in
the tree; a session's loop detector feeds back or escalates, and remembers across restarts."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import tether
from tests.runtime import guard_actors as ga
from tests.runtime.guard_actors import (
    Call,
    Caller,
    EscalatingResearcher,
    Ping,
    Researcher,
    Search,
    ShortMemoryResearcher,
    SteadyCaller,
    Stubborn,
)
from tether.actors.guards.actors import GetBreakerState, GetLoopState, LoopGuard, ResetBreaker
from tether.actors.guards.breaker import BreakerCore
from tether.actors.guards.breaker_state import BreakerEvent, BreakerReset
from tether.runtime.tree import TreeNode
from tether.store.records import EffectRecord
from tether.testing import FakeClock, check_store_async

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    ga.CALLS.clear()
    ga.FAILING["flaky"] = True
    ga.FAILING["brittle"] = True
    yield
    ga.CALLS.clear()


def runtime(where: Path | str, **kw: Any) -> tether.Runtime:
    """A runtime on the store at ``where``: a folder (its SQLite file), or a store URL."""
    kw.setdefault("poll_interval", 0.02)
    return tether.Runtime(where / "agents.db" if isinstance(where, Path) else where, **kw)


async def test_a_breaker_trips_after_its_threshold_and_refuses_with_when_to_retry(
    store_url: str,
) -> None:
    clock = FakeClock()
    async with runtime(store_url, clock=clock) as rt:
        c = await rt.spawn(Caller, "c1")
        lines = [await c.ask(Call(n=i), timeout=5) for i in range(4)]
        effects = await rt.store.find_effects(actor_id="c1")
    assert lines[:3] == ["failed: TransientToolError: tool 'flaky': 503 Service Unavailable"] * 3
    assert lines[3].startswith("unavailable: The tool 'flaky' is unavailable")
    assert "3 of the last 3 calls failed" in lines[3]
    assert lines[3].endswith("(retry_in=30)")
    assert [n for _, n in ga.CALLS] == [0, 1, 2]  # the fourth call was never made
    assert len(effects) == 3  # and nothing was recorded for it


async def test_an_open_breaker_is_still_open_after_a_restart_with_the_same_remaining_time(
    store_url: str,
) -> None:
    clock = FakeClock()
    async with runtime(store_url, clock=clock) as rt:
        c = await rt.spawn(Caller, "c1")
        for i in range(3):
            await c.ask(Call(n=i), timeout=5)
    clock.advance(10)
    async with runtime(store_url, clock=clock) as rt:
        line = await rt.ref("c1").ask(Call(n=9), timeout=5)
        assert line.endswith("(retry_in=20)")
        assert [n for _, n in ga.CALLS] == [0, 1, 2]
        # Past the open time, one probe goes; it succeeds, and the breaker closes.
        clock.advance(21)
        ga.FAILING["flaky"] = False
        assert await rt.ref("c1").ask(Call(n=10), timeout=5) == "ok 10"
        assert await rt.ref("c1").ask(Call(n=11), timeout=5) == "ok 11"
        tree = await rt.tree()
    guards = next(n for n in tree if n.id == "tether.guards")
    breaker = guards.find("breaker:flaky")
    assert breaker is not None
    assert breaker.detail == "closed"


async def test_reset_breaker_on_a_closed_breaker_clears_its_window_for_good(
    store_url: str,
) -> None:
    """resilience4j's reset(): two failures, an operator's reset, and it takes three more
    failures to trip, also after a restart; the journal says who reset it."""
    clock = FakeClock()
    async with runtime(store_url, clock=clock) as rt:
        c = await rt.spawn(Caller, "c1")
        for i in range(2):
            await c.ask(Call(n=i), timeout=5)
        told = await rt.ref("breaker:flaky").ask(ResetBreaker(by="ops"), timeout=5)
        assert told["status"] == "closed"
        assert told["window"] == {"calls": 0, "failures": 0, "slow": 0}
        assert (await c.ask(Call(n=2), timeout=5)).startswith("failed")
    async with runtime(store_url, clock=clock) as rt:
        assert (await rt.ref("c1").ask(Call(n=3), timeout=5)).startswith("failed")
        state = await rt.ref("breaker:flaky").ask(GetBreakerState(), timeout=5)
        assert (state["status"], state["window"]["failures"]) == ("closed", 2)
        assert (await rt.ref("c1").ask(Call(n=4), timeout=5)).startswith("failed")
        assert (await rt.ref("c1").ask(Call(n=5), timeout=5)).startswith("unavailable")
        rows = await rt.store.load_journal("breaker:flaky", 0, 100)
    journal = [msgspec.msgpack.decode(row.payload) for row in rows]
    assert {"type": "BreakerReset", "at": clock.now(), "by": "ops"} in journal
    assert [n for _, n in ga.CALLS] == [0, 1, 2, 3, 4]


async def test_an_open_breakers_snapshot_from_before_half_open_probes_still_folds(
    tmp_path: Path,
) -> None:
    """A breaker snapshot as an older tether stored it (no probe counts), in the store file:
    the breaker is still open for the same time after a restart, then probes and closes."""
    clock = FakeClock()
    async with runtime(tmp_path, clock=clock, snapshot_every=1) as rt:
        c = await rt.spawn(Caller, "c1")
        for i in range(3):
            await c.ask(Call(n=i), timeout=5)
    with closing(sqlite3.connect(tmp_path / "agents.db")) as con, con:
        query = "SELECT state FROM snapshots WHERE actor_id = 'breaker:flaky'"
        (blob,) = con.execute(query).fetchone()
        old = msgspec.msgpack.decode(blob)
        assert old.pop("probes_admitted") == old.pop("probes_passed") == 0
        assert old["status"] == "open"
        con.execute(
            "UPDATE snapshots SET state = ? WHERE actor_id = 'breaker:flaky'",
            (msgspec.msgpack.encode(old),),
        )
    clock.advance(10)
    async with runtime(tmp_path, clock=clock) as rt:
        assert (await rt.ref("c1").ask(Call(n=3), timeout=5)).endswith("(retry_in=20)")
        clock.advance(20)
        ga.FAILING["flaky"] = False
        assert await rt.ref("c1").ask(Call(n=4), timeout=5) == "ok 4"
        state = await rt.ref("breaker:flaky").ask(GetBreakerState(), timeout=5)
    assert state["status"] == "closed"
    assert [n for _, n in ga.CALLS] == [0, 1, 2, 4]


async def tripped_guards(rt: tether.Runtime) -> TreeNode:
    """Trip the flaky tool's breaker (3 failed calls of c1); the guards' subtree as ``rt``
    shows it."""
    c = await rt.spawn(Caller, "c1")
    for i in range(3):
        await c.ask(Call(n=i), timeout=5)
    [guards] = [n for n in await rt.tree() if n.id == "tether.guards"]
    return guards


async def test_the_tree_shows_an_open_breaker_with_why_and_until_when(store_url: str) -> None:
    async with runtime(store_url, clock=FakeClock()) as rt:
        text = (await tripped_guards(rt)).render()
    assert "breaker:flaky (Breaker) running [open until" in text
    assert "3 of the last 3 calls failed" in text


async def test_an_administration_process_shows_the_guards_state_from_their_journals(
    store_url: str,
) -> None:
    """``rt.tree()`` (``tether tree``) in a process that runs no actor: the breaker's state
    comes from its committed journal, as the serving runtime's tree shows it live."""
    clock = FakeClock()
    async with runtime(store_url, clock=clock) as rt:
        live = await tripped_guards(rt)
    async with runtime(store_url, serve=False, clock=clock) as admin:
        [guards] = [n for n in await admin.tree() if n.id == "tether.guards"]
    breaker, live_breaker = guards.find("breaker:flaky"), live.find("breaker:flaky")
    assert breaker is not None
    assert live_breaker is not None
    assert not breaker.active
    assert breaker.detail == live_breaker.detail
    assert breaker.detail is not None
    assert "3 of the last 3 calls failed" in breaker.detail


async def test_an_uncaught_tool_unavailable_parks_the_message_until_the_breaker_reopens(
    store_url: str,
) -> None:
    clock = FakeClock()
    async with runtime(store_url, clock=clock, max_attempts=2) as rt:
        c = await rt.spawn(Caller, "c1")
        for i in range(3):
            await c.ask(Call(n=i), timeout=5)
        s = await rt.spawn(Stubborn, "s1")
        await s.tell(Call(n=7))
        await anyio.sleep(0.3)
        assert await rt.dead_letters.list() == []  # waiting, not burning its attempts
        assert ga.CALLS[-1] == ("flaky", 2)
        ga.FAILING["flaky"] = False
        clock.advance(31)
        with anyio.fail_after(5):
            while ("flaky", 7) not in ga.CALLS:
                await anyio.sleep(0.01)
        assert await s.ask(Ping(), timeout=5) == "pong"
        cell = rt.cells["s1"]
        assert cell.state.lines == ["ok 7"]


async def test_a_repeated_call_is_fed_back_as_a_loop_and_not_made(store_url: str) -> None:
    async with runtime(store_url) as rt:
        r = await rt.spawn(Researcher, "r1")
        answers = [await r.ask(Search(query="refund policy"), timeout=5) for _ in range(3)]
    assert answers[:2] == ["results for refund policy"] * 2
    assert answers[2].startswith("loop repeat/feedback: search was called 3 times in a row")
    assert len(ga.CALLS) == 2


async def test_varied_calls_are_not_a_loop(store_url: str) -> None:
    async with runtime(store_url) as rt:
        r = await rt.spawn(Researcher, "r1")
        queries = ["a", "b", "a", "c", "d", "b", "e", "a"]
        answers = [await r.ask(Search(query=q), timeout=5) for q in queries]
    assert all(a.startswith("results for") for a in answers)


async def test_the_loop_history_survives_a_restart(store_url: str) -> None:
    async with runtime(store_url) as rt:
        r = await rt.spawn(Researcher, "r1")
        for _ in range(2):
            await r.ask(Search(query="same"), timeout=5)
    async with runtime(store_url) as rt:
        answer = await rt.ref("r1").ask(Search(query="same"), timeout=5)
    assert answer.startswith("loop repeat/feedback")
    assert len(ga.CALLS) == 2


async def test_a_restarted_loop_guard_reads_only_its_history_of_a_long_ledger(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After 300 calls, a restarted guard reads the newest `history` (6) ledger rows, not the
    whole ledger; it remembers the same calls and slots as the guard before the restart, and a
    repeat begun before the restart is detected after it."""
    history = 6
    async with runtime(store_url) as rt:
        r = await rt.spawn(ShortMemoryResearcher, "r1")
        for q in [*(f"q{i}" for i in range(298)), "same", "same"]:
            assert (await r.ask(Search(query=q), timeout=5)).startswith("results for")
        before = rt.cells["r1/loops"].instance
        assert isinstance(before, LoopGuard)
        ledger = await rt.store.find_effects(actor_id="r1")
    assert len(ledger) == 300
    assert len(before.state.history) == history

    async with runtime(store_url) as rt:
        reads: list[list[EffectRecord]] = []
        recent_effects = rt.store.recent_effects

        async def counted(*args: Any, **kwargs: Any) -> list[EffectRecord]:
            rows = await recent_effects(*args, **kwargs)
            reads.append(rows)
            return rows

        async def whole_ledger(*args: Any, **kwargs: Any) -> list[EffectRecord]:
            raise AssertionError("the guard read the whole ledger")

        monkeypatch.setattr(rt.store, "recent_effects", counted)
        monkeypatch.setattr(rt.store, "find_effects", whole_ledger)
        await rt.ref("r1/loops").ask(GetLoopState(), timeout=5)  # starts the guard
        after = rt.cells["r1/loops"].instance
        assert isinstance(after, LoopGuard)
        assert [len(rows) for rows in reads] == [history]
        assert reads[0] == ledger[-history:]
        # The rebuilt calls are the ones the guard saw live, with the same results.
        assert [(c.tool, c.args_hash, c.result_hash) for c in after.state.history] == [
            (c.tool, c.args_hash, c.result_hash) for c in before.state.history
        ]
        assert list(after.seen_slots) == [f"{e.msg_id}#{e.idx}" for e in ledger[-history:]]
        answer = await rt.ref("r1").ask(Search(query="same"), timeout=5)
    assert answer.startswith("loop repeat/feedback: search was called 3 times in a row")
    assert len(ga.CALLS) == 300


async def test_a_loop_policy_can_escalate_the_call_to_a_person(store_url: str) -> None:
    async with runtime(store_url) as rt:
        r = await rt.spawn(EscalatingResearcher, "r1")
        for _ in range(2):
            await r.ask(Search(query="same"), timeout=5)
        await r.tell(Search(query="same"))
        with anyio.fail_after(5):
            while not (pending := await rt.approvals.pending()):
                await anyio.sleep(0.01)
        [request] = pending
        assert request.reason.startswith("loop detected: search was called 3 times in a row")
        assert len(ga.CALLS) == 2
        await rt.approvals.decide(request.request_id, tether.Approve(by="reviewer"))
        with anyio.fail_after(5):
            while len(ga.CALLS) < 3:
                await anyio.sleep(0.01)
    assert ga.CALLS[-1] == ("search", "same")


async def test_repeated_failures_of_a_tool_hold_its_next_call_for_a_person(store_url: str) -> None:
    from tests.runtime.guard_actors import WaryCaller

    async with runtime(store_url) as rt:
        c = await rt.spawn(WaryCaller, "c1")
        for i in range(2):
            assert (await c.ask(Call(n=i), timeout=5)).startswith("failed")
        await c.tell(Call(n=2))
        with anyio.fail_after(5):
            while not (pending := await rt.approvals.pending()):
                await anyio.sleep(0.01)
        [request] = pending
        assert request.reason == "tool flaky failed 2 times in a row in this session"
        assert [n for _, n in ga.CALLS] == [0, 1]
        ga.FAILING["flaky"] = False
        await rt.approvals.decide(request.request_id, tether.Approve(by="ops"))
        with anyio.fail_after(5):
            while ("flaky", 2) not in ga.CALLS:
                await anyio.sleep(0.01)
        # A success ends the run of failures: the next call goes straight through.
        assert await c.ask(Call(n=3), timeout=5) == "ok 3"


async def test_a_breakers_own_messages_amid_concurrent_calls_keep_its_journal_contiguous(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A breaker is shared: other actors' calls append its events (numbered when submitted)
    while its own handler's steps (GetBreakerState, ResetBreaker) commit. Its journal stays
    contiguous, no append is refused, and its state in memory is the fold of its journal."""
    caplog.set_level(logging.WARNING, logger="tether")
    async with runtime(store_url) as rt:
        callers = [await rt.spawn(SteadyCaller, f"c{i}") for i in range(6)]
        assert await callers[0].ask(Call(n=-1), timeout=5) == "ok -1"  # the breaker exists
        breaker = rt.ref("breaker:steady")

        async def calls(caller: tether.ActorRef) -> None:
            for n in range(20):
                assert await caller.ask(Call(n=n), timeout=10) == f"ok {n}"

        async def operator() -> None:
            for n in range(40):
                msg = ResetBreaker(by="ops") if n % 4 == 3 else GetBreakerState()
                assert (await breaker.ask(msg, timeout=10))["status"] == "closed"

        async with anyio.create_task_group() as tg:
            for caller in callers:
                tg.start_soon(calls, caller)
            tg.start_soon(operator)
        cell = rt.cells["breaker:steady"]
        live, live_seq = cell.state, cell.seq
        rows = await rt.store.load_journal("breaker:steady", 0, 100_000)
        record = await rt.store.get_actor("breaker:steady")
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    assert record is not None
    assert record.head_seq == live_seq == len(rows)
    events = [msgspec.msgpack.decode(r.payload, type=BreakerEvent) for r in rows]
    assert sum(isinstance(e, BreakerReset) for e in events) == 10
    assert BreakerCore.fold(ga.EVERY_CALL_COUNTS, events).state == live
    failed = [r for r in caplog.records if getattr(r, "event", None) == "guard_append_failed"]
    assert failed == []


async def test_a_step_that_persisted_while_appends_were_numbered_commits_after_them(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler persists an event, and while it still runs two appends are numbered and
    committed (``append_events``, as a guard's decided elsewhere): its step's row is numbered
    after them when its commit is built, not where it stood when persisted, so neither write
    is refused. (The guards never persist in a handler, so which order their state in memory
    applied the events in never differs from their journal's.)"""
    caplog.set_level(logging.WARNING, logger="tether")
    ga.SIGNALS.update(held=anyio.Event(), go=anyio.Event())
    async with runtime(store_url) as rt:
        h = await rt.spawn(ga.Holder, "h1")
        await h.tell(ga.Hold(line="persisted"))
        with anyio.fail_after(5):
            await ga.SIGNALS["held"].wait()
        cell = rt.cells["h1"]
        await cell.append_events([ga.Noted(line="appended 1")])
        await cell.append_events([ga.Noted(line="appended 2")])
        ga.SIGNALS["go"].set()
        live = await h.ask(Ping(), timeout=5)  # after the held step's commit
        rows = await rt.store.load_journal("h1", 0, 100)
    journal = [msgspec.msgpack.decode(r.payload)["line"] for r in rows]
    assert [r.seq for r in rows] == [1, 2, 3]
    assert journal == ["appended 1", "appended 2", "persisted"]
    assert sorted(live) == sorted(journal)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    async with runtime(store_url) as rt:
        assert await rt.ref("h1").ask(Ping(), timeout=5) == journal  # folded from the store


async def test_a_retry_the_breaker_refused_is_settled_when_its_step_goes_on_without_it(
    store_url: str,
) -> None:
    """The call's second failure opens the breaker, which refuses its third attempt. The
    handler hears ToolUnavailable and its step commits: with it, the call's ledger row is
    settled as not carried out (failed, saying why), not left "retry" for a redelivery that
    will never come; ``tether check`` finds nothing left unsettled."""
    clock = FakeClock()
    async with runtime(store_url, clock=clock) as rt:
        c = await rt.spawn(ga.BrittleCaller, "c1")
        line = await c.ask(Call(n=1), timeout=5)
        [row] = await rt.store.find_effects(actor_id="c1")
    assert line.startswith("unavailable: ")
    assert ga.CALLS == [("brittle", 1), ("brittle", 1)]  # the third attempt was not made
    assert (row.status, row.attempts) == ("failed", 2)  # two attempts made
    assert row.error is not None
    assert row.error == (
        "attempt 3 was not made: the breaker of tool 'brittle' was open; "
        "the step went on without the call"
    )
    assert row.history[-1].startswith("attempt 3 refused: The tool 'brittle' is unavailable")
    report = await check_store_async(store_url)
    assert report.violations == []


async def test_a_retry_the_breaker_refused_is_made_when_its_step_is_delivered_again(
    store_url: str,
) -> None:
    """The same refusal in a handler that lets ToolUnavailable escape: its step waits for the
    breaker, uncommitted, and its row stays "retry"; delivered again, the call is made."""
    clock = FakeClock()
    async with runtime(store_url, clock=clock) as rt:
        s = await rt.spawn(ga.StubbornBrittleCaller, "s1")
        await s.tell(Call(n=2))
        with anyio.fail_after(5):
            while len(rows := await rt.store.find_effects(actor_id="s1")) != 1 or (
                rows[0].status != "retry"
            ):
                await anyio.sleep(0.01)
        assert ga.CALLS == [("brittle", 2), ("brittle", 2)]
        ga.FAILING["brittle"] = False
        clock.advance(31)
        with anyio.fail_after(5):
            while rt.cells["s1"].state.lines != ["ok 2"]:
                await anyio.sleep(0.01)
        assert await s.ask(Ping(), timeout=5) == "pong"  # after the step's commit
        [row] = await rt.store.find_effects(actor_id="s1")
    assert ga.CALLS == [("brittle", 2)] * 3
    assert row.status == "done"


async def test_a_persons_retry_the_breaker_refused_says_so_instead_of_vanishing(
    store_url: str,
) -> None:
    """Two calls whose outcome is unknown are quarantined, and their failures open the
    breaker. A person orders one retried; the breaker refuses it and the step goes on without
    it. The effect is no longer quarantined, and says why it was never retried."""
    clock = FakeClock()
    async with runtime(store_url, clock=clock) as rt:
        for n in (1, 2):
            await rt.spawn(ga.WobblyCaller, f"w{n}")
            await rt.ref(f"w{n}").tell(Call(n=n))
        with anyio.fail_after(5):
            while len(held := await rt.quarantine.list()) < 2:
                await anyio.sleep(0.01)
        first = next(q for q in held if q.actor_id == "w1")
        await rt.quarantine.retry(first.key, by="alice")
        with anyio.fail_after(5):
            while rt.cells["w1"].state.lines == []:
                await anyio.sleep(0.01)
        assert await rt.ref("w1").ask(Ping(), timeout=5) == "pong"  # after the step's commit
        [line] = rt.cells["w1"].state.lines
        assert line.startswith("unavailable: The tool 'wobbly' is unavailable")
        assert [q.actor_id for q in await rt.quarantine.list()] == ["w2"]
        with pytest.raises(tether.EffectNotFound) as raised:
            await rt.quarantine.get(first.key)
        [row] = await rt.store.find_effects(actor_id="w1")
    assert ga.CALLS == [("wobbly", 1), ("wobbly", 2)]  # the retry was never made
    assert str(raised.value).endswith(
        "it is failed, not quarantined: attempt 2 was not made: the breaker of tool 'wobbly' "
        "was open; the step went on without the call"
    )
    assert row.attempts == 1
    assert row.history[-3:-1] == ["retry ordered by alice", "retry approved"]
    assert row.history[-1].startswith("attempt 2 refused: The tool 'wobbly' is unavailable")
