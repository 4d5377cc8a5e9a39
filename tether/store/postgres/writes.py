"""The writes of the PostgreSQL store: a batch applied in one transaction, one function per kind.

``apply`` runs inside the writer's transaction (``writer.py``), in the order the SQLite store
applies a batch (``tether.store.batch_order``). Hot rows (messages, journal rows, ledger
rows, replies, acks, claims) go in one statement each over ``unnest`` of arrays, whatever
their number, the arrays sent in binary (``%b``: quoting and escaping a text array of 100
payloads cost the writer's thread about 1 ms, binary a quarter of that). A binary array
has one type for all its elements: float columns are made floats first (an int among them
would not dump). The rest go in ``executemany``, which psycopg pipelines (one round trip).

Fencing (I8) is checked first, in this transaction, by reading the actors' rows ``FOR
SHARE`` (as Temporal reads its shard's range id): the lock is held to the commit, so a
takeover's fence increment (an ``UPDATE``) waits for this batch to commit, or this batch
reads the incremented fence and leaves out every fenced write of that actor. Rows are locked
in ``actor_id`` order, so two batches never wait for each other in a circle on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from tether.store.batch_order import BatchPlan, plan
from tether.store.postgres.rows import (
    ACTOR_COLUMNS,
    EFFECT_COLUMNS,
    actor,
    decode_errors,
    effect_row,
    encode,
)
from tether.store.records import (
    ApprovalRecord,
    AttemptFailed,
    Batch,
    BatchResult,
    EffectRecord,
    LeaseAcquire,
    LeaseRelease,
    NewMessage,
    Park,
    Revive,
    Spawn,
    StepCommit,
    StopActor,
    Watch,
)

Cursor = psycopg.Cursor[tuple[Any, ...]]

#: Now, on the database server's clock, in seconds since the epoch: the lease clock.
SERVER_NOW = "extract(epoch FROM clock_timestamp())::float8"

_ON_EFFECT_CONFLICT = (
    # One actor's row is never rewritten as another's (as in the SQLite store): the server
    # refuses it, a NULL actor_id, with the whole batch (``refusal``). Refused in the
    # statement itself, not by its count of rows afterwards: a batch in pipeline mode reads
    # no count before its commit.
    "ON CONFLICT (msg_id, idx) DO UPDATE SET "
    "actor_id = CASE WHEN effects.actor_id = excluded.actor_id THEN effects.actor_id END, "
    "status = excluded.status, attempts = excluded.attempts, result = excluded.result, "
    "error = excluded.error, reason = excluded.reason, history = excluded.history, "
    "updated_at = excluded.updated_at"
)
UPSERT_EFFECT = (
    f"INSERT INTO effects ({EFFECT_COLUMNS}) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) " + _ON_EFFECT_CONFLICT
)
#: Many ledger rows in one statement, over arrays in ``EFFECT_COLUMNS`` order.
_UPSERT_EFFECTS = (
    f"INSERT INTO effects ({EFFECT_COLUMNS}) SELECT * FROM unnest(%b::text[], %b::text[], "
    "%b::int[], %b::text[], %b::text[], %b::text[], %b::bytea[], %b::text[], %b::int[], "
    "%b::bytea[], %b::text[], %b::text[], %b::bytea[], %b::float8[], %b::float8[]) "
    + _ON_EFFECT_CONFLICT
)
#: Where ``effect_row``'s values split: (actor_id, msg_id, idx, key, tool, input_hash, args),
#: then (status, attempts, result, error, reason, history), created_at, updated_at. The
#: first part and created_at are written by a row's insert only; the rest by every write.
_MUTABLE, _CREATED = 7, 13


def refusal(exc: psycopg.Error) -> str | None:
    """What a write of this module refused, said plainly; None for any other error."""
    if (
        isinstance(exc, psycopg.errors.NotNullViolation)
        and exc.diag.table_name == "effects"
        and exc.diag.column_name == "actor_id"
    ):
        return (
            "an effect's (msg_id, idx) is already held by another actor's effect; "
            "the batch was rolled back"
        )
    return None


_INSERT_MESSAGES = (
    "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, wants_reply, "
    "created_at, attempts, traceparent) "
    "SELECT v.msg_id, v.actor_id, v.type, v.payload, v.deliver_at, v.wants_reply, "
    "v.created_at, v.attempts, v.traceparent FROM unnest(%b::text[], %b::text[], %b::text[], "
    "%b::bytea[], %b::float8[], %b::bool[], %b::float8[], %b::int[], %b::text[], %b::text[]) "
    "WITH ORDINALITY AS v(msg_id, actor_id, type, payload, deliver_at, wants_reply, "
    "created_at, attempts, dedup_key, traceparent, n) "
    "WHERE v.dedup_key IS NULL OR NOT EXISTS (SELECT 1 FROM dedup d WHERE "
    "d.actor_id = v.actor_id AND d.dedup_key = v.dedup_key AND d.msg_id <> v.msg_id) "
    "ORDER BY v.n"
)


def rows_of(cur: Cursor, sql: str, params: Sequence[Any]) -> list[Any]:
    """Run ``sql`` and read its rows. In pipeline mode (a batch: ``writer.py``) the statements
    queued so far and this one are sent with a Sync, not a mere flush: until the rest of the
    transaction comes, the server then holds it as an idle transaction, which
    ``idle_in_transaction_session_timeout`` ends, freeing its locks, should this process
    vanish meanwhile. (Between a flush and the next Sync no such timeout runs.)"""
    with cur.connection.pipeline():
        cur.execute(sql, params)
    return cur.fetchall()


def apply(cur: Cursor, b: Batch) -> BatchResult:
    """Every write of ``b``, in the caller's transaction."""
    result = BatchResult()
    if b.releases or b.steps or b.claims or b.failures or b.effects or b.parks:
        check_fences(cur, b, result)
    p: BatchPlan = plan(b, result.stale)
    if b.spawns:
        spawn(cur, b.spawns, result)
    if b.revives:
        revive(cur, b.revives)
    if b.watches:
        watch(cur, b.watches)
    if p.releases:
        release(cur, p.releases)
    if b.acquires:
        acquire(cur, b.acquires, result)
    if p.messages:
        insert_messages(cur, p.messages, result)
    if p.steps:
        commit_steps(cur, p.steps)
    if p.claims:
        claim(cur, p.claims)
    if p.failures:
        fail_attempts(cur, p.failures)
    if p.effects:
        write_effects(cur, p.effects)
    if p.parks:
        park(cur, p.parks)
    if p.stops:
        stop(cur, p.stops)
    return result


