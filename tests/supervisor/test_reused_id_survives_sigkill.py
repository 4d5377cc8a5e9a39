"""A child added again under a used id starts clean, and stays clean after a SIGKILL (I3).

A child process adds a Worker, has it acknowledge three Work messages (one with a dedup key),
removes it, adds it again, has the new one acknowledge one Work with the same dedup key, reports
and is SIGKILLed. A new Runtime on the same file must fold only the new actor's journal.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import tether
from tests import supervision_actors as a
from tests.supervisor.helpers import run_and_kill

pytestmark = pytest.mark.anyio

PROGRAM = """
import json, sys
import anyio, structlog
import tether
from tests import supervision_actors as a

structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))

async def main(db):
    async with tether.Runtime(db, lease_ttl=1.0, poll_interval=0.02) as rt:
        await rt.spawn(a.Sessions, "sessions")
        old = await rt.add_child("sessions", tether.ChildSpec(a.Worker, "w"))
        await old.ask(a.Work(n=1), timeout=30, dedup_key="order-1")
        for n in (2, 3):
            await old.ask(a.Work(n=n), timeout=30)
        before = await old.ask(a.Count(), timeout=30)
        await rt.remove_child("sessions", "w")
        new = await rt.add_child("sessions", tether.ChildSpec(a.Worker, "w"))
        await new.ask(a.Work(n=4), timeout=30, dedup_key="order-1")
        after = await new.ask(a.Count(), timeout=30)
        print("READY " + json.dumps({"before": before, "after": after}), flush=True)
        await anyio.sleep(3600)

anyio.run(main, sys.argv[1])
"""


async def test_a_re_added_child_folds_only_its_own_journal_after_a_sigkill(
    tmp_path: Path,
) -> None:
    db = tmp_path / "reuse.db"
    report = await anyio.to_thread.run_sync(run_and_kill, PROGRAM, db, tmp_path)
    assert report == {"before": 3, "after": 1}
    async with tether.Runtime(db, lease_ttl=1.0, poll_interval=0.02) as rt:
        await rt.spawn(a.Sessions, "sessions")
        assert await rt.ref("w").ask(a.Count(), timeout=10) == 1
        assert len(await rt.store.load_journal("w", 0, 100)) == 1
        assert [e.child_id for e in rt.cells["sessions"].state.dynamic] == ["w"]
        assert await rt.dead_letters.list() == []
