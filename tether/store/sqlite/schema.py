"""The SQLite store's schema: its tables, its version, and the check made on every open.

The schema carries a version in ``meta``; a store of another version is refused (an older
one with the command that upgrades it: ``tether migrate``, ``migrations.py``). Numbered
upgrades live in ``migrations.py`` and build on the statements here.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.errors import SchemaVersionError, StoreOpenError
from tether.store.sqlite.audit import AUDIT_TABLE
from tether.store.sqlite.conn import Tx

SCHEMA_VERSION = 6

# The effects ledger, keyed by message: msg ids are a runtime's random prefix and a counter, so
# new rows land on a few hot pages instead of one page per session (a commit dirties, and
# writes to the WAL, every page it touches). Lookups by actor (a session's ledger, a loop
# guard's rebuild) go through ``effects_by_actor``, in time order. The key is not indexed: it
# is a hash of the primary key's own fields (I5), and a person resolving a quarantined effect
# finds it among the few quarantined rows through ``effects_by_status``.
EFFECTS_TABLE = """
CREATE TABLE {name} (
    actor_id    TEXT NOT NULL,
    msg_id      TEXT NOT NULL,
    idx         INTEGER NOT NULL,
    key         TEXT NOT NULL,
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
    PRIMARY KEY (msg_id, idx)
) WITHOUT ROWID;
"""
EFFECTS_INDEXES = """
CREATE INDEX effects_by_actor ON effects(actor_id, created_at);
CREATE INDEX effects_by_status ON effects(status, updated_at);
"""

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE actors (
    actor_id      TEXT PRIMARY KEY,
    class_path    TEXT NOT NULL,
    init          BLOB NOT NULL,
    parent_id     TEXT,
    status        TEXT NOT NULL DEFAULT 'active',
    stop_reason   TEXT,
    fence         INTEGER NOT NULL DEFAULT 0,
    lease_owner   TEXT,
    lease_expires REAL NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL,
    head_seq      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX actors_by_parent ON actors(parent_id);
CREATE TABLE mailbox (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id      TEXT NOT NULL UNIQUE,
    actor_id    TEXT NOT NULL,
    type        TEXT NOT NULL,
    payload     BLOB NOT NULL,
    deliver_at  REAL NOT NULL,
    attempts    INTEGER NOT NULL DEFAULT 0,
    errors      BLOB,
    wants_reply INTEGER NOT NULL DEFAULT 0,
    created_at  REAL NOT NULL,
    parks       INTEGER NOT NULL DEFAULT 0,
    traceparent TEXT
);
CREATE INDEX mailbox_by_actor ON mailbox(actor_id, seq);
CREATE INDEX mailbox_by_due ON mailbox(deliver_at);
CREATE TABLE dedup (
    actor_id   TEXT NOT NULL,
    dedup_key  TEXT NOT NULL,
    msg_id     TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (actor_id, dedup_key)
) WITHOUT ROWID;
CREATE INDEX dedup_by_age ON dedup(created_at);
CREATE TABLE journal (
    actor_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    payload  BLOB NOT NULL,
    PRIMARY KEY (actor_id, seq)
) WITHOUT ROWID;
CREATE TABLE snapshots (actor_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state BLOB NOT NULL);
CREATE TABLE replies (
    msg_id     TEXT PRIMARY KEY,
    actor_id   TEXT NOT NULL,
    ok         INTEGER NOT NULL,
    payload    BLOB NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX replies_by_age ON replies(created_at);
CREATE TABLE dead_letters (
    msg_id     TEXT PRIMARY KEY,
    actor_id   TEXT NOT NULL,
    type       TEXT NOT NULL,
    payload    BLOB NOT NULL,
    attempts   INTEGER NOT NULL,
    errors     BLOB,
    reason     TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE watches (
    watched TEXT NOT NULL,
    watcher TEXT NOT NULL,
    PRIMARY KEY (watched, watcher)
) WITHOUT ROWID;
{effects}CREATE TABLE approvals (
    request_id TEXT PRIMARY KEY,
    actor_id   TEXT NOT NULL,
    status     TEXT NOT NULL,
    version    INTEGER NOT NULL,
    created_at REAL NOT NULL,
    record     BLOB NOT NULL
);
CREATE INDEX approvals_by_status ON approvals(status, created_at);
CREATE TABLE runtimes (
    runtime_id TEXT PRIMARY KEY,
    host       TEXT NOT NULL,
    pid        INTEGER NOT NULL,
    started_at REAL NOT NULL
);
{audit}""".replace("{effects}", EFFECTS_TABLE.format(name="effects") + EFFECTS_INDEXES).replace(
    "{audit}", AUDIT_TABLE
)

TABLES = frozenset(
    line.split()[2] for line in SCHEMA.splitlines() if line.startswith("CREATE TABLE")
)


async def ensure_schema(
    db: Tx, path: str, *, create: bool, can_migrate: Callable[[str | None], bool]
) -> None:
    """Create the schema in a new store (if ``create``), or check an existing one's version and
    tables. Run on the writer's thread, inline (``run_inline``): it never waits.
    ``can_migrate(version)``: whether ``tether migrate`` upgrades a store of that version (the
    error then says to run it)."""
    await db.execute("BEGIN IMMEDIATE")
    try:
        tables = {
            row[0]
            for row in await db.execute_fetchall(
                "SELECT name FROM sqlite_master WHERE type='table'"
            )
        }
        if not tables:
            if not create:
                raise StoreOpenError(f"{path!r} is an empty SQLite file, not a tether store")
            # executescript would commit first; run each statement inside this transaction
            for statement in filter(str.strip, SCHEMA.split(";")):
                await db.execute(statement)
            await db.execute(
                "INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        elif "meta" not in tables:
            raise SchemaVersionError(
                f"{path!r} is an SQLite file but not a tether store (no meta table)"
            )
        else:
            rows = list(
                await db.execute_fetchall("SELECT value FROM meta WHERE key='schema_version'")
            )
            found = rows[0][0] if rows else None
            if found != str(SCHEMA_VERSION):
                hint = (
                    f": stop every runtime on it and run `tether --db {path} migrate`"
                    if can_migrate(found)
                    else ""
                )
                raise SchemaVersionError(
                    f"store {path!r} has schema version {found!r}; this tether reads "
                    f"version {SCHEMA_VERSION} and never migrates silently{hint}"
                )
            missing = sorted(TABLES - tables)
            if missing:
                raise SchemaVersionError(
                    f"store {path!r} has schema version {found} but lacks the "
                    f"table(s) {', '.join(missing)}: it is damaged"
                )
        await db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            await db.execute("ROLLBACK")
        raise
