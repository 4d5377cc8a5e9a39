"""Stores as schema versions 2, 3 and 5 laid them out, for the tests of ``tether migrate``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

# The effects ledger as schema version 2 laid it out: keyed by actor, its key unique.
_V2_EFFECTS = """
CREATE TABLE effects (
    actor_id    TEXT NOT NULL,
    msg_id      TEXT NOT NULL,
    idx         INTEGER NOT NULL,
    key         TEXT NOT NULL UNIQUE,
    tool        TEXT NOT NULL,
    input_hash  TEXT NOT NULL,
    args        BLOB NOT NULL,
    status      TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    result      BLOB,
    error       TEXT,
    reason      TEXT,
    history     BLOB,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    PRIMARY KEY (actor_id, msg_id, idx)
) WITHOUT ROWID
"""


def as_schema_v2(db: Path) -> None:
    """Rewrite the store at ``db`` as a version-2 store holding the same rows."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("BEGIN")
        con.execute("ALTER TABLE effects RENAME TO effects_v3")
        con.execute(_V2_EFFECTS)
        con.execute("INSERT INTO effects SELECT * FROM effects_v3")
        con.execute("DROP TABLE effects_v3")
        con.execute("CREATE INDEX effects_by_status ON effects(status, updated_at)")
        con.execute("ALTER TABLE actors DROP COLUMN head_seq")  # schema version 4 added it
        con.execute("DROP TABLE audit")  # schema version 5 added it
        con.execute("ALTER TABLE mailbox DROP COLUMN traceparent")  # version 6 added it
        con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
        con.execute("COMMIT")
    finally:
        con.close()


def as_schema_v3(db: Path) -> None:
    """Rewrite the store at ``db`` as a version-3 store holding the same rows: no actors'
    ``head_seq`` (version 4), no audit log (version 5), no messages' trace context (version 6)."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("BEGIN")
        con.execute("ALTER TABLE actors DROP COLUMN head_seq")
        con.execute("DROP TABLE audit")
        con.execute("ALTER TABLE mailbox DROP COLUMN traceparent")
        con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
        con.execute("COMMIT")
    finally:
        con.close()


def as_schema_v5(db: Path) -> None:
    """Rewrite the store at ``db`` as a version-5 store holding the same rows (the mailbox
    without the trace context of each message, which version 6 added)."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("BEGIN")
        con.execute("ALTER TABLE mailbox DROP COLUMN traceparent")
        con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
        con.execute("COMMIT")
    finally:
        con.close()