def check_fences(cur: Cursor, b: Batch, result: BatchResult) -> None:
    """I8: lock the rows of every actor with a fenced write ``FOR SHARE`` (to the commit) and
    add to ``result.stale`` each whose fence in the batch is not its current one (a missing
    actor's too)."""
    fenced = {(op.actor_id, op.fence) for op in b.fenced()}
    ids = sorted({a for a, _ in fenced})
    found = rows_of(
        cur,
        "SELECT actor_id, fence FROM actors WHERE actor_id = ANY(%s) ORDER BY actor_id FOR SHARE",
        (ids,),
    )
    current: dict[str, int] = dict(found)
    result.stale.update(a for a, fence in fenced if current.get(a) != fence)


def actors_in(cur: Cursor, ids: Sequence[str]) -> list[Any]:
    found = rows_of(
        cur, f"SELECT {ACTOR_COLUMNS} FROM actors WHERE actor_id = ANY(%s)", (list(ids),)
    )
    return [actor(r) for r in found]


def spawn(cur: Cursor, spawns: list[Spawn], result: BatchResult) -> None:
    """Store new actors; an id that is taken keeps its record."""
    cur.executemany(
        "INSERT INTO actors (actor_id, class_path, init, parent_id, created_at) "
        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (actor_id) DO NOTHING",
        [
            (r.actor_id, r.class_path, r.init, r.parent_id, r.created_at)
            for r in (s.record for s in spawns)
        ],
    )
    for rec in actors_in(cur, [s.record.actor_id for s in spawns]):
        result.spawned[rec.actor_id] = rec


