"""A supervision tree survives SIGKILL of its process (DESIGN §5, I3).

A child process builds a tree (a ``TightSessions`` supervisor with dynamic children), makes one
child crash three times (three restarts inside the supervisor's window), has every child
acknowledge some Work, reports what it saw and is SIGKILLed. A new Runtime on the same file must
bring back the supervisor with its dynamic children, the restart history still counting in the
window, and each child's state equal to the fold of its journal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests import supervision_actors as a
from tests.supervisor.helpers import run_and_kill

pytestmark = pytest.mark.anyio

CHILDREN = ("s1", "s2", "s3")
WORK = {"s1": 3, "s2": 5, "s3": 8}  # Work messages each child acknowledges before the kill
CRASHED = "s2"
PRE_KILL_CRASHES = 3  # restarts recorded before the kill; TightSessions allows 4 in its window

# The child program. Its structlog lines go to stderr; stdout carries the READY report only.
PROGRAM = f"""
import json, sys
import anyio, structlog
import tether
from tests import supervision_actors as a

structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
CHILDREN = {CHILDREN!r}
WORK = {WORK!r}
CRASHED, CRASHES = {CRASHED!r}, {PRE_KILL_CRASHES!r}

async def main(db):
    async with tether.Runtime(db, lease_ttl=1.0, poll_interval=0.02) as rt:
        await rt.spawn(a.TightSessions, "sessions")
        for cid in CHILDREN:
            await rt.add_child("sessions", tether.ChildSpec(a.Worker, cid))
        for i in range(CRASHES):
            # crashes on its first delivery, then succeeds on redelivery by the new instance
            await rt.ref(CRASHED).tell(a.Crash(key=f"pre-kill-{{i}}"))
        acked = {{}}
        for cid in CHILDREN:
            for i in range(WORK[cid]):
                await rt.ref(cid).ask(a.Work(n=i), timeout=30)  # queued behind the crashes
                acked[cid] = acked.get(cid, 0) + 1
        # A barrier: the supervisor handles this after every ChildFailed, so its steps are committed.
        assert await rt.remove_child("sessions", "no-such-child") is False
        state = rt.cells["sessions"].state
        nodes = {{c.id: c for root in await rt.tree() for c in root.children}}
        report = {{
            "acked": acked,
            "restarts": state.restarts,
            "counts": state.counts,
            "dynamic": [e.child_id for e in state.dynamic],
            "restart_count": {{cid: nodes[cid].restart_count for cid in CHILDREN}},
            "crash_starts": a.events.count(("start", CRASHED)),
        }}
        print("READY " + json.dumps(report), flush=True)
        await anyio.sleep(3600)

anyio.run(main, sys.argv[1])
"""


@pytest.fixture(autouse=True)
def _fresh_crash_counts() -> None:
    """``Crash`` crashes once per (actor, key) *per process*: start each test from zero."""
    a.crashes.clear()
    a.events.clear()


async def until(check: Any, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not await check():
            await anyio.sleep(0.02)


async def sessions_node(rt: tether.Runtime) -> tether.TreeNode:
    roots = [r for r in await rt.tree() if r.id == "sessions"]
    assert len(roots) == 1, roots
    return roots[0]


@pytest.mark.parametrize("boot", ["spawn", "message"])
async def test_supervisor_children_window_and_state_survive_sigkill(
    tmp_path: Path, boot: str
) -> None:
    """``boot``: how the tree comes back in the new process: the application spawns its top
    supervisor again (spawn resumes it), or a message to one child activates its supervisor,
    which starts all its children."""
    db = tmp_path / "tree.db"
    before = await anyio.to_thread.run_sync(run_and_kill, PROGRAM, db, tmp_path)

    # What the killed process saw: three restarts of s2, all inside the window.
    assert before["acked"] == WORK
    assert before["dynamic"] == list(CHILDREN)
    assert before["counts"] == {CRASHED: PRE_KILL_CRASHES}
    assert len(before["restarts"]) == PRE_KILL_CRASHES
    assert before["restart_count"] == {c: PRE_KILL_CRASHES if c == CRASHED else 0 for c in CHILDREN}
    assert before["crash_starts"] == 1 + PRE_KILL_CRASHES

    async with tether.Runtime(db, lease_ttl=1.0, poll_interval=0.02) as rt:
        if boot == "spawn":
            await rt.spawn(a.TightSessions, "sessions")
        else:
            assert await rt.ref("s3").ask(a.Count(), timeout=10) == before["acked"]["s3"]

        # 1. The tree is back: the supervisor with its dynamic children, all running here.
        root = await sessions_node(rt)
        assert root.actor_class == "tests.supervision_actors:TightSessions"
        assert (root.status, root.active) == ("running", True)
        assert [c.id for c in root.children] == list(CHILDREN)
        for child in root.children:
            assert child.actor_class == "tests.supervision_actors:Worker"
            assert (child.status, child.active) == ("running", True), child
            assert child.children == []

        # 2. The restart history survived: per-child counts and the window's timestamps.
        assert {c.id: c.restart_count for c in root.children} == before["restart_count"]
        state = rt.cells["sessions"].state
        assert state.restarts == before["restarts"]
        assert state.counts == before["counts"]
        assert [e.child_id for e in state.dynamic] == before["dynamic"]
        assert (await sessions_node(rt)).find(CRASHED).last_failure == "RuntimeError: crash"  # type: ignore[union-attr]

        # 3. Each child's state is the fold of its journal: every acknowledged Work, no more.
        for cid in CHILDREN:
            journal = await rt.store.load_journal(cid, 0, 10_000)
            assert len(journal) == before["acked"][cid]
            assert await rt.ref(cid).ask(a.Count(), timeout=10) == before["acked"][cid]
        assert await rt.dead_letters.list() == []  # the crashes were transient: nothing lost

        # 4. The recovered window still counts. One more restart fits (4 <= max_restarts=4) ...
        await rt.ref(CRASHED).tell(a.Crash(key="post-kill-1"))
        assert await rt.ref(CRASHED).ask(a.Count(), timeout=10) == before["acked"][CRASHED]
        root = await sessions_node(rt)
        assert root.status == "running"
        assert root.find(CRASHED).restart_count == PRE_KILL_CRASHES + 1  # type: ignore[union-attr]

        # ... and the next exceeds the intensity only because the pre-kill restarts still count:
        # the supervisor gives up and, having no parent, its subtree is recorded as failed.
        await rt.ref(CRASHED).tell(a.Crash(key="post-kill-2"))

        async def tree_failed() -> bool:
            return (await sessions_node(rt)).status == "failed"

        await until(tree_failed)
        root = await sessions_node(rt)
        assert {c.id: c.status for c in root.children} == dict.fromkeys(CHILDREN, "failed")
        rec = await rt.store.get_actor("sessions")
        assert rec is not None
        assert rec.stop_reason is not None
        assert rec.stop_reason.startswith("restart intensity exceeded: 5 restarts within 120.0 s")
        # The message that tipped it over is not dropped: it waits in dead letters.
        assert [d.type for d in await rt.dead_letters.list(CRASHED)] == ["Crash"]
