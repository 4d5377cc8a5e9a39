"""I1, I2, I3 under SIGKILL: a counter fed 1,000 deduplicated increments by a sender that is
killed at random points and restarted, resending from its last acknowledged message."""

from __future__ import annotations

import random
import time
from pathlib import Path

import anyio
import msgspec
import pytest

import tether
from tests.chaos.harness import Children
from tests.chaos.programs import LEASE_TTL, POLL, Counter, GetCount, Incremented
from tether.testing import check_store_async

pytestmark = pytest.mark.slow  # crash tests: real child processes, real signals

TOTAL = 1000
KILLS = 6


def _progress(path: Path) -> int:
    try:
        return int(path.read_text())
    except FileNotFoundError:
        return -1


def _kill_and_restart(tmp_path: Path, db: Path, progress: Path, rng: random.Random) -> list[int]:
    """Run the sender KILLS times, SIGKILLing it at a random moment each time, then once to
    the end. Returns the acknowledged index at each kill that hit a running, unfinished child."""
    children = Children(tmp_path)
    landed: list[int] = []
    try:
        for _ in range(KILLS):
            child = children.start("counter", "counter", db, progress, TOTAL)
            if rng.random() < 0.25:
                time.sleep(rng.uniform(0.0, 0.4))  # anywhere: start-up, recovery, sending
            else:
                child.wait_report("ready", 30)
                time.sleep(rng.uniform(0.02, 0.25))  # while sending and processing
            if child.kill() and child.value("count") is None:
                landed.append(_progress(progress))
        final = children.start("counter", "counter", db, progress, TOTAL)
        assert final.wait(60) == 0, children.describe()
        assert final.value("count") == str(TOTAL), children.describe()
    finally:
        children.close()
    return landed


@pytest.mark.anyio
async def test_counter_survives_repeated_sigkill_with_exactly_once_effects(tmp_path: Path) -> None:
    """Repeated SIGKILLs of a deduplicating sender leave the counter at exactly 1,000."""
    db = tmp_path / "store.db"
    progress = tmp_path / "progress"
    seed = random.randrange(1 << 32)
    landed = await anyio.to_thread.run_sync(
        _kill_and_restart, tmp_path, db, progress, random.Random(seed)
    )
    assert len(landed) >= KILLS - 1, f"seed={seed}: too few kills hit a running sender: {landed}"

    async with tether.Runtime(db, lease_ttl=LEASE_TTL, poll_interval=POLL) as rt:
        rows = await rt.store.load_journal("counter", 0, 10 * TOTAL)
        events = [msgspec.msgpack.decode(r.payload, type=Incremented) for r in rows]
        # I1 + I2: every message applied, none twice; the journal is gap-free.
        assert [r.seq for r in rows] == list(range(1, TOTAL + 1)), f"seed={seed}"
        assert [e.i for e in events] == list(range(TOTAL)), f"seed={seed}"
        # I3: every incarnation's handler saw exactly the fold of the committed journal.
        assert [e.seen for e in events] == list(range(TOTAL)), f"seed={seed}"
        assert await rt.dead_letters.list() == []
        assert await rt.store.pending("counter", time.time() + 60, 10) == []
        ref = await rt.spawn(Counter, "counter")
        assert await ref.ask(GetCount(), timeout=10) == TOTAL
    # The store as `tether check` sees it: its head and its snapshots agree with its journal.
    report = await check_store_async(db)
    assert report.ok, f"seed={seed}: {report.summary()}"
    assert report.counts["snapshots"] == 1