def revive(cur: Cursor, revives: list[Revive]) -> None:
    cur.executemany(
        "UPDATE actors SET status = 'active', stop_reason = NULL WHERE actor_id = %s",
        [(r.actor_id,) for r in revives],
    )


def watch(cur: Cursor, watches: list[Watch]) -> None:
    cur.executemany(
        "INSERT INTO watches (watched, watcher) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        [(w.watched, w.watcher) for w in watches],
    )


def release(cur: Cursor, releases: list[LeaseRelease]) -> None:
    cur.executemany(
        "UPDATE actors SET lease_owner = NULL, lease_expires = 0 "
        "WHERE actor_id = %s AND fence = %s",
        [(r.actor_id, r.fence) for r in releases],
    )


def acquire(cur: Cursor, acquires: list[LeaseAcquire], result: BatchResult) -> None:
    """Take each lease that is free, expired on the server's clock, the acquirer's, or held by
    an owner that is not a registered runtime; ``result.leases``: the new fence, or None.

    The rows are claimed ``FOR UPDATE SKIP LOCKED``: a row another transaction holds is not
    claimed now (None, as for a lease held), and a later claim judges it again. The holder
    may be its old owner's batch, reading the fence ``FOR SHARE``: the takeover's fence
    increment must not land under it (I8), and waiting for it would stall this runtime's
    one writer, every session's writes with it, for as long as that transaction stays open
    (a host cut off in the middle of one holds it until the server's idle timeout ends it).
    Another runtime's claim of the same actor holds the row for its short transaction only."""
    first: dict[str, LeaseAcquire] = {}
    for a in acquires:
        first.setdefault(a.actor_id, a)
    wanted = list(first.values())
    found = rows_of(
        cur,
        "WITH v AS (SELECT * FROM unnest(%b::text[], %b::text[], %b::float8[]) "
        "AS v(actor_id, owner, ttl)), "
        f"clock AS (SELECT {SERVER_NOW} AS now), "
        "free AS (SELECT a.actor_id FROM actors a JOIN v ON v.actor_id = a.actor_id, clock "
        "WHERE a.status = 'active' AND (a.lease_owner IS NULL OR a.lease_owner = v.owner "
        "OR a.lease_expires < clock.now OR NOT EXISTS "
        "(SELECT 1 FROM runtimes r WHERE r.runtime_id = a.lease_owner)) "
        "ORDER BY a.actor_id FOR UPDATE OF a SKIP LOCKED) "
        "UPDATE actors a SET lease_owner = v.owner, lease_expires = clock.now + v.ttl, "
        "fence = a.fence + 1 FROM v, clock, free "
        "WHERE a.actor_id = v.actor_id AND a.actor_id = free.actor_id "
        "RETURNING a.actor_id, a.fence",
        (
            [a.actor_id for a in wanted],
            [a.owner for a in wanted],
            [float(a.ttl) for a in wanted],
        ),
    )
    won: dict[str, int] = dict(found)
    for a in acquires:
        result.leases[a.actor_id] = won.get(a.actor_id)


