"""``tether migrate`` is all or nothing: SIGKILLed while it copies the effects ledger, it
leaves the store at schema version 2 with every row as it was, and the next run upgrades it.

The store holds enough ledger rows that the copy outgrows SQLite's page cache and spills into
the WAL: the test kills the real CLI process once the WAL has grown past a chosen size, i.e.
in the middle of the transaction, at an early and at a late point of the copy."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

import tether
from tests.schema_v2 import as_schema_v2
from tether.store.sqlite.schema import SCHEMA_VERSION

pytestmark = pytest.mark.slow  # crash tests: real child processes, real signals

ROWS = 150_000


def _v2_store(db: Path) -> None:
    anyio.run(_create, db, backend="asyncio")
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("BEGIN")
    con.executemany(
        "INSERT INTO effects VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (_row(i) for i in range(ROWS)),
    )
    con.execute("COMMIT")
    con.close()
    as_schema_v2(db)


def _row(i: int) -> tuple[object, ...]:
    """A done refund's ledger row; 500 sessions, 3 effects per message."""
    return (
        *(f"session-{i % 500:04d}", f"run-{i // 3}", i % 3, f"key-{i:08d}", "refund"),
        *(f"hash-{i}", b"\x81\xa5order\xa5o-123" * 8, "done", 1, b"\xa2ok", None, None),
        *(b"\x90", float(i), float(i)),
    )


async def _create(db: Path) -> None:
    async with tether.Runtime(db, serve=False):
        pass


def _fingerprint(db: Path) -> tuple[str, int, str]:
    """The schema version, the number of ledger rows and a hash of all of them."""
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        (version,) = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        digest = hashlib.sha256()
        n = 0
        for row in con.execute("SELECT * FROM effects ORDER BY msg_id, idx"):
            digest.update(repr(row).encode())
            n += 1
        return version, n, digest.hexdigest()
    finally:
        con.close()


def _migrate(db: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether", "--db", str(db), "migrate"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("wal_bytes", [1 << 20, 8 << 20], ids=["early", "late"])
def test_a_migration_killed_mid_copy_leaves_version_2_untouched_and_the_rerun_upgrades(
    tmp_path: Path, wal_bytes: int
) -> None:
    db = tmp_path / "agents.db"
    _v2_store(db)
    before = _fingerprint(db)
    assert before[:2] == ("2", ROWS)

    wal = Path(f"{db}-wal")
    proc = _migrate(db)
    deadline = time.monotonic() + 60
    while not (wal.exists() and wal.stat().st_size >= wal_bytes):
        assert proc.poll() is None, "the migration finished before the kill point"
        assert time.monotonic() < deadline, "the WAL never reached the kill point"
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)  # reaped, its pipes closed
    assert proc.returncode == -signal.SIGKILL

    assert _fingerprint(db) == before  # SQLite rolled the half-done copy back

    proc = _migrate(db)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (0, b""), err
    assert f"upgraded from schema version 2 to {SCHEMA_VERSION}".encode() in out
    version, n, digest = _fingerprint(db)
    assert (version, n, digest) == (str(SCHEMA_VERSION), ROWS, before[2])
