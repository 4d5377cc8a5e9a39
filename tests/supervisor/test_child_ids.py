"""``add_child`` of an id that was used before (issue #15, point 3; docs/supervision.md).

An id whose actor is running is refused (OTP's ``already_started``). An id whose actor has
stopped (removed, or a temporary child that ended) goes to the new child, which starts clean:
nothing of its predecessor's journal, dedup keys, ledger, approvals or guards is its own, and
the predecessor's dead letters stay as records that can no longer be retried into it. An id
whose predecessor left an effect of unknown outcome is refused, naming the effect.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

import tether
from tests import supervision_actors as a
from tests.runtime import effect_actors as fx
from tests.runtime import guard_actors as g
from tests.supervisor.helpers import forget_events, runtime

pytestmark = pytest.mark.anyio


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
    with anyio.fail_after(timeout):
        while not (value := await check()):
            await anyio.sleep(0.01)
    return value


@pytest.fixture(autouse=True)
def _clean() -> None:
    forget_events()
    fx.reset()
    g.CALLS.clear()


async def test_a_removed_child_can_be_added_again_and_starts_clean(store_url: str) -> None:
    """The new child runs from its initial state: the predecessor's journal is not folded
    into it, and a dedup key the predecessor saw does not swallow the newcomer's message."""
    async with runtime(store_url) as rt:
        await rt.spawn(a.Sessions, "sessions")
        old = await rt.add_child("sessions", tether.ChildSpec(a.Worker, "w"))
        await old.tell(a.Work(), dedup_key="order-1")
        await old.tell(a.Work())
        assert await old.ask(a.Count(), timeout=5) == 2
        assert await rt.remove_child("sessions", "w") is True

        new = await rt.add_child("sessions", tether.ChildSpec(a.Worker, "w"))
        assert await new.ask(a.Count(), timeout=5) == 0
        await new.tell(a.Work(), dedup_key="order-1")
        assert await new.ask(a.Count(), timeout=5) == 1
        assert [c.id for c in (await rt.tree())[0].children] == ["w"]
        assert rt.cells["sessions"].state.counts.get("w", 0) == 0
    async with runtime(store_url) as rt:  # and so it stays after a reopen
        await rt.spawn(a.Sessions, "sessions")
        assert await rt.ref("w").ask(a.Count(), timeout=5) == 1


async def test_a_temporary_child_that_ended_can_be_added_again() -> None:
    """OTP forgets a temporary child when it ends (normally or not): its id is free."""
    async with runtime() as rt:
        await rt.spawn(a.Sessions, "sessions")
        spec = tether.ChildSpec(a.Worker, "t", restart="temporary")
        t = await rt.add_child("sessions", spec)
        await t.ask(a.Work(), timeout=5)
        await t.ask(a.Exit(reason="done"), timeout=5)
        await eventually(lambda: _no_dynamic_children(rt))
        t = await rt.add_child("sessions", spec)
        assert await t.ask(a.Count(), timeout=5) == 0
        await t.tell(a.Crash())  # a temporary child that fails is stopped and forgotten too
        await eventually(lambda: _no_dynamic_children(rt))
        t = await rt.add_child("sessions", spec)
        assert await t.ask(a.Count(), timeout=5) == 0


async def _no_dynamic_children(rt: tether.Runtime) -> bool:
    return not rt.cells["sessions"].state.dynamic


async def test_add_child_of_a_running_id_raises_already_started() -> None:
    """OTP's {error, {already_started, Pid}}: a running child, a declared one, and an actor
    outside the supervisor (already_started_outside_supervisor) are all refused by name."""
    async with runtime() as rt:
        await rt.spawn(a.Sessions, "sessions")
        await rt.spawn(a.OneForOneSup, "sup")
        await rt.spawn(a.Worker, "loner")
        await rt.add_child("sessions", tether.ChildSpec(a.Worker, "w"))
        with pytest.raises(tether.AlreadyStarted, match="under supervisor 'sessions'") as exc:
            await rt.add_child("sessions", tether.ChildSpec(a.Worker, "w"))
        assert (exc.value.actor_id, exc.value.parent_id) == ("w", "sessions")
        with pytest.raises(tether.AlreadyStarted, match="under supervisor 'sup'"):
            await rt.add_child("sup", tether.ChildSpec(a.Worker, "w1"))
        with pytest.raises(tether.AlreadyStarted, match="as a top-level actor"):
            await rt.add_child("sessions", tether.ChildSpec(a.Worker, "loner"))
        assert isinstance(exc.value, tether.ActorIdTaken)
        assert await rt.ref("w").ask(a.Count(), timeout=5) == 0  # nothing was disturbed


