"""What the supervision tests share: a quick runtime, waiting on a condition, the tree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

import tether
from tests import supervision_actors as a


def runtime(path: str | Path = ":memory:", **kw: Any) -> tether.Runtime:
    """A runtime that notices work quickly; tests run long handlers, so many attempts."""
    opts: dict[str, Any] = {"poll_interval": 0.02, "lease_ttl": 2.0, "max_attempts": 20}
    opts.update(kw)
    return tether.Runtime(path, **opts)


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not check():
            await anyio.sleep(0.01)


def since(mark: int) -> list[tuple[str, str]]:
    """The supervision actors' events after the ``mark``-th."""
    return a.events[mark:]


async def node(rt: tether.Runtime, actor_id: str) -> tether.TreeNode:
    for root in await rt.tree():
        hit = root.find(actor_id)
        if hit is not None:
            return hit
    raise AssertionError(f"{actor_id} not in the tree")


ROOT = Path(__file__).resolve().parents[2]


def run_and_kill(program: str, db: Path, tmp_path: Path) -> dict[str, Any]:
    """Run ``program`` (Python source; argv[1] is ``db``) in a child process until it prints
    a line ``READY <json>``, SIGKILL it, reap it, and return the json. Blocking: a test runs it
    in a worker thread."""
    out, err = tmp_path / "child.out", tmp_path / "child.err"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with out.open("wb") as fout, err.open("wb") as ferr:
        proc = subprocess.Popen(
            [sys.executable, "-c", program, str(db)], cwd=ROOT, stdout=fout, stderr=ferr, env=env
        )
    try:
        deadline = time.monotonic() + 30  # a hang guard, not a measurement
        while not (ready := [x for x in out.read_text().splitlines() if x.startswith("READY ")]):
            assert proc.poll() is None, f"child exited early:\n{err.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no READY:\n{err.read_text()[-4000:]}"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    report: dict[str, Any] = json.loads(ready[0].removeprefix("READY "))
    return report


def forget_events() -> None:
    """Start a test with no events and no scripted crashes or failing starts."""
    a.events.clear()
    a.crashes.clear()
    a.started_once.clear()
    a.fail_starts.clear()
