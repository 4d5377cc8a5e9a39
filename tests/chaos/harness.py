"""Start, signal and reap the child programs of ``tests.chaos.programs``.

Every child writes stdout and stderr to files (never pipes: a full pipe would block it), every
wait has a timeout, and ``Children.close`` kills whatever is still alive, so nothing hangs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class Child:
    """One child program, its output in ``<dir>/<name>.out`` and ``<dir>/<name>.err``:
    ``python -m MODULE SCENARIO ARGS...`` (``tests.chaos.programs`` unless said)."""

    def __init__(
        self,
        directory: Path,
        name: str,
        scenario: str,
        *args: object,
        module: str = "tests.chaos.programs",
    ) -> None:
        self.name = name
        self.out = directory / f"{name}.out"
        self.err = directory / f"{name}.err"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, scenario, *map(str, args)],
                cwd=ROOT,
                stdout=out,
                stderr=err,
                env=env,
            )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def value(self, key: str) -> str | None:
        """The value of the last ``key=value`` line this child reported, if any."""
        prefix = f"{key}="
        found = [line[len(prefix) :] for line in self.lines() if line.startswith(prefix)]
        return found[-1] if found else None

    def reported(self, key: str) -> Any:
        """The JSON value of the last ``key=<json>`` line; fails, showing the output, if none."""
        value = self.value(key)
        if value is None:
            raise AssertionError(f"{self.name} reported no {key}= line\n{self.describe()}")
        return json.loads(value)

    def has(self, line: str) -> bool:
        """Whether the child reported ``line``, alone or as ``line ...`` or ``line=...``."""
        return any(x == line or x.startswith((line + " ", line + "=")) for x in self.lines())

    def logs(self) -> list[dict[str, Any]]:
        """tether's structlog events (JSON lines on stderr); other lines are skipped."""
        out = []
        for line in self.err.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append(event)
        return out

    def describe(self) -> str:
        err = self.err.read_text()
        return (
            f"--- {self.name} (pid {self.pid}, returncode {self.proc.returncode})\n"
            f"stdout:\n{self.out.read_text()}\nstderr (tail):\n{err[-4000:]}"
        )

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``predicate`` until it holds; fail with this child's output after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {what}\n{self.describe()}"
                )
            if not self.alive() and not predicate():
                raise AssertionError(f"child exited while waiting for {what}\n{self.describe()}")
            time.sleep(0.01)

    def wait_report(self, line: str, timeout: float) -> None:
        """Wait until the child reports ``line`` on stdout (see ``has``)."""
        self.wait_for(lambda: self.has(line), timeout, f"{self.name} to report {line!r}")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"child did not exit within {timeout}s\n{self.describe()}"
            ) from None

    def signal(self, sig: signal.Signals) -> bool:
        """Send ``sig``; False if the child had already exited."""
        if not self.alive():
            return False
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> bool:
        """SIGKILL the child and reap it; True if it was still running."""
        was_alive = self.signal(signal.SIGKILL)
        self.wait(10)
        return was_alive

    def reap(self) -> None:
        """Make sure the child is gone (a stopped child is continued first, then killed)."""
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


class Children:
    """Every child a test started; ``close`` reaps them all (use in ``finally``)."""

    def __init__(self, directory: Path, module: str = "tests.chaos.programs") -> None:
        self.directory = directory
        self.module = module  # the program module every child runs
        self.started: list[Child] = []
        self._names: dict[str, int] = {}

    def start(self, name: str, scenario: str, *args: object) -> Child:
        n = self._names[name] = self._names.get(name, 0) + 1
        child = Child(self.directory, f"{name}-{n}", scenario, *args, module=self.module)
        self.started.append(child)
        return child

    def __iter__(self) -> Iterator[Child]:
        return iter(self.started)

    def describe(self) -> str:
        return "\n".join(c.describe() for c in self.started)

    def close(self) -> None:
        for child in self.started:
            child.reap()


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)
