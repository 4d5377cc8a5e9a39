"""The test server's side of the world: its processes, and what its SQLite file recorded."""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tether.mcp

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 30.0


def stdio_server(db: Path, name: str | None = None) -> tether.mcp.StdioServer:
    """The test server over stdio, started by the runtime (named, by default, after its
    command line, which holds ``db``: one name per test)."""
    return tether.mcp.StdioServer(
        sys.executable,
        ["-m", "tests.mcp.server", "stdio", str(db)],
        cwd=ROOT,
        name=name,
        # generous on a loaded machine: a start (a Python process importing the SDK) may take
        # seconds, and a call must not give up on a server that is only slow to start
        connect_timeout=DEADLINE,
        wait_connected=DEADLINE,
    )


def calls(db: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """The calls the server recorded (of ``tool``), oldest first."""
    if not db.exists():
        return []
    with sqlite3.connect(db, timeout=30) as conn:
        conn.row_factory = sqlite3.Row
        try:
            rows = conn.execute("SELECT * FROM calls ORDER BY rowid").fetchall()
        except sqlite3.OperationalError:  # the server has not created its tables yet
            return []
    found = [dict(r) for r in rows]
    return [c for c in found if tool is None or c["tool"] == tool]


def charges(db: Path) -> list[str]:
    """The charges the server did (one per key)."""
    with sqlite3.connect(db, timeout=30) as conn:
        return [r[0] for r in conn.execute("SELECT receipt FROM charges ORDER BY rowid")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class HttpProcess:
    """The test server over streamable HTTP, in its own process."""

    def __init__(self, url: str, proc: subprocess.Popen[bytes]) -> None:
        self.url = url
        self.proc = proc

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=DEADLINE)


@contextmanager
def http_server(db: Path, log: Path) -> Iterator[HttpProcess]:
    """The test server over streamable HTTP on a free port of 127.0.0.1."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp.server", "http", str(db), str(port)],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + DEADLINE
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the MCP test server did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield HttpProcess(f"http://127.0.0.1:{port}/mcp", proc)
    finally:
        proc.kill()
        proc.wait(timeout=DEADLINE)
