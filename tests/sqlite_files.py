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
