"""I7: poison is contained. A message that raises, or that kills the whole process, every time
ends in dead letters after ``max_attempts`` with one history entry per attempt, and the
messages queued behind it are processed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

import tether
from tests.chaos.harness import Children
from tests.chaos.programs import LEASE_TTL, POLL, Boom, GetDone, Good, Victim

pytestmark = pytest.mark.slow  # crash tests: real child processes, real signals

MAX_ATTEMPTS = 3
GOODS = 5


@pytest.mark.anyio
async def test_raising_message_is_dead_lettered_and_the_queue_behind_it_drains(
    tmp_path: Path,
) -> None:
    """A message that raises every time is dead-lettered after max_attempts with its history."""
    db = tmp_path / "store.db"
    async with tether.Runtime(
        db, max_attempts=MAX_ATTEMPTS, lease_ttl=LEASE_TTL, poll_interval=POLL
    ) as rt:
        ref = await rt.spawn(Victim, "victim")
        await ref.tell(Boom(), dedup_key="boom")
        for i in range(GOODS):
            await ref.tell(Good(i=i), dedup_key=f"good-{i}")
        assert await ref.ask(GetDone(), timeout=20) == list(range(GOODS))
        with pytest.raises(tether.MessageDeadLettered):
            await ref.ask(Boom(), timeout=20)

    # The world, from a fresh runtime on the same file.
    async with tether.Runtime(db, lease_ttl=LEASE_TTL, poll_interval=POLL) as rt:
        letters = await rt.dead_letters.list("victim")
        assert len(letters) == 2
        for letter in letters:
            assert letter.type == "Boom"
            assert letter.attempts == MAX_ATTEMPTS
            assert len(letter.errors) == MAX_ATTEMPTS, letter.errors
            for n, error in enumerate(letter.errors, start=1):
                assert error.startswith(f"attempt {n}: RuntimeError: boom"), letter.errors
            assert f"max_attempts={MAX_ATTEMPTS}" in letter.reason
        assert await rt.store.pending("victim", time.time() + 60, 10) == []
        assert await rt.ref("victim").ask(GetDone(), timeout=10) == list(range(GOODS))


def _run_until_it_stops_dying(tmp_path: Path, db: Path) -> tuple[list[int], list[int]]:
    """Restart the child until it exits on its own; return the exit codes and what it reported."""
    children = Children(tmp_path)
    codes: list[int] = []
    try:
        for _ in range(MAX_ATTEMPTS + 3):
            child = children.start("victim", "poison-kill", db, MAX_ATTEMPTS, GOODS)
            codes.append(child.wait(30))
            if codes[-1] >= 0:
                break
        done = children.started[-1].value("done")
        assert codes[-1] == 0, f"exit codes {codes}\n{children.describe()}"
        assert done is not None, children.describe()
        return codes, json.loads(done)
    finally:
        children.close()


@pytest.mark.anyio
async def test_process_killing_message_is_dead_lettered_after_max_attempts(
    tmp_path: Path,
) -> None:
    """A message that SIGKILLs its process every time is dead-lettered after max_attempts deaths."""
    db = tmp_path / "store.db"
    codes, done = await anyio.to_thread.run_sync(_run_until_it_stops_dying, tmp_path, db)

    # Each attempt is counted before the handler runs, so the process dies exactly
    # max_attempts times; the next run dead-letters the message and goes on.
    assert codes == [-9] * MAX_ATTEMPTS + [0]
    assert done == list(range(GOODS))

    async with tether.Runtime(db, lease_ttl=LEASE_TTL, poll_interval=POLL) as rt:
        letters = await rt.dead_letters.list()
        assert len(letters) == 1, letters
        (letter,) = letters
        assert (letter.actor_id, letter.type) == ("victim", "Kill")
        assert letter.attempts == MAX_ATTEMPTS
        assert letter.errors == [
            f"attempt {n}: did not finish (the process stopped during delivery)"
            for n in range(1, MAX_ATTEMPTS + 1)
        ]
        assert f"max_attempts={MAX_ATTEMPTS}" in letter.reason
        assert await rt.store.pending("victim", time.time() + 60, 10) == []
        assert await rt.ref("victim").ask(GetDone(), timeout=10) == list(range(GOODS))
