"""``PaymentsService``: the service started in a child process for a test, and stopped."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from tether.testing.payments.cli import LISTENING_PREFIX, delay_problem
from tether.testing.payments.client import json_request


def _serve_argv(
    db_path: Path, *, honor_keys: bool, delay: float, port: int, host: str
) -> list[str]:
    argv = [sys.executable, "-m", "tether.testing.payments", "serve", "--db", str(db_path)]
    argv += ["--port", str(port), "--delay", repr(delay), "--host", host]
    if not honor_keys:
        argv.append("--ignore-keys")
    return argv


class PaymentsService:
    """The fake payments service running in a child process.

    ``PaymentsService.start(db_path)`` returns once the child is listening; ``stop()`` (or
    leaving the ``with`` block) terminates it. The SQLite file stays behind for
    :func:`refunds` and :func:`refund_count`.
    """

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        url: str,
        db_path: Path,
        logs: tempfile.TemporaryDirectory[str],
    ) -> None:
        self.proc = proc
        self.url = url
        self.db_path = db_path
        self._logs = logs

    @classmethod
    def start(
        cls,
        db_path: str | Path,
        *,
        honor_keys: bool = True,
        delay: float = 0.0,
        port: int = 0,
        host: str = "127.0.0.1",
        startup_timeout: float = 15.0,
    ) -> PaymentsService:
        """Spawn ``python -m tether.testing.payments serve`` and wait for its listening line.

        Raises ``RuntimeError`` with the child's stderr if it exits or stays silent for
        ``startup_timeout`` seconds; ``ValueError`` for a negative, NaN or infinite ``delay``.
        """
        problem = delay_problem(delay)
        if problem is not None:  # before spawning: the child would refuse it with exit 2
            raise ValueError(problem)
        db = Path(db_path)
        logs = tempfile.TemporaryDirectory(prefix="tether-payments-")
        out_path = Path(logs.name) / "stdout"
        err_path = Path(logs.name) / "stderr"
        argv = _serve_argv(db, honor_keys=honor_keys, delay=delay, port=port, host=host)
        # stdout and stderr go to files, never pipes: a full pipe would block the child
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + startup_timeout
        while True:
            line = out_path.read_text(errors="replace").partition("\n")
            if line[1] and line[0].startswith(LISTENING_PREFIX):
                return cls(proc, line[0][len(LISTENING_PREFIX) :].strip(), db, logs)
            exited = proc.poll()
            if exited is not None or time.monotonic() > deadline or line[1]:
                if exited is None:
                    proc.kill()
                    proc.wait()
                if exited is not None:
                    why = f"exited with code {exited} before printing its listening line"
                elif line[1]:
                    why = f"printed {line[0]!r} instead of its listening line"
                else:
                    why = f"did not print its listening line within {startup_timeout} s"
                stderr = err_path.read_text(errors="replace").strip()
                logs.cleanup()
                raise RuntimeError(
                    f"fake payments service ({' '.join(argv)}) {why}; stderr: {stderr or '(empty)'}"
                )
            time.sleep(0.01)

    @property
    def stderr(self) -> str:
        """What the child wrote to stderr so far."""
        path = Path(self._logs.name) / "stderr"
        return path.read_text(errors="replace") if path.exists() else ""

    def set_faults(
        self,
        *,
        fail_calls: Sequence[int] = (),
        status: int = 503,
        delay_calls: dict[int, float] | None = None,
        delay_before_calls: dict[int, float] | None = None,
        hang_calls: Sequence[int] = (),
        hang_before_calls: Sequence[int] = (),
    ) -> None:
        """Replace the service's fault plan (see the module docstring)."""
        body = {
            "fail_calls": list(fail_calls),
            "status": status,
            "delay_calls": {str(k): v for k, v in (delay_calls or {}).items()},
            "delay_before_calls": {str(k): v for k, v in (delay_before_calls or {}).items()},
            "hang_calls": list(hang_calls),
            "hang_before_calls": list(hang_before_calls),
        }
        json_request("POST", f"{self.url}/faults", body, timeout=5.0)

    def calls(self) -> int:
        """How many ``POST /refunds`` the running service has received."""
        return int(json_request("GET", f"{self.url}/calls", timeout=5.0)["calls"])

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the child (SIGTERM, then SIGKILL after ``timeout``); idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._logs.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
