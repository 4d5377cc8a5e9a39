"""Recovery on open: a Runtime reopened on an existing store finds the actors that have queued
messages and runs them, with no spawn and no new message."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import msgspec
import pytest

import tether
from tests.chaos.harness import Children
from tests.chaos.programs import LEASE_TTL, POLL, JobDone

pytestmark = pytest.mark.slow  # crash tests: real child processes, real signals

JOBS = 20


def _enqueue_then_stop(tmp_path: Path, db: Path, mode: str) -> int:
    children = Children(tmp_path)
    try:
        child = children.start("enqueue", "enqueue", db, JOBS, mode)
        code = child.wait(30)
        assert child.has("sent"), children.describe()
        return code
    finally:
        children.close()


async def _queued(db: Path) -> int:
    """Jobs still in the worker's mailbox, read through the Store API (no runtime running)."""
    store = tether.SqliteStore(db)
    await store.open()
    try:
        return len(await store.pending("worker", time.time() + 60, 1000))
    finally:
        await store.close()


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "exit_code"), [("kill", -9), ("clean", 0)])
async def test_reopened_runtime_resumes_queued_messages_without_a_new_send(
    tmp_path: Path, mode: str, exit_code: int
) -> None:
    """After a SIGKILL or a clean close, reopening the store alone drains the queued jobs."""
    db = tmp_path / "store.db"
    assert await anyio.to_thread.run_sync(_enqueue_then_stop, tmp_path, db, mode) == exit_code
    queued = await _queued(db)
    assert queued > 0, "the sender processed every job before it stopped: nothing to resume"

    async with tether.Runtime(db, lease_ttl=LEASE_TTL, poll_interval=POLL) as rt:
        with anyio.fail_after(20):
            while rows := await rt.store.pending("worker", time.time() + 60, 1000):
                await anyio.sleep(0.05)
        assert rows == []
        journal = await rt.store.load_journal("worker", 0, 1000)

    done = [msgspec.msgpack.decode(r.payload, type=JobDone).i for r in journal]
    assert done == list(range(JOBS))
    assert await _queued(db) == 0