def insert_messages(cur: Cursor, messages: list[NewMessage], result: BatchResult) -> None:
    """Store sent messages in batch order (it is mailbox order); one whose dedup key is taken
    for its actor is not stored (``result.duplicates``: its msg id -> the stored one's)."""
    keyed = [m for m in messages if m.dedup_key is not None]
    if keyed:
        # A concurrent transaction inserting the same key makes this one wait for its
        # outcome: the key is then taken (its commit) or free (its rollback), never both.
        cur.executemany(
            "INSERT INTO dedup (actor_id, dedup_key, msg_id, created_at) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [(m.actor_id, m.dedup_key, m.msg_id, m.created_at) for m in keyed],
        )
    cur.execute(
        _INSERT_MESSAGES,
        (
            [m.msg_id for m in messages],
            [m.actor_id for m in messages],
            [m.type for m in messages],
            [m.payload for m in messages],
            [float(m.deliver_at) for m in messages],
            [bool(m.wants_reply) for m in messages],
            [float(m.created_at) for m in messages],
            [int(m.attempts) for m in messages],
            [m.dedup_key for m in messages],
            [m.traceparent for m in messages],
        ),
    )
    if keyed:
        pairs = list({(m.actor_id, m.dedup_key): m.msg_id for m in keyed})
        found = rows_of(
            cur,
            "SELECT d.actor_id, d.dedup_key, d.msg_id FROM dedup d "
            "JOIN unnest(%b::text[], %b::text[]) AS v(actor_id, dedup_key) "
            "ON d.actor_id = v.actor_id AND d.dedup_key = v.dedup_key",
            ([a for a, _ in pairs], [k for _, k in pairs]),
        )
        for actor_id, key, stored in found:
            for m in keyed:
                if m.actor_id == actor_id and m.dedup_key == key and m.msg_id != stored:
                    result.duplicates[m.msg_id] = stored


def commit_steps(cur: Cursor, steps: list[StepCommit]) -> None:
    """I2: each step's events, snapshot, reply and late replies, the actor's ``head_seq``,
    and its message's ack (its outbox is stored by ``insert_messages``)."""
    journal = [(s.actor_id, e.seq, e.payload) for s in steps for e in s.events]
    if journal:
        cur.execute(
            "INSERT INTO journal (actor_id, seq, payload) "
            "SELECT * FROM unnest(%b::text[], %b::bigint[], %b::bytea[])",
            ([j[0] for j in journal], [j[1] for j in journal], [j[2] for j in journal]),
        )
        heads: dict[str, int] = {}
        for actor_id, seq, _ in journal:
            heads[actor_id] = max(seq, heads.get(actor_id, 0))
        cur.execute(
            "UPDATE actors a SET head_seq = GREATEST(a.head_seq, v.seq) "
            "FROM unnest(%b::text[], %b::bigint[]) AS v(actor_id, seq) "
            "WHERE a.actor_id = v.actor_id",
            (list(heads), list(heads.values())),
        )
    snaps = [
        (s.actor_id, s.snapshot.seq, s.snapshot.state) for s in steps if s.snapshot is not None
    ]
    if snaps:
        cur.executemany(
            "INSERT INTO snapshots (actor_id, seq, state) VALUES (%s, %s, %s) "
            "ON CONFLICT (actor_id) DO UPDATE SET seq = excluded.seq, state = excluded.state",
            snaps,
        )
    replies = {s.msg_id: (s.actor_id, s.reply) for s in steps if s.reply is not None}
    if replies:
        cur.execute(
            "INSERT INTO replies (msg_id, actor_id, ok, payload, created_at) "
            "SELECT v.msg_id, v.actor_id, TRUE, v.payload, m.created_at "
            "FROM unnest(%b::text[], %b::text[], %b::bytea[]) AS v(msg_id, actor_id, payload) "
            "JOIN mailbox m ON m.msg_id = v.msg_id "
            "ON CONFLICT (msg_id) DO UPDATE SET actor_id = excluded.actor_id, ok = excluded.ok, "
            "payload = excluded.payload, created_at = excluded.created_at",
            (list(replies), [a for a, _ in replies.values()], [p for _, p in replies.values()]),
        )
    late = [(r.msg_id, s.actor_id, r.payload, r.at) for s in steps for r in s.late_replies]
    if late:
        cur.executemany(
            "INSERT INTO replies (msg_id, actor_id, ok, payload, created_at) "
            "VALUES (%s, %s, TRUE, %s, %s) ON CONFLICT (msg_id) DO UPDATE SET "
            "actor_id = excluded.actor_id, ok = excluded.ok, payload = excluded.payload, "
            "created_at = excluded.created_at",
            late,
        )
    cur.execute("DELETE FROM mailbox WHERE msg_id = ANY(%s)", ([s.msg_id for s in steps],))


