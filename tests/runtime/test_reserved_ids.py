"""The ids the runtime derives for itself (the guards under ``tether.guards``) are reserved: no
user actor can take one, and a store that already holds a user actor at one (spawned before
the ids were reserved) fails the calls that need that guard by name, never on an assertion."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import tether
from tests.runtime import effect_actors as ea
from tests.runtime import guard_actors as ga
from tests.runtime.effect_actors import Banker, Wire
from tests.runtime.guard_actors import Call, Caller
from tests.supervision_actors import OneForOneSup
from tether.actors.actor import actor_spec
from tether.actors.guards.actors import GUARDS_SUPERVISOR, Breaker, LoopGuard
from tether.store.records import ActorRecord, Spawn
from tether.supervisor.guards import GuardSupervisor

pytestmark = pytest.mark.anyio

RESERVED = [
    ("breaker:flaky", "the circuit breaker of tool 'flaky'"),
    ("victim/gate", "the escalation gate of session 'victim'"),
    ("victim/loops", "the loop detector of session 'victim'"),
    ("tether.guards", "the supervisor of the guards"),
    ("tether.audit", "its own actors"),
]


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    ga.CALLS.clear()
    ga.FAILING["flaky"] = False
    ea.reset()
    yield
    ga.FAILING["flaky"] = True
    ga.CALLS.clear()


def runtime(path: Path, **kw: Any) -> tether.Runtime:
    kw.setdefault("poll_interval", 0.02)
    return tether.Runtime(path / "agents.db", **kw)


@pytest.mark.parametrize(("actor_id", "what"), RESERVED)
async def test_spawn_refuses_an_id_the_runtime_derives_for_itself(
    tmp_path: Path, actor_id: str, what: str
) -> None:
    async with runtime(tmp_path) as rt:
        with pytest.raises(tether.ConfigError, match="is reserved") as caught:
            await rt.spawn(Caller, actor_id)
        assert await rt.store.get_actor(actor_id) is None  # nothing stored
    assert what in str(caught.value)
    assert "give Caller another id" in str(caught.value)


async def test_add_child_and_spawn_child_refuse_a_guard_id_for_anything_but_that_guard(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path) as rt:
        await rt.spawn(OneForOneSup, "sup")
        # A user's supervisor cannot hold a breaker, even of the breaker's own class...
        with pytest.raises(tether.ConfigError, match="'breaker:x' is reserved"):
            await rt.add_child("sup", tether.ChildSpec(Breaker, "breaker:x", tool="x"))
        # ...and tether's cannot hold a user's actor at a guard's id.
        with pytest.raises(tether.ConfigError, match="'victim/loops' is reserved"):
            await rt.add_child("tether.guards", tether.ChildSpec(Caller, "victim/loops"))
        with pytest.raises(tether.ConfigError, match="'victim/gate' is reserved"):
            await rt.spawn_child(Caller, "victim/gate", "sup", {})
        with pytest.raises(tether.ConfigError, match="'s/loops' is reserved"):
            await rt.spawn_child(LoopGuard, "s/loops", None, {"session_id": "s"})
        for actor_id in ("breaker:x", "victim/loops", "victim/gate", "s/loops"):
            assert await rt.store.get_actor(actor_id) is None


async def test_the_runtime_still_starts_its_own_guards_at_those_ids(tmp_path: Path) -> None:
    async with runtime(tmp_path) as rt:
        caller = await rt.spawn(Caller, "caller")
        assert await caller.ask(Call(n=7), timeout=10) == "ok 7"
        rec = await rt.store.get_actor("breaker:flaky")
        assert rec is not None
        assert rec.parent_id == "tether.guards"
        assert rec.class_path == actor_spec(Breaker).class_path


async def _spawned_by_an_older_version(rt: tether.Runtime, actor_id: str) -> None:
    """Store a user actor at ``actor_id`` as a version without reserved ids did: its spawn
    record, written as ``spawn`` wrote it, without the check."""
    spec = actor_spec(Caller)
    record = ActorRecord(
        actor_id=actor_id,
        class_path=spec.class_path,
        init=msgspec.msgpack.encode({}),
        parent_id=None,
        status="active",
        stop_reason=None,
        fence=0,
        lease_owner=None,
        lease_expires=0.0,
        created_at=rt.clock(),
    )
    await rt.committer.submit(Spawn(record))


async def test_a_user_actor_stored_at_a_breaker_id_fails_the_call_by_name(tmp_path: Path) -> None:
    async with runtime(tmp_path, max_attempts=1) as rt:
        await _spawned_by_an_older_version(rt, "breaker:flaky")
        caller = await rt.spawn(Caller, "caller")
        with pytest.raises(tether.MessageDeadLettered) as caught:
            await caller.ask(Call(n=7), timeout=10)
    [error, _] = caught.value.errors
    assert "AssertionError" not in error
    assert "ConfigError: actor id 'breaker:flaky' is held by a " in error
    assert "tests.runtime.guard_actors:Caller, not a Breaker" in error
    assert "the circuit breaker of tool 'flaky'" in error
    assert ga.CALLS == []  # never made without its breaker


async def test_a_user_actor_stored_at_a_session_gate_fails_its_approvals_by_name(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path, max_attempts=1) as rt:
        await _spawned_by_an_older_version(rt, "victim/gate")
        banker = await rt.spawn(Banker, "victim")
        with pytest.raises(tether.MessageDeadLettered) as caught:
            await banker.ask(Wire(to="acme", cents=500), timeout=10)
        pending = await rt.approvals.pending()
    [error, _] = caught.value.errors
    assert "ConfigError: actor id 'victim/gate' is held by a " in error
    assert "the escalation gate of session 'victim'" in error
    assert pending == []  # nothing held half-way
    assert ea.CALLS == []  # the wire never ran without its approval


async def test_a_store_that_recorded_the_guards_supervisor_where_it_was_still_runs_it(
    tmp_path: Path,
) -> None:
    """``GuardSupervisor`` moved from ``tether.actors.guards.actors`` to
    ``tether.supervisor.guards``: a store written before the move names it by the old path, and
    its guards' supervisor still comes back, and is still the runtime's, on such a store."""
    db = tmp_path / "agents.db"
    async with tether.Runtime(db) as rt:
        await rt.spawn(GuardSupervisor, GUARDS_SUPERVISOR)
    old = "tether.actors.guards.actors:GuardSupervisor"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE actors SET class_path = ? WHERE actor_id = ?", (old, GUARDS_SUPERVISOR)
        )
    conn.close()
    async with tether.Runtime(db) as rt:
        with anyio.fail_after(30):  # a resident supervisor comes back by itself
            while GUARDS_SUPERVISOR not in rt.cells:
                await anyio.sleep(0.02)
        await rt.spawn(GuardSupervisor, GUARDS_SUPERVISOR)  # as the effect path does
        [node] = [n for n in await rt.tree() if n.id == GUARDS_SUPERVISOR]
        assert (node.status, node.active, node.actor_class) == ("running", True, old)