async def test_a_stopped_child_keeps_its_spec_until_removed() -> None:
    """OTP's already_present: a transient child that ended normally (or a declared child that
    was stopped) keeps its spec; add_child names it, and rt.remove_child frees a dynamic one."""
    async with runtime() as rt:
        await rt.spawn(a.Sessions, "sessions")
        await rt.spawn(a.MixedSup, "mixed")
        tr = await rt.add_child("sessions", tether.ChildSpec(a.Worker, "tr", restart="transient"))
        await tr.ask(a.Exit(reason="done"), timeout=5)
        await eventually(lambda: _status(rt, "tr", "stopped"))
        with pytest.raises(tether.ActorIdTaken, match=r"not running.*remove_child"):
            await rt.add_child("sessions", tether.ChildSpec(a.Worker, "tr"))
        await rt.stop("perm", "by hand")
        with pytest.raises(tether.ActorIdTaken, match="a declared child of 'mixed'"):
            await rt.add_child("mixed", tether.ChildSpec(a.Worker, "perm"))
        assert await rt.remove_child("sessions", "tr") is True
        again = await rt.add_child("sessions", tether.ChildSpec(a.Worker, "tr"))
        assert await again.ask(a.Count(), timeout=5) == 0


async def _status(rt: tether.Runtime, actor_id: str, status: str) -> bool:
    rec = await rt.store.get_actor(actor_id)
    return rec is not None and rec.status == status


async def test_an_id_that_was_another_supervisors_child_is_refused() -> None:
    """Ids are unique in a store: a stopped child of one supervisor is not adopted by another."""
    async with runtime() as rt:
        await rt.spawn(a.Sessions, "sessions")
        await rt.spawn(a.LazySessions, "other")
        await rt.add_child("sessions", tether.ChildSpec(a.Worker, "w"))
        await rt.remove_child("sessions", "w")
        with pytest.raises(tether.ActorIdTaken, match="was a child of 'sessions'"):
            await rt.add_child("other", tether.ChildSpec(a.Worker, "w"))
        await rt.add_child("sessions", tether.ChildSpec(a.Worker, "w"))


async def test_a_predecessors_dead_letters_stay_but_are_not_retried_into_its_successor() -> None:
    """Dead letters are records (I7): kept, listed, and refused by retry, which would hand a
    message meant for the old actor to the new one."""
    async with runtime() as rt:
        await rt.spawn(a.Sessions, "sessions")
        spec = tether.ChildSpec(a.Worker, "t", restart="temporary")
        t = await rt.add_child("sessions", spec)
        await t.tell(a.Crash())
        [letter] = await eventually(lambda: rt.dead_letters.list("t"))
        await eventually(lambda: _no_dynamic_children(rt))
        await rt.add_child("sessions", spec)
        assert [d.msg_id for d in await rt.dead_letters.list("t")] == [letter.msg_id]
        with pytest.raises(tether.ActorStopped, match="replaced by a new actor"):
            await rt.dead_letters.retry(letter.msg_id)
        assert await rt.ref("t").ask(a.Count(), timeout=5) == 0


async def test_a_quarantined_effect_keeps_the_id_until_a_person_resolves_it(
    store_url: str,
) -> None:
    """The quarantined row is the only trace of a call that may have happened: the id is
    refused, naming it, until it is resolved; then the newcomer starts with an empty ledger."""
    fx.SCRIPT["send_email"] = [fx.HANG]
    async with runtime(store_url) as rt:
        await rt.spawn(a.Sessions, "sessions")
        agent = await rt.add_child("sessions", tether.ChildSpec(fx.Agent, "agent"))
        await agent.tell(fx.Do(effects=["email"]))
        [held] = await eventually(rt.quarantine.list)
        await rt.remove_child("sessions", "agent")
        with pytest.raises(tether.ActorIdTaken, match=f"{held.key}.*quarantined.*resolve"):
            await rt.add_child("sessions", tether.ChildSpec(fx.Agent, "agent"))
        await rt.quarantine.abort(held.key, "the actor was removed", by="ops")
        agent = await rt.add_child("sessions", tether.ChildSpec(fx.Agent, "agent"))
        assert await agent.ask(fx.Do(effects=["refund"]), timeout=5) == ["refund o0 100"]
        [row] = await rt.store.find_effects(actor_id="agent")
        assert row.tool == "refund"


