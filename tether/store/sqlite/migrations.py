"""Explicit upgrades of an SQLite store's schema: ``tether migrate``, or ``SqliteStore.migrate``.

Opening a store never migrates it (``SchemaVersionError`` names this instead): a person runs
the upgrade, with every runtime on the store stopped. Each upgrade runs in one transaction,
all or nothing, so a crash or an error leaves the store at its old version, untouched.

Upgrades:

* 2 → 3: the effects ledger is keyed by message, ``(msg_id, idx)``, instead of by
  ``(actor_id, msg_id, idx)``, and indexed by actor and time. Keyed by actor, each commit
  rewrote one page per session in it. The key column loses its index: it is a hash of the
  row's own fields, and a quarantined effect is found among the quarantined rows. No row
  changes.
* 3 → 4: each actor's ``head_seq``, the seq of its last committed journal event, written
  with every step from now on; recovery checks that it folded every event up to it. An
  existing store's heads are filled from its journals (``MAX(seq)``, 0 for an actor with
  none): the journal as it stands is taken as complete (``tether check`` looks for gaps).
* 4 → 5: the audit log (``audit``): every attempted decision on an approval and every
  resolution of a quarantined effect or a dead letter, allowed or refused. Existing stores
  start with an empty log.
* 5 → 6: the mailbox's ``traceparent``: the W3C trace context each message was sent in, so
  that a task's steps are one trace across restarts and processes. Messages already stored
  have none (NULL): each of their steps starts a trace of its own, as before.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from tether.errors import SchemaVersionError, StoreError
from tether.store.hosts import hostname_of, runtime_gone
from tether.store.sqlite.audit import AUDIT_TABLE
from tether.store.sqlite.rows import EFFECT_COLUMNS
from tether.store.sqlite.schema import EFFECTS_INDEXES, EFFECTS_TABLE, SCHEMA_VERSION


def _v2_to_v3(conn: sqlite3.Connection) -> None:
    conn.execute(EFFECTS_TABLE.format(name="effects_v3"))
    try:
        conn.execute(
            f"INSERT INTO effects_v3 ({EFFECT_COLUMNS}) SELECT {EFFECT_COLUMNS} FROM effects"
        )
    except sqlite3.IntegrityError as exc:  # two actors' effects under one message id
        raise StoreError(
            f"the effects ledger cannot be keyed by message: {exc}; no change was made"
        ) from exc
    conn.execute("DROP TABLE effects")  # and its indexes
    conn.execute("ALTER TABLE effects_v3 RENAME TO effects")
    for statement in filter(str.strip, EFFECTS_INDEXES.split(";")):
        conn.execute(statement)


def _v3_to_v4(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE actors ADD COLUMN head_seq INTEGER NOT NULL DEFAULT 0")
    conn.execute(
        "UPDATE actors SET head_seq = (SELECT MAX(seq) FROM journal "
        "WHERE journal.actor_id = actors.actor_id) "
        "WHERE EXISTS (SELECT 1 FROM journal WHERE journal.actor_id = actors.actor_id)"
    )


def _v4_to_v5(conn: sqlite3.Connection) -> None:
    for statement in filter(str.strip, AUDIT_TABLE.split(";")):
        conn.execute(statement)


def _v5_to_v6(conn: sqlite3.Connection) -> None:
    # Appended as the last column, where a new store's CREATE TABLE puts it too: both have the
    # same table (``SELECT *`` and ``PRAGMA table_info`` agree), whichever way they came.
    conn.execute("ALTER TABLE mailbox ADD COLUMN traceparent TEXT")


#: version -> the upgrade from it to the next version.
_UPGRADES: dict[int, Callable[[sqlite3.Connection], None]] = {
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
    5: _v5_to_v6,
}


def can_migrate(version: str | None) -> bool:
    """Whether a store at ``version`` (as ``meta`` holds it) can be upgraded to this tether's."""
    if version is None or not version.isdigit():
        return False
    v = int(version)
    while v in _UPGRADES:
        v += 1
    return v == SCHEMA_VERSION and int(version) < SCHEMA_VERSION


def migrate(path: str | os.PathLike[str], *, force: bool = False) -> tuple[int, int]:
    """Upgrade the store at ``path`` to this tether's schema version, in one transaction;
    returns (version before, version after), equal if there was nothing to do.

    Refused (``StoreError``) while the store lists a runtime that may be alive: one on another
    host, or a live process on this one. ``force`` skips that check, for runtimes that are
    known to be gone. Refused (``SchemaVersionError``) for a version with no upgrade path.
    """
    if not Path(path).is_file():
        raise StoreError(f"no store at {str(path)!r}")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA cell_size_check = ON")  # a damaged page fails, not misleads
        conn.execute("BEGIN IMMEDIATE")
        try:
            before = _version(conn, path)
            if before == SCHEMA_VERSION:
                conn.execute("ROLLBACK")
                return before, before
            if not can_migrate(str(before)):
                raise SchemaVersionError(
                    f"store {str(path)!r} has schema version {before}; this tether reads "
                    f"version {SCHEMA_VERSION} and has no upgrade from {before}"
                )
            if not force:
                _refuse_if_in_use(conn, path)
            version = before
            while version < SCHEMA_VERSION:
                _UPGRADES[version](conn)
                version += 1
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise StoreError(f"store {str(path)!r} not migrated: {exc}") from exc
    finally:
        conn.close()
    return before, version


def _version(conn: sqlite3.Connection, path: str | os.PathLike[str]) -> int:
    try:
        rows = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    except sqlite3.OperationalError as exc:  # no meta table
        raise SchemaVersionError(f"{str(path)!r} is not a tether store ({exc})") from exc
    found = rows[0][0] if rows else None
    if found is None or not str(found).isdigit():
        raise SchemaVersionError(f"store {str(path)!r} has no readable schema version: {found!r}")
    return int(found)


def _refuse_if_in_use(conn: sqlite3.Connection, path: str | os.PathLike[str]) -> None:
    """A runtime that was killed leaves its row until another runtime reaps it: a row of a
    dead process of this very host (``tether.store.hosts``) is not in the way; any other row
    may be a live runtime."""
    alive = [
        f"{runtime_id} (pid {pid} on {hostname_of(host)})"
        for runtime_id, host, pid, started in conn.execute(
            "SELECT runtime_id, host, pid, started_at FROM runtimes"
        )
        if not runtime_gone(host, pid, started)
    ]
    if alive:
        raise StoreError(
            f"store {str(path)!r} may be in use by runtime(s) {', '.join(alive)}: stop them "
            "first (or pass --force / force=True if they are gone); no change was made"
        )
