"""Many actors activated at once (a runtime opening on a store whose actors hold mail): they are
activated in the order found, a bounded number at a time, and their reads are gathered into
few store calls; every one of them is served."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import tether
from tests import sample_actors as s
from tether.runtime import activation_queue
from tether.runtime.activation_queue import ActivationQueue
from tether.runtime.cell import Cell
from tether.store.reads import Read

pytestmark = pytest.mark.anyio

DEADLINE = 30.0


class _Ready:
    """What the queue reads of a cell: its ``caught_up`` event."""

    def __init__(self) -> None:
        self.caught_up = anyio.Event()


async def test_the_queue_activates_in_the_order_found_never_more_than_its_bound_at_once() -> None:
    started: list[str] = []
    running = 0
    most = 0
    gates: dict[str, _Ready] = {}

    async def activate(actor_id: str) -> Cell | None:
        nonlocal running, most
        started.append(actor_id)
        running += 1
        most = max(most, running)
        gates[actor_id] = gate = _Ready()
        await anyio.lowlevel.checkpoint()
        return gate  # type: ignore[return-value]  # the queue waits on .caught_up alone

    async def make_ready() -> None:
        nonlocal running
        while len(gates) < 20 or any(not g.caught_up.is_set() for g in gates.values()):
            for gate in list(gates.values()):
                if not gate.caught_up.is_set():
                    gate.caught_up.set()
                    running -= 1
                    await anyio.sleep(0.001)
            await anyio.sleep(0.001)

    async with anyio.create_task_group() as tg:
        queue = ActivationQueue(activate, tg.start_soon, at_once=3)
        for i in range(20):
            queue.add(f"a{i:02d}")
        queue.add("a05")  # queued already: not twice
        with anyio.fail_after(DEADLINE):
            await make_ready()
    assert started == [f"a{i:02d}" for i in range(20)]
    assert most == 3
    assert len(queue) == 0


async def test_an_activation_slow_to_catch_up_gives_its_place_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(activation_queue, "_SLOT_WAIT", 0.05)
    started: list[str] = []

    async def activate(actor_id: str) -> Cell | None:
        started.append(actor_id)
        return _Ready()  # type: ignore[return-value]  # never caught up

    async with anyio.create_task_group() as tg:
        queue = ActivationQueue(activate, tg.start_soon, at_once=1)
        for i in range(3):
            queue.add(f"a{i}")
        with anyio.fail_after(DEADLINE):
            while len(started) < 3:
                await anyio.sleep(0.01)
    assert started == ["a0", "a1", "a2"]


async def test_a_runtime_opening_on_many_actors_with_mail_serves_them_all_reading_in_batches(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    ids = [f"acct-{i:03d}" for i in range(200)]
    async with (
        tether.Runtime(db, poll_interval=0.02, lease_ttl=2.0) as rt,
        anyio.create_task_group() as tg,
    ):
        for actor_id in ids:
            tg.start_soon(rt.spawn, s.Account, actor_id)
    # Mail stored by an administration process: the serving runtime finds it in its scan.
    async with tether.Runtime(db, serve=False) as admin, anyio.create_task_group() as tg:
        for actor_id in ids:
            tg.start_soon(admin.ref(actor_id).tell, s.Deposit(amount=7))
    store = tether.SqliteStore(db)
    calls: list[int] = []
    read_many = store.read_many

    async def counted(batch: Sequence[Read]) -> list[object]:
        calls.append(len(batch))
        return await read_many(batch)

    store.read_many = counted  # type: ignore[method-assign]
    async with tether.Runtime(store=store, poll_interval=0.02, lease_ttl=2.0):
        with anyio.fail_after(DEADLINE):
            while _mailbox(db):
                await anyio.sleep(0.05)
    with contextlib.closing(sqlite3.connect(db)) as con:
        deposited = con.execute("SELECT COUNT(DISTINCT actor_id) FROM journal").fetchone()[0]
    assert deposited == 200
    # Record, snapshot, journal and mail of 200 activations: 800 reads, in far fewer calls.
    assert sum(calls) >= 800
    assert len(calls) < 400


def _mailbox(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as con:
        return int(con.execute("SELECT COUNT(*) FROM mailbox").fetchone()[0])
