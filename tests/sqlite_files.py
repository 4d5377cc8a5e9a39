"""Reading a store file directly, behind tether's back, for 'was it modified?' checks."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def dump(path: Path) -> list[str]:
    """The logical content of an SQLite file."""
    con = sqlite3.connect(path)
    try:
        return list(con.iterdump())
    finally:
        con.close()


def dump_but_audit(path: Path) -> list[str]:
    """``dump`` without the audit log's rows: what a refused attempt must leave unchanged
    (it writes its own audit row, and nothing else)."""
    return [
        line
        for line in dump(path)
        if not line.startswith('INSERT INTO "audit"') and "'audit'" not in line
    ]


def audit_rows(path: Path) -> list[dict[str, object]]:
    """The audit log's rows, oldest first, as dicts."""
    con = sqlite3.connect(path)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM audit ORDER BY seq")]
    finally:
        con.close()
