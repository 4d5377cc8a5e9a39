"""The PostgreSQL store's schema: numbered migrations, a version table, the check on every open.

A store's schema is the list of ``MIGRATIONS`` applied in order, each recorded in
``tether_schema`` (one row per version) in the transaction that applied it. ``migrate``
applies the missing ones under ``pg_advisory_xact_lock`` (two ``tether migrate`` runs, or a
migrate and a runtime creating a new store, never interleave), all in one transaction. Opening
a store never migrates it: a store of another version raises ``SchemaVersionError`` (an older
one with the command that upgrades it). A new, empty schema is created on open when the store
may be created (``create``): that is migration 1 onwards, under the same lock.

What the tables hold is what the SQLite store's tables hold (``tether.store.sqlite.schema``,
version 5, and its audit log), with PostgreSQL's types, plus:

* ``mailbox.xid``: the id of the transaction that made the message ready (inserted it, or
  made it ready again): the message scan's cursor is a transaction snapshot, not a sequence
  (``cursor.py``). ``xid8`` never wraps around.
* ``actors.head_seq``: the actor's last committed journal sequence, set by every step that
  journals (the integrity check reads it); ``mailbox.traceparent``: the W3C trace context a
  message carries (NULL until the runtime sends one).
* ``batches``: one row per applied batch, keyed by the writer's batch id, with its result: a
  commit whose outcome the writer never heard (its connection dropped) is looked up by that
  id instead of being applied twice (``writer.py``).
"""

from __future__ import annotations

import zlib
from typing import Any

import psycopg

from tether.errors import SchemaVersionError, StoreError, StoreOpenError

VERSION_TABLE = "tether_schema"

_V1 = """
CREATE TABLE actors (
    actor_id      TEXT PRIMARY KEY,
    class_path    TEXT NOT NULL,
    init          BYTEA NOT NULL,
    parent_id     TEXT,
    status        TEXT NOT NULL DEFAULT 'active',
    stop_reason   TEXT,
    fence         BIGINT NOT NULL DEFAULT 0,
    lease_owner   TEXT,
    lease_expires DOUBLE PRECISION NOT NULL DEFAULT 0,
    created_at    DOUBLE PRECISION NOT NULL,
    head_seq      BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX actors_by_parent ON actors (parent_id);
CREATE INDEX actors_by_owner ON actors (lease_owner);
CREATE SEQUENCE mailbox_seq;
CREATE TABLE mailbox (
    msg_id      TEXT PRIMARY KEY,
    seq         BIGINT NOT NULL DEFAULT nextval('mailbox_seq'),
    xid         XID8 NOT NULL DEFAULT pg_current_xact_id(),
    actor_id    TEXT NOT NULL,
    type        TEXT NOT NULL,
    payload     BYTEA NOT NULL,
    deliver_at  DOUBLE PRECISION NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    errors      BYTEA,
    wants_reply BOOLEAN NOT NULL DEFAULT FALSE,
    created_at  DOUBLE PRECISION NOT NULL,
    parks       INTEGER NOT NULL DEFAULT 0,
    traceparent TEXT
);
ALTER SEQUENCE mailbox_seq OWNED BY mailbox.seq;
CREATE INDEX mailbox_by_actor ON mailbox (actor_id, seq);
CREATE INDEX mailbox_by_xid ON mailbox (xid, seq);
CREATE INDEX mailbox_by_due ON mailbox (deliver_at);
CREATE TABLE dedup (
    actor_id   TEXT NOT NULL,
    dedup_key  TEXT NOT NULL,
    msg_id     TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (actor_id, dedup_key)
);
CREATE INDEX dedup_by_age ON dedup (created_at);
CREATE TABLE journal (
    actor_id TEXT NOT NULL,
    seq      BIGINT NOT NULL,
    payload  BYTEA NOT NULL,
    PRIMARY KEY (actor_id, seq)
);
CREATE TABLE snapshots (
    actor_id TEXT PRIMARY KEY,
    seq      BIGINT NOT NULL,
    state    BYTEA NOT NULL
);
CREATE TABLE replies (
    msg_id     TEXT PRIMARY KEY,
    actor_id   TEXT NOT NULL,
    ok         BOOLEAN NOT NULL,
    payload    BYTEA NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX replies_by_age ON replies (created_at);
CREATE TABLE dead_letters (
    msg_id     TEXT PRIMARY KEY,
    actor_id   TEXT NOT NULL,
    type       TEXT NOT NULL,
    payload    BYTEA NOT NULL,
    attempts   INTEGER NOT NULL,
    errors     BYTEA,
    reason     TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX dead_letters_by_actor ON dead_letters (actor_id, created_at);
CREATE TABLE watches (
    watched TEXT NOT NULL,
    watcher TEXT NOT NULL,
    PRIMARY KEY (watched, watcher)
);
CREATE INDEX watches_by_watcher ON watches (watcher);
CREATE TABLE effects (
    actor_id    TEXT NOT NULL,
    msg_id      TEXT NOT NULL,
    idx         INTEGER NOT NULL,
    key         TEXT NOT NULL,
    tool        TEXT NOT NULL,
    input_hash  TEXT NOT NULL,
    args        BYTEA NOT NULL,
    status      TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    result      BYTEA,
    error       TEXT,
    reason      TEXT,
    history     BYTEA,
    created_at  DOUBLE PRECISION NOT NULL,
    updated_at  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (msg_id, idx)
);
CREATE INDEX effects_by_actor ON effects (actor_id, created_at);
CREATE INDEX effects_by_status ON effects (status, updated_at);
CREATE INDEX effects_by_key ON effects (key);
CREATE TABLE approvals (
    request_id TEXT PRIMARY KEY,
    actor_id   TEXT NOT NULL,
    status     TEXT NOT NULL,
    version    INTEGER NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    record     BYTEA NOT NULL
);
CREATE INDEX approvals_by_status ON approvals (status, created_at);
CREATE INDEX approvals_by_actor ON approvals (actor_id);
CREATE TABLE runtimes (
    runtime_id TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        BIGINT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE audit (
    seq            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             DOUBLE PRECISION NOT NULL,
    identity       TEXT NOT NULL,
    authenticated  BOOLEAN NOT NULL,
    via            TEXT NOT NULL,
    action         TEXT NOT NULL,
    target         TEXT NOT NULL,
    outcome        TEXT NOT NULL,
    detail         TEXT NOT NULL,
    actor_id       TEXT,
    version_before INTEGER,
    version_after  INTEGER,
    fingerprint    TEXT,
    remote         TEXT
);
CREATE INDEX audit_by_target ON audit (target, seq);
CREATE INDEX audit_by_actor ON audit (actor_id, seq);
CREATE TABLE batches (
    batch_id   UUID PRIMARY KEY,
    result     BYTEA,
    created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX batches_by_age ON batches (created_at);
"""