def claim(cur: Cursor, msg_ids: list[str]) -> None:
    """Count a delivery attempt on each message (twice on one named twice)."""
    cur.execute(
        "UPDATE mailbox m SET attempts = m.attempts + c.n "
        "FROM (SELECT id, count(*)::int AS n FROM unnest(%b::text[]) AS id GROUP BY id) c "
        "WHERE m.msg_id = c.id",
        (msg_ids,),
    )


def fail_attempts(cur: Cursor, failures: list[AttemptFailed]) -> None:
    """Record each failure's error history; move those given a reason to dead letters."""
    cur.executemany(
        "UPDATE mailbox SET errors = %s, attempts = attempts + %s WHERE msg_id = %s",
        [(encode(f.errors), int(f.claim_again), f.msg_id) for f in failures],
    )
    dead = [(f.msg_id, f.dead_letter_reason or "", f.now) for f in failures if f.dead_letter_reason]
    if dead:
        dead_letter(cur, dead)


def write_effects(cur: Cursor, effects: list[EffectRecord]) -> None:
    """Insert or update ledger rows (I4), in order (an intent and its receipt may share a
    batch). A row of another actor under the same slot is never rewritten: the batch is
    refused instead (``UPSERT_EFFECT``), so no intent goes unrecorded.

    One statement for all of them (``_UPSERT_EFFECTS``; a statement each cost the writer
    ~0.1 ms of Python per step): the writes of one slot are first merged into the row that
    writing them one after another leaves (``merged_effects``), since one statement may not
    update a row twice. Two writes of one slot naming different actors go one by one, so
    that the second is refused as before."""
    rows = merged_effects(effects)
    if rows is None:
        cur.executemany(UPSERT_EFFECT, [effect_row(e) for e in effects])
        return
    columns = [list(column) for column in zip(*rows, strict=True)]
    columns[-2] = [float(t) for t in columns[-2]]  # (binary arrays: one type per array)
    columns[-1] = [float(t) for t in columns[-1]]
    cur.execute(_UPSERT_EFFECTS, columns)


def merged_effects(effects: list[EffectRecord]) -> list[tuple[Any, ...]] | None:
    """One row per slot ``(msg_id, idx)``, as writing ``effects`` in order leaves it: the
    first write's insert-only values, the last write's others; None if two writes of one slot
    name different actors."""
    slots: dict[tuple[str, int], tuple[Any, ...]] = {}
    for e in effects:
        row = effect_row(e)
        first = slots.get((e.msg_id, e.idx))
        if first is None:
            slots[e.msg_id, e.idx] = row
        elif first[0] != row[0]:
            return None
        else:
            slots[e.msg_id, e.idx] = (
                *first[:_MUTABLE],
                *row[_MUTABLE:_CREATED],
                first[_CREATED],
                row[-1],
            )
    return list(slots.values())


def park(cur: Cursor, parks: list[Park]) -> None:
    """Set messages aside (their effect rows are written by ``write_effects``), storing each
    approval request unless one with its id exists."""
    requests: list[ApprovalRecord] = [p.approval for p in parks if p.approval is not None]
    if requests:
        cur.executemany(
            "INSERT INTO approvals (request_id, actor_id, status, version, created_at, record) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (request_id) DO NOTHING",
            [
                (a.request_id, a.actor_id, a.status, a.version, a.created_at, encode(a))
                for a in requests
            ],
        )
    # The claim counted an attempt that did not fail: give it back.
    cur.executemany(
        "UPDATE mailbox SET deliver_at = %s, attempts = GREATEST(attempts - 1, 0), "
        "parks = parks + 1 WHERE msg_id = %s",
        [(p.until, p.msg_id) for p in parks],
    )


