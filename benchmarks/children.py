"""Benchmark scenarios that run in a child process, driven one round at a time over a pipe.

Why a child: a peer that is a process-wide singleton (DBOS), a peer whose imports would fill
the parent's heap (LangGraph: every object the parent holds is walked by CPython's cyclic
collector, in tether's timed runs too), or a point of the scaling curve whose heap must hold
only its own sessions. The parent keeps the house method (``run.Bench``: warm-up, interleaved
rounds, medians): each round, a scenario's function sends its child one command and reads back
one sample.

The protocol: the child writes one line ``@@<json>`` on its stdout when it is ready and one per
command (``{"sample": {figure: [count, seconds]}, ...}`` or ``{"error": "..."}``); anything else
it prints goes to stderr, which the parent keeps in a file and quotes when the child fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from typing import IO, Any

Reply = dict[str, Any]


class ChildFailed(RuntimeError):
    """The child exited, answered with an error, or did not answer in time."""


class PipeChild:
    """A child process running ``argv`` (a Python script that calls ``serve`` or
    ``serve_async``), started at once and ready when the constructor returns; with
    ``wait=False``, when ``wait_ready`` returns (children started together set up together)."""

    def __init__(
        self, name: str, argv: Sequence[str], *, ready_timeout: float = 120.0, wait: bool = True
    ) -> None:
        self.name = name
        self.ready_timeout = ready_timeout
        self.ready: Reply = {}
        self.log: IO[str] = tempfile.TemporaryFile("w+")  # noqa: SIM115 -- closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        if wait:
            self.wait_ready()

    def wait_ready(self) -> Reply:
        """The child's answer to its setup (``ready``); the child is closed if it failed."""
        try:
            self.ready = self._read(self.ready_timeout)
        except BaseException:
            self.close()
            raise
        return self.ready

    def _read(self, timeout: float) -> Reply:
        """The child's next ``@@`` line. The timeout is checked between lines only: a child
        that hangs without printing is caught by the caller's own timeout (``timeout 600`` in
        CI), and every command here answers with one line."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait()
                raise ChildFailed(
                    f"{self.name} exited ({self.proc.returncode}): {self.stderr_tail()}"
                )
            if line.startswith("@@"):
                reply: Reply = json.loads(line[2:])
                if "error" in reply:
                    raise ChildFailed(f"{self.name}: {reply['error']}")
                return reply
        raise ChildFailed(f"{self.name} did not answer in {timeout:.0f} s")

    def request(self, command: Reply, timeout: float = 900.0) -> Reply:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._read(timeout)

    def sample(self, command: Reply, timeout: float = 900.0) -> dict[str, tuple[int, float]]:
        """One round: the child's ``sample`` as ``run.Sample``."""
        got = self.request(command, timeout)["sample"]
        return {k: (int(n), float(s)) for k, (n, s) in got.items()}

    def stderr_tail(self, lines: int = 3) -> str:
        self.log.seek(0)
        kept = [ln for ln in self.log.read().splitlines() if ln.strip()]
        return " | ".join(kept[-lines:])[-600:]

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


def _answer(out: IO[str], reply: Reply) -> None:
    print("@@" + json.dumps(reply), file=out, flush=True)


def _failure(exc: BaseException) -> Reply:
    traceback.print_exc()
    return {"error": f"{type(exc).__name__}: {exc}"}


def serve(ready: Callable[[], Reply], handle: Callable[[Reply], Reply]) -> None:
    """The child's side: ``ready()`` (its setup), then ``handle`` for every command until
    ``quit`` or end of input. Only the protocol's lines go to the real stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr
    try:
        _answer(out, ready())
    except Exception as exc:
        _answer(out, _failure(exc))
        return
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("quit"):
            break
        try:
            reply = handle(command)
        except Exception as exc:
            reply = _failure(exc)
        _answer(out, reply)


async def serve_async(
    ready: Callable[[], Awaitable[Reply]], handle: Callable[[Reply], Awaitable[Reply]]
) -> None:
    """``serve`` for a child whose state lives on one event loop across rounds (a runtime that
    stays open): stdin is read on a thread, so the loop keeps running between commands."""
    out = sys.stdout
    sys.stdout = sys.stderr
    loop = asyncio.get_running_loop()
    try:
        _answer(out, await ready())
    except Exception as exc:
        _answer(out, _failure(exc))
        return
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        command = json.loads(line)
        if command.get("quit"):
            break
        try:
            reply = await handle(command)
        except Exception as exc:
            reply = _failure(exc)
        _answer(out, reply)