#: The numbered migrations: version -> (what it does, its statements). Version n is reached by
#: applying 1..n in order; a store records each one it applied in ``tether_schema``.
MIGRATIONS: dict[int, tuple[str, str]] = {
    1: ("the tables of tether's store (the SQLite store's version 5, and head_seq, traceparent, "
        "batches)", _V1),
}  # fmt: skip
SCHEMA_VERSION = max(MIGRATIONS)

#: Every table a store of this version has, checked on open.
TABLES = frozenset(
    line.split()[2] for line in _V1.splitlines() if line.startswith("CREATE TABLE")
) | {VERSION_TABLE}


def lock_key(schema: str) -> int:
    """The advisory lock of one store's schema (a 64-bit key from its name): migrations of
    stores in other schemas of the database do not wait for each other."""
    return zlib.crc32(f"tether.schema:{schema}".encode()) - (1 << 31)


def current_version(cur: psycopg.Cursor[tuple[Any, ...]]) -> int | None:
    """The store's schema version; None when the schema holds no version table (an empty
    schema, or not a tether store)."""
    cur.execute("SELECT to_regclass(%s) IS NOT NULL", (VERSION_TABLE,))
    row = cur.fetchone()
    if row is None or not row[0]:
        return None
    cur.execute(f"SELECT max(version) FROM {VERSION_TABLE}")
    found = cur.fetchone()
    return int(found[0]) if found is not None and found[0] is not None else 0


def ensure_schema(
    conn: psycopg.Connection[tuple[Any, ...]], where: str, schema: str, *, create: bool
) -> None:
    """Create the schema of a new store (if ``create``), or check an existing one's version
    and tables; in one transaction, under the schema's advisory lock."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema),))
        version = current_version(cur)
        if version is None:
            cur.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
            )
            row = cur.fetchone()
            if row is not None and row[0]:
                raise SchemaVersionError(
                    f"{where} holds tables but no {VERSION_TABLE} table: it is not a tether store"
                )
            if not create:
                raise StoreOpenError(f"{where} holds no tether store (run `tether migrate`)")
            _apply(cur, 0)
            return
        if version != SCHEMA_VERSION:
            hint = (
                ": stop every runtime on it and run `tether migrate` with this store's URL"
                if version < SCHEMA_VERSION
                else ": it was written by a newer tether"
            )
            raise SchemaVersionError(
                f"store {where} has schema version {version}; this tether reads version "
                f"{SCHEMA_VERSION} and never migrates silently{hint}"
            )
        cur.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()",
        )
        missing = sorted(TABLES - {str(r[0]) for r in cur.fetchall()})
        if missing:
            raise SchemaVersionError(
                f"store {where} has schema version {version} but lacks the table(s) "
                f"{', '.join(missing)}: it is damaged"
            )


def _apply(cur: psycopg.Cursor[tuple[Any, ...]], version: int) -> int:
    """Apply every migration after ``version``, recording each; the version reached."""
    if version == 0:
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version INTEGER PRIMARY KEY, "
            "name TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"
        )
    while version < SCHEMA_VERSION:
        version += 1
        name, statements = MIGRATIONS[version]
        cur.execute(statements.encode())
        cur.execute(f"INSERT INTO {VERSION_TABLE} (version, name) VALUES (%s, %s)", (version, name))
    return version


def migrate(
    conn: psycopg.Connection[tuple[Any, ...]],
    where: str,
    schema: str,
    in_use: list[str],
) -> tuple[int, int]:
    """Bring the store to this tether's version, all in one transaction under the schema's
    advisory lock; (version before, version after). ``in_use``: runtimes that may be alive
    (refused unless empty; the caller computed it, or passed [] with ``force``)."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema),))
        before = current_version(cur)
        if before is None:
            cur.execute("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()")
            row = cur.fetchone()
            if row is not None and row[0]:
                raise SchemaVersionError(
                    f"{where} holds tables but no {VERSION_TABLE} table: it is not a tether store"
                )
            return 0, _apply(cur, 0)
        if before > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"store {where} has schema version {before}; this tether reads version "
                f"{SCHEMA_VERSION} and has no upgrade from a newer one"
            )
        if before == SCHEMA_VERSION:
            return before, before
        if in_use:
            raise StoreError(
                f"store {where} may be in use by runtime(s) {', '.join(in_use)}: stop them "
                "first (or pass --force / force=True if they are gone); no change was made"
            )
        return before, _apply(cur, before)
