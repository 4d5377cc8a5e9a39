"""Failure isolation under one_for_one: one crashing session among 100 harms none of the others.

100 sessions are dynamic children of one ``Sessions`` supervisor (one_for_one, max_restarts
1000 within 60 s). One of them fails on every delivery of its messages; meanwhile each of the 99
others is sent 20 Work messages concurrently. The 99 process everything without being
restarted, the crashing one's messages end in dead letters after ``max_attempts`` deliveries,
and the supervisor keeps running.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests import supervision_actors as a

pytestmark = pytest.mark.anyio

SESSIONS = 100
WORK = 20
POISON = 5  # messages sent to the crashing session; each fails on every delivery
MAX_ATTEMPTS = 5


@pytest.fixture(autouse=True)
def _fresh_crash_counts() -> None:
    a.crashes.clear()


async def test_one_crashing_session_does_not_disturb_99_others(tmp_path: Path) -> None:
    ids = [f"session-{i:03d}" for i in range(SESSIONS)]
    bad = ids[37]
    good = [cid for cid in ids if cid != bad]
    async with tether.Runtime(
        tmp_path / "iso.db", max_attempts=MAX_ATTEMPTS, poll_interval=0.02
    ) as rt:
        await rt.spawn(a.Sessions, "sessions")
        for cid in ids:
            await rt.add_child("sessions", tether.ChildSpec(a.Worker, cid))
        mark = len(a.events)

        # The poison first (durably queued), then the Work for the 99, all concurrently.
        for i in range(POISON):
            await rt.ref(bad).tell(a.Crash(key=f"poison-{i}", times=1_000_000))

        async def work(cid: str) -> None:
            ref = rt.ref(cid)
            async with anyio.create_task_group() as tg:
                for n in range(WORK):

                    def ask(n: int = n) -> Coroutine[Any, Any, Any]:
                        return ref.ask(a.Work(n=n), timeout=60)

                    tg.start_soon(ask)

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for cid in good:
                    tg.start_soon(work, cid)

        # Every one of the 99 processed all 20 messages ...
        for cid in good:
            assert await rt.ref(cid).ask(a.Count(), timeout=10) == WORK, cid

        # ... while the crashing one lost its poison to dead letters, each after MAX_ATTEMPTS.
        with anyio.fail_after(30):
            while len(await rt.dead_letters.list(bad)) < POISON:
                await anyio.sleep(0.02)
        letters = await rt.dead_letters.list()
        assert {d.actor_id for d in letters} == {bad}
        assert sorted(d.type for d in letters) == ["Crash"] * POISON
        for d in letters:
            assert d.attempts == MAX_ATTEMPTS
            assert len(d.errors) == MAX_ATTEMPTS
            assert all(e.endswith("RuntimeError: crash") for e in d.errors), d.errors
        assert await rt.ref(bad).ask(a.Count(), timeout=10) == 0  # restarted, and serving again

        # None of the 99 was restarted (or even stopped) while their sibling crashed 25 times.
        later = Counter(a.events[mark:])
        assert all(later[("start", cid)] == 0 and later[("stop", cid)] == 0 for cid in good)
        assert later[("start", bad)] == POISON * MAX_ATTEMPTS

        # The supervisor is still running, with all 100 children running under it.
        roots = [r for r in await rt.tree() if r.id == "sessions"]
        assert len(roots) == 1
        root = roots[0]
        assert (root.status, root.active) == ("running", True)
        assert [c.id for c in root.children] == ids
        assert all(c.status == "running" for c in root.children)
        counts = {c.id: c.restart_count for c in root.children}
        assert counts == {cid: POISON * MAX_ATTEMPTS if cid == bad else 0 for cid in ids}
        assert len(rt.cells["sessions"].state.restarts) == POISON * MAX_ATTEMPTS