def stop(cur: Cursor, stops: list[StopActor]) -> None:
    """Stop actors for good (a new fence, no lease); their mail goes to dead letters and each
    watcher gets its Terminated notice, in this transaction."""
    cur.executemany(
        "UPDATE actors SET status = %s, stop_reason = %s, fence = fence + 1, "
        "lease_owner = NULL, lease_expires = 0 WHERE actor_id = %s",
        [(st.status, st.reason, st.actor_id) for st in stops],
    )
    pending: list[tuple[str, str, float]] = []
    for st in stops:
        found = rows_of(
            cur, "SELECT msg_id FROM mailbox WHERE actor_id = %s ORDER BY seq", (st.actor_id,)
        )
        pending.extend((m, f"actor {st.status}: {st.reason}", st.now) for (m,) in found)
    if pending:
        dead_letter(cur, pending)
    cur.executemany(
        "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, wants_reply, "
        "created_at) SELECT 'terminated:' || watched || ':' || watcher || ':' || %s, watcher, "
        "'Terminated', %s, %s, FALSE, %s FROM watches WHERE watched = %s ORDER BY watcher "
        "ON CONFLICT (msg_id) DO NOTHING",
        [(repr(st.now), st.notice, st.now, st.now, st.actor_id) for st in stops],
    )
    cur.executemany("DELETE FROM watches WHERE watched = %s", [(st.actor_id,) for st in stops])


def dead_letter(cur: Cursor, rows: Sequence[tuple[str, str, float]]) -> None:
    """Move mailbox rows ``(msg_id, reason, at)`` to dead letters, answering any waiting ask
    with its error history (the errors recorded on the message, then the reason)."""
    found = rows_of(
        cur,
        "SELECT msg_id, errors FROM mailbox WHERE wants_reply AND msg_id = ANY(%s)",
        ([m for m, _, _ in rows],),
    )
    asked = {m: decode_errors(errors, m) for m, errors in found}
    if asked:
        cur.executemany(
            "INSERT INTO replies (msg_id, actor_id, ok, payload, created_at) "
            "SELECT msg_id, actor_id, FALSE, %s, %s FROM mailbox WHERE msg_id = %s "
            "ON CONFLICT (msg_id) DO UPDATE SET actor_id = excluded.actor_id, ok = excluded.ok, "
            "payload = excluded.payload, created_at = excluded.created_at",
            [(encode([*asked[m], reason]), at, m) for m, reason, at in rows if m in asked],
        )
    cur.executemany(
        "INSERT INTO dead_letters (msg_id, actor_id, type, payload, attempts, errors, reason, "
        "created_at) SELECT msg_id, actor_id, type, payload, attempts, errors, %s, %s "
        "FROM mailbox WHERE msg_id = %s ON CONFLICT (msg_id) DO UPDATE SET "
        "actor_id = excluded.actor_id, type = excluded.type, payload = excluded.payload, "
        "attempts = excluded.attempts, errors = excluded.errors, reason = excluded.reason, "
        "created_at = excluded.created_at",
        [(reason, at, msg_id) for msg_id, reason, at in rows],
    )
    cur.execute("DELETE FROM mailbox WHERE msg_id = ANY(%s)", ([m for m, _, _ in rows],))


def unpark(cur: Cursor, msg_id: str, now: float) -> bool:
    """Make a parked message due at ``now``, ready again for every runtime's scan: stamped with
    this transaction's id (the scan's cursor is a transaction snapshot) and moved to the end
    of its actor's mailbox order."""
    cur.execute(
        "UPDATE mailbox SET deliver_at = %s, seq = nextval('mailbox_seq'), "
        "xid = pg_current_xact_id() WHERE msg_id = %s AND deliver_at > %s",
        (now, msg_id, now),
    )
    return cur.rowcount == 1
