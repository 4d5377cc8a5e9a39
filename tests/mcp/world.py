"""The test server's side of the world: its processes, and what its SQLite file recorded."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import tether
import tether.mcp

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 30.0


def stdio_server(
    db: Path, name: str | None = None, wait_connected: float = DEADLINE
) -> tether.mcp.StdioServer:
    """The test server over stdio, started by the runtime (named, by default, after its
    command line, which holds ``db``: one name per test). ``wait_connected``: how long a call
    waits for a server that is down (by default generous, as the start is: on a loaded
    machine a Python process importing the SDK may take seconds, and a call must not give
    up on a server that is only slow to start)."""
    return tether.mcp.StdioServer(
        sys.executable,
        ["-m", "tests.mcp.server", "stdio", str(db)],
        cwd=ROOT,
        name=name,
        connect_timeout=DEADLINE,
        wait_connected=wait_connected,
    )


def assert_not_sent(calls: Sequence[tether.TaskCall]) -> None:
    """Each of ``calls`` failed as not carried out: its request never reached the server."""
    assert calls
    for call in calls:
        assert call.error is not None
        assert "McpNotConnected" in call.error
        assert "the request was not sent" in call.error


def calls(db: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """The calls the server recorded (of ``tool``), oldest first."""
    if not db.exists():
        return []
    with closing(sqlite3.connect(db, timeout=30)) as conn, conn:
        conn.row_factory = sqlite3.Row
        try:
            rows = conn.execute("SELECT * FROM calls ORDER BY rowid").fetchall()
        except sqlite3.OperationalError:  # the server has not created its tables yet
            return []
    found = [dict(r) for r in rows]
    return [c for c in found if tool is None or c["tool"] == tool]


def starts(db: Path) -> list[int]:
    """The pids of the server's starts (stdio: the runtime's), oldest first."""
    starts = Path(f"{db}.starts")
    return [int(line) for line in starts.read_text().split()] if starts.exists() else []


def charges(db: Path) -> list[str]:
    """The charges the server did (one per key)."""
    with closing(sqlite3.connect(db, timeout=30)) as conn, conn:
        return [r[0] for r in conn.execute("SELECT receipt FROM charges ORDER BY rowid")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class HttpProcess:
    """The test server over streamable HTTP, in its own process, on a port of its own.
    ``transport`` is ``"http"`` (the 2026 protocol, without sessions) or ``"http-legacy"``
    (a server of the handshake era, with sessions: what most servers speak today)."""

    def __init__(self, db: Path, log: Path, transport: str = "http") -> None:
        self.db, self.log, self.transport = db, log, transport
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server, and wait until it listens."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.mcp.server",
                    self.transport,
                    str(self.db),
                    str(self.port),
                ],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + DEADLINE
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the MCP test server did not start:\n{self.log.read_text()}")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=DEADLINE)

    def restart(self) -> None:
        """Kill the server and start another on the same port (a restart, a deploy)."""
        self.kill()
        self.start()


@contextmanager
def http_server(db: Path, log: Path, transport: str = "http") -> Iterator[HttpProcess]:
    """The test server over streamable HTTP on a free port of 127.0.0.1."""
    server = HttpProcess(db, log, transport)
    try:
        server.start()
        yield server
    finally:
        server.kill()
