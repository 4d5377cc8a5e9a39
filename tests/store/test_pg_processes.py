"""Runtimes in separate processes sharing a PostgreSQL store: wakeups by LISTEN/NOTIFY.

Each runtime here polls the store only every 60 seconds, so anything that happens within the
test's (generous) deadlines was carried by a notice: the serving process learns of a message
stored by another process, and the asking process of the reply stored by the serving one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

import tether
from tests import sample_actors as s

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SLOW_POLL = 60.0  # seconds: far beyond every deadline below


@contextmanager
def serving(url: str, actor_id: str) -> Iterator[subprocess.Popen[str]]:
    """A runtime process serving ``actor_id`` on ``url``, ready; stopped on leaving."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
    with subprocess.Popen(
        [sys.executable, "-m", "tests.store.pg_serving", url, actor_id, str(SLOW_POLL)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            assert proc.stdout.readline().strip() == "ready"
            yield proc
        finally:
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def test_an_ask_answered_by_another_process_returns_to_the_asker_at_once(
    pg_url: str,
) -> None:
    """An administration process asks an actor served by another process: the serving
    process is woken by the store's notice, the asker by the notice of the reply. Neither
    polls within the deadline."""
    with serving(pg_url, "acct"):
        async with tether.Runtime(pg_url, serve=False, poll_interval=SLOW_POLL) as admin:
            acct = admin.ref("acct")
            await acct.tell(s.Deposit(amount=5))
            with anyio.fail_after(20):
                assert await acct.ask(s.Deposit(amount=7), timeout=20) is None
                assert await acct.ask(s.GetBalance(), timeout=20) == 12


async def test_two_serving_processes_wake_each_other(pg_url: str) -> None:
    """A serving runtime here forwards money to an actor served by another process, which
    learns of it from the notice; the balance is read back across the processes."""
    with serving(pg_url, "savings"):
        async with tether.Runtime(pg_url, poll_interval=SLOW_POLL, passivate_after=None) as rt:
            checking = await rt.spawn(s.Account, "checking")
            await checking.tell(s.Deposit(amount=100))
            await checking.tell(s.Forward(to="savings", amount=30))
            with anyio.fail_after(20):
                while await rt.ref("savings").ask(s.GetBalance(), timeout=20) != 30:
                    await anyio.sleep(0.05)
            assert await checking.ask(s.GetBalance(), timeout=20) == 70