async def test_a_call_of_unknown_outcome_keeps_the_id_for_good(store_url: str) -> None:
    """An intent without a receipt of a stopped actor can never be settled: the id is refused
    with that reason every time, and the row stays."""
    fx.SCRIPT["refund"] = [fx.HANG]
    async with runtime(store_url) as rt:
        await rt.spawn(a.Sessions, "sessions")
        spec = tether.ChildSpec(fx.Agent, "agent", shutdown="brutal")
        agent = await rt.add_child("sessions", spec)
        await agent.tell(fx.Do(effects=["refund"]))
        await eventually(lambda: _calls("refund"))
        await rt.remove_child("sessions", "agent")  # brutal: cancelled inside the call
        [row] = await rt.store.find_effects(actor_id="agent")
        assert row.status == "pending"
        for _ in range(2):
            with pytest.raises(tether.ActorIdTaken, match=f"{row.key}.*cannot be used again"):
                await rt.add_child("sessions", spec)
        assert await rt.store.find_effects(actor_id="agent") == [row]


async def _calls(tool: str) -> bool:
    return any(name == tool for name, _ in fx.CALLS)


async def test_a_re_added_actor_does_not_inherit_its_predecessors_loop_history(
    store_url: str,
) -> None:
    """The loop guard of the old actor remembers its calls (in memory, and from its ledger):
    the new actor's first call is not the third of a repeat."""
    async with runtime(store_url) as rt:
        await rt.spawn(a.Sessions, "sessions")
        old = await rt.add_child("sessions", tether.ChildSpec(g.Researcher, "r"))
        for _ in range(2):
            assert await old.ask(g.Search(query="q"), timeout=5) == "results for q"
        await rt.remove_child("sessions", "r")
        new = await rt.add_child("sessions", tether.ChildSpec(g.Researcher, "r"))
        assert await new.ask(g.Search(query="q"), timeout=5) == "results for q"
        assert await new.ask(g.Search(query="q"), timeout=5) == "results for q"
        third = await new.ask(g.Search(query="q"), timeout=5)
        assert third.startswith("loop "), third  # its own repeats are still caught


async def test_add_child_finishes_an_add_that_was_cut_short(store_url: str) -> None:
    """A crash between storing the child's record and the supervisor's journaling it leaves an
    active child of the supervisor that is not among its children: add_child of it again
    takes it in (resuming its record), instead of refusing an id nobody could then use."""
    async with runtime(store_url) as rt:
        await rt.spawn(a.Sessions, "sessions")
        await rt.spawn_child(a.Worker, "w", "sessions", {})  # the record, and no entry
        await rt.ref("w").tell(a.Work())
        w = await rt.add_child("sessions", tether.ChildSpec(a.Worker, "w"))
        assert await w.ask(a.Count(), timeout=5) == 1
        assert [e.child_id for e in rt.cells["sessions"].state.dynamic] == ["w"]
        with pytest.raises(tether.AlreadyStarted):
            await rt.add_child("sessions", tether.ChildSpec(a.Worker, "w"))


async def test_a_stopped_top_level_actors_id_can_be_given_to_a_child() -> None:
    async with runtime() as rt:
        await rt.spawn(a.Sessions, "sessions")
        loner = await rt.spawn(a.Worker, "loner")
        await loner.ask(a.Work(), timeout=5)
        await rt.stop("loner", "retired")
        child = await rt.add_child("sessions", tether.ChildSpec(a.Worker, "loner"))
        assert await child.ask(a.Count(), timeout=5) == 0
        assert (await rt.store.get_actor("loner")).parent_id == "sessions"  # type: ignore[union-attr]
