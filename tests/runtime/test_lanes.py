"""Write lanes (``tether.runtime.lanes``): each write's lane is its actor's, a session's own
guards share the session's, and the group committer commits the lanes' batches at once while
one actor's writes commit in submission order."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from tether.actors.guards.actors import breaker_id, gate_id, loops_id
from tether.runtime.committer import GroupCommitter, all_settled
from tether.runtime.lanes import home, lane_count, lane_key
from tether.store.records import (
    Batch,
    BatchResult,
    Claim,
    EffectRecord,
    EffectWrite,
    JournalRow,
    Spawn,
    StepCommit,
    Watch,
)
from tether.testing.conformance.support import record

pytestmark = pytest.mark.anyio


def test_a_sessions_own_guards_take_its_lane_and_a_shared_guard_its_own() -> None:
    assert home(loops_id("s-1")) == "s-1"
    assert home(gate_id("s-1")) == "s-1"
    assert home("s-1") == "s-1"
    assert home(breaker_id("search")) == breaker_id("search")


def test_each_kind_of_write_is_keyed_by_the_actor_it_is_ordered_with() -> None:
    assert lane_key(Spawn(record("child", parent_id="parent"))) == "child"
    assert lane_key(Watch(watcher="w", watched="x")) == "x"
    assert lane_key(Claim("a", 1, "m")) == "a"
    assert lane_key(StepCommit(loops_id("a"), 1, "m", [], [])) == "a"
    effect = EffectRecord("a", "m", 0, "k", "t", "h", b"", "pending", 1)
    assert lane_key(EffectWrite(1, effect)) == "a"


class _NoLanes:
    pass


class _Lanes:
    def __init__(self, lanes: Any) -> None:
        self.write_lanes = lanes


def test_a_store_that_does_not_say_gets_one_lane() -> None:
    assert lane_count(_NoLanes()) == 1
    assert lane_count(_Lanes(3)) == 3
    for wrong in (0, -1, "2", 2.0, True, None):
        assert lane_count(_Lanes(wrong)) == 1


def on_both_lanes(lanes: int) -> list[str]:
    """Actor ids, three on each of ``lanes`` lanes (a lane is the id's hash, per process)."""
    found: dict[int, list[str]] = {lane: [] for lane in range(lanes)}
    i = 0
    while min(len(ids) for ids in found.values()) < 3:
        actor_id = f"a{i}"
        i += 1
        ids = found[hash(actor_id) % lanes]
        if len(ids) < 3:
            ids.append(actor_id)
    return [a for ids in found.values() for a in ids]


class SlowStore:
    """A store whose every commit takes a few turns of the event loop, committing up to
    ``write_lanes`` batches at once; it records each actor's journal rows in commit order."""

    immediate = None
    write_lanes = 2

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.committed: dict[str, list[int]] = {}

    async def apply(self, batch: Batch) -> BatchResult:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            for _ in range(3 + len(batch.steps) % 3):  # batches take unequal times
                await asyncio.sleep(0)
        finally:
            self.now -= 1
        for st in batch.steps:
            self.committed.setdefault(st.actor_id, []).extend(e.seq for e in st.events)
        return BatchResult()


async def test_two_lanes_commit_at_once_and_keep_each_actors_submission_order() -> None:
    store = SlowStore()
    committer = GroupCommitter(store, max_batch=2)  # type: ignore[arg-type]
    sessions = on_both_lanes(2)
    actors = [*sessions, loops_id(sessions[0]), gate_id(sessions[-1])]
    futures: list[asyncio.Future[BatchResult]] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(committer.run)
        for seq in range(1, 11):
            for actor_id in actors:
                write = StepCommit(actor_id, 1, f"m{seq}", [JournalRow(seq, b"")], [])
                futures.append(committer.submit(write))
            await asyncio.sleep(0)
        await all_settled(futures)
        await committer.close()
    assert store.most == 2
    assert store.committed == {a: list(range(1, 11)) for a in actors}
