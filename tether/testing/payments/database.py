"""The service's SQLite file: its tables, a refund as a dict, and the readers that count
refunds from the file directly, whether or not the service is still running (or was killed)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS refunds (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    refund_id TEXT NOT NULL UNIQUE,
    order_id TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    idempotency_key TEXT,
    call INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_order ON refunds (order_id);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    idempotency_key TEXT PRIMARY KEY,
    refund_id TEXT NOT NULL REFERENCES refunds (refund_id)
);
"""

REFUND_COLUMNS = "refund_id, order_id, amount_cents, idempotency_key, call, created_at"


def open_db(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.executescript(SCHEMA)
    return conn


def row_to_refund(row: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(REFUND_COLUMNS.split(", "), row, strict=True))


@contextlib.contextmanager
def _reader(db_path: str | Path) -> Iterator[sqlite3.Connection]:
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"no payments database at {path}")
    conn = sqlite3.connect(path)
    try:
        yield conn
    finally:
        conn.close()


def refunds(db_path: str | Path) -> list[dict[str, Any]]:
    """Every refund recorded in the service's SQLite file, oldest first.

    Each is ``{refund_id, order_id, amount_cents, idempotency_key, call, created_at}``. Works
    whether or not the service is still running (or was killed).
    """
    with _reader(db_path) as conn:
        rows = conn.execute(f"SELECT {REFUND_COLUMNS} FROM refunds ORDER BY seq").fetchall()
    return [row_to_refund(r) for r in rows]


def refund_count(db_path: str | Path, order_id: str | None = None) -> int:
    """How many refunds the service's SQLite file holds for ``order_id`` (for all orders if
    ``None``)."""
    with _reader(db_path) as conn:
        if order_id is None:
            row = conn.execute("SELECT COUNT(*) FROM refunds").fetchone()
        else:
            row = conn.execute(
                "SELECT COUNT(*) FROM refunds WHERE order_id = ?", (order_id,)
            ).fetchone()
    return int(row[0])
