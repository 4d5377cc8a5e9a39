"""The writes of the SQLite store: a batch applied in one transaction, one function per kind.

``apply`` runs on the writer's thread inside ``BEGIN IMMEDIATE`` … ``COMMIT`` (see
``conn.py``). A batch is a fixed handful of statements whatever its size: hot rows (messages,
journal rows, acks, claims) go in multi-row statements, the rest in ``executemany``.

Fencing (I8) is checked first, in this transaction: one statement returns the actors whose
fence in the batch is not their current one, and every fenced write of those actors is left
out below. SQLite has one writer at a time (``BEGIN IMMEDIATE`` takes the write lock), so no
takeover can commit between that check and the writes it guards.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from tether.errors import StoreError
from tether.store.batch_order import plan
from tether.store.records import (
    ActorRecord,
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
from tether.store.sqlite.conn import Tx, chunks
from tether.store.sqlite.rows import (
    ACTOR_COLUMNS,
    ACTOR_TYPES,
    EFFECT_COLUMNS,
    checked,
    decode_errors,
    effect_row,
    encode,
    ignore_corrupt,
    mailbox_row,
)

UPSERT_EFFECT = (
    f"INSERT INTO effects ({EFFECT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (msg_id, idx) DO UPDATE SET status = excluded.status, "
    "attempts = excluded.attempts, result = excluded.result, error = excluded.error, "
    "reason = excluded.reason, history = excluded.history, updated_at = excluded.updated_at "
    # msg ids are unique per store (a runtime's random prefix and a counter): this never
    # holds in practice, but if it did, one actor's row must not be rewritten as another's.
    "WHERE effects.actor_id = excluded.actor_id"
)


async def apply(db: Tx, b: Batch, clock: Callable[[], float]) -> BatchResult:
    """Every write of ``b``, in this transaction, in the order every SQL backend applies a
    batch (``tether.store.batch_order``); ``clock``: the store's, for leases."""
    result = BatchResult()
    if b.releases or b.steps or b.claims or b.failures or b.effects or b.parks:
        await check_fences(db, b, result)
    p = plan(b, result.stale)
    if b.spawns:
        await spawn(db, b.spawns, result)
    if b.revives:
        await revive(db, b.revives)
    if b.watches:
        await watch(db, b.watches)
    if p.releases:
        await release(db, p.releases)
    if b.acquires:
        await acquire(db, b.acquires, clock(), result)
    if p.messages:
        await insert_messages(db, p.messages, result)
    if p.steps:
        await commit_steps(db, p.steps)
    if p.claims:
        await claim(db, p.claims)
    if p.failures:
        await fail_attempts(db, p.failures)
    if p.effects:
        await write_effects(db, p.effects)
    if p.parks:
        await park(db, p.parks)
    if p.stops:
        await stop(db, p.stops)
    return result


async def check_fences(db: Tx, b: Batch, result: BatchResult) -> None:
    """I8: add to ``result.stale`` every actor whose fenced write's fence is not its current
    one (a missing actor's too)."""
    fenced = {(op.actor_id, op.fence) for op in b.fenced()}
    # Only the stale pairs come back: usually none, so one step per statement.
    for (actor_id,) in await db.execute_rows(
        "SELECT v.column1 FROM (VALUES ",
        "(?, ?)",
        list(fenced),
        ") AS v LEFT JOIN actors ON actors.actor_id = v.column1 "
        "WHERE actors.fence IS NOT v.column2",
    ):
        result.stale.add(actor_id)


async def spawn(db: Tx, spawns: list[Spawn], result: BatchResult) -> None:
    """Store new actors; an id that is taken keeps its record. ``result.spawned``: the stored
    record of each id."""
    await db.executemany(
        "INSERT OR IGNORE INTO actors (actor_id, class_path, init, parent_id, status, "
        "stop_reason, fence, lease_owner, lease_expires, created_at) "
        "VALUES (?, ?, ?, ?, 'active', NULL, 0, NULL, 0, ?)",
        [
            (r.actor_id, r.class_path, r.init, r.parent_id, r.created_at)
            for r in (s.record for s in spawns)
        ],
    )
    for rec in await actors_in(db, [s.record.actor_id for s in spawns]):
        result.spawned[rec.actor_id] = rec


async def revive(db: Tx, revives: list[Revive]) -> None:
    await db.executemany(
        "UPDATE actors SET status = 'active', stop_reason = NULL WHERE actor_id = ?",
        [(r.actor_id,) for r in revives],
    )


async def watch(db: Tx, watches: list[Watch]) -> None:
    await db.executemany(
        "INSERT OR IGNORE INTO watches (watched, watcher) VALUES (?, ?)",
        [(w.watched, w.watcher) for w in watches],
    )


async def release(db: Tx, releases: list[LeaseRelease]) -> None:
    await db.executemany(
        "UPDATE actors SET lease_owner = NULL, lease_expires = 0 WHERE actor_id = ? AND fence = ?",
        [(r.actor_id, r.fence) for r in releases],
    )


async def acquire(db: Tx, acquires: list[LeaseAcquire], now: float, result: BatchResult) -> None:
    """Take each lease that is free, expired at ``now`` (the store's clock), the acquirer's,
    or held by an owner that is not a registered runtime; ``result.leases``: the new fence,
    or None."""
    await db.executemany(
        "UPDATE actors SET lease_owner = ?, lease_expires = ?, fence = fence + 1 "
        "WHERE actor_id = ? AND status = 'active' AND (lease_owner IS NULL "
        "OR lease_owner = ? OR lease_expires < ? "
        "OR lease_owner NOT IN (SELECT runtime_id FROM runtimes))",
        [(a.owner, now + a.ttl, a.actor_id, a.owner, now) for a in acquires],
    )
    wanted = {a.actor_id: a for a in acquires}
    got = {r.actor_id: r for r in await actors_in(db, list(wanted))}
    for actor_id, a in wanted.items():
        rec = got.get(actor_id)
        won = rec is not None and rec.lease_owner == a.owner and rec.lease_expires == now + a.ttl
        result.leases[actor_id] = rec.fence if won and rec is not None else None


async def insert_messages(db: Tx, messages: list[NewMessage], result: BatchResult) -> None:
    """Store sent messages in batch order (it is mailbox order); one whose dedup key is taken
    for its actor is not stored (``result.duplicates``: its msg id -> the stored one's)."""
    keyed = [m for m in messages if m.dedup_key is not None]
    if keyed:
        await db.executemany(
            "INSERT OR IGNORE INTO dedup (actor_id, dedup_key, msg_id, created_at) VALUES (?, ?, ?, ?)",
            [(m.actor_id, m.dedup_key, m.msg_id, m.created_at) for m in keyed],
        )
    # Runs of messages without a dedup key in multi-row inserts, keyed ones each checked
    # against the dedup table.
    runs = (
        itertools.groupby(messages, lambda m: m.dedup_key is not None)
        if keyed
        else [(False, messages)]  # usually: one run, without a key function per message
    )
    for has_key, run in runs:
        if not has_key:
            await db.execute_rows(
                "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, "
                "wants_reply, created_at, attempts, traceparent) VALUES ",
                "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [mailbox_row(m) for m in run],
            )
            continue
        await db.executemany(
            "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, wants_reply, created_at, attempts, traceparent) "
            "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS "
            "(SELECT 1 FROM dedup WHERE actor_id = ? AND dedup_key = ? AND msg_id <> ?)",
            [(*mailbox_row(m), m.actor_id, m.dedup_key, m.msg_id) for m in run],
        )
    if keyed:
        pairs = list({(m.actor_id, m.dedup_key): m.msg_id for m in keyed})
        for chunk in chunks(pairs):
            values = ",".join("(?, ?)" for _ in chunk)
            flat = [x for pair in chunk for x in pair]
            for actor_id, key, stored in await db.execute_fetchall(
                f"SELECT actor_id, dedup_key, msg_id FROM dedup WHERE (actor_id, dedup_key) IN (VALUES {values})",
                flat,
            ):
                # Every message carrying this key in the batch that is not the stored one is
                # a duplicate of it.
                for m in keyed:
                    if m.actor_id == actor_id and m.dedup_key == key and m.msg_id != stored:
                        result.duplicates[m.msg_id] = stored


async def commit_steps(db: Tx, steps: list[StepCommit]) -> None:
    """I2: each step's events, the actor's ``head_seq``, snapshot, reply and late replies, and
    its message's ack (its outbox is stored by ``insert_messages``)."""
    journal = [(s.actor_id, e.seq, e.payload) for s in steps for e in s.events]
    if journal:
        await db.execute_rows(
            "INSERT INTO journal (actor_id, seq, payload) VALUES ", "(?, ?, ?)", journal
        )
        # Each actor's head: its last event in this batch (journal rows are in seq order).
        heads = {actor_id: seq for actor_id, seq, _ in journal}
        await db.execute_rows(
            "UPDATE actors SET head_seq = v.column2 FROM (VALUES ",
            "(?, ?)",
            list(heads.items()),
            ") AS v WHERE actors.actor_id = v.column1",
        )
    snaps = [
        (s.actor_id, s.snapshot.seq, s.snapshot.state) for s in steps if s.snapshot is not None
    ]
    if snaps:
        await db.executemany(
            "INSERT OR REPLACE INTO snapshots (actor_id, seq, state) VALUES (?, ?, ?)", snaps
        )
    replies = [(s.msg_id, s.actor_id, s.reply) for s in steps if s.reply is not None]
    if replies:
        await db.execute_rows(
            "INSERT OR REPLACE INTO replies (msg_id, actor_id, ok, payload, created_at) "
            "SELECT v.column1, v.column2, 1, v.column3, mailbox.created_at FROM (VALUES ",
            "(?, ?, ?)",
            replies,
            ") AS v JOIN mailbox ON mailbox.msg_id = v.column1",
        )
    late = [(r.msg_id, s.actor_id, r.payload, r.at) for s in steps for r in s.late_replies]
    if late:
        await db.executemany(
            "INSERT OR REPLACE INTO replies (msg_id, actor_id, ok, payload, created_at) "
            "VALUES (?, ?, 1, ?, ?)",
            late,
        )
    await db.execute_rows(
        "DELETE FROM mailbox WHERE msg_id IN (", "?", [(s.msg_id,) for s in steps], ")"
    )


async def claim(db: Tx, msg_ids: list[str]) -> None:
    """Count a delivery attempt on each message (twice on one named twice)."""
    if len(set(msg_ids)) == len(msg_ids):
        await db.execute_rows(
            "UPDATE mailbox SET attempts = attempts + 1 WHERE msg_id IN (",
            "?",
            [(m,) for m in msg_ids],
            ")",
        )
    else:  # one message counted twice in a batch: once per claim
        await db.executemany(
            "UPDATE mailbox SET attempts = attempts + 1 WHERE msg_id = ?", [(m,) for m in msg_ids]
        )


async def fail_attempts(db: Tx, failures: list[AttemptFailed]) -> None:
    """Record each failure's error history; move those given a reason to dead letters."""
    await db.executemany(
        "UPDATE mailbox SET errors = ?, attempts = attempts + ? WHERE msg_id = ?",
        [(encode(f.errors), int(f.claim_again), f.msg_id) for f in failures],
    )
    dead = [f for f in failures if f.dead_letter_reason is not None]
    if dead:
        await dead_letter(db, [(f.msg_id, f.dead_letter_reason or "", f.now) for f in dead])


async def write_effects(db: Tx, effects: list[EffectRecord]) -> None:
    """Insert or update ledger rows (I4). A row of another actor under the same slot is
    never rewritten: the batch is refused instead, so no intent goes unrecorded."""
    rows = [effect_row(e) for e in effects]
    if await db.executemany(UPSERT_EFFECT, rows) != len(rows):
        raise StoreError(
            "an effect's (msg_id, idx) is already held by another actor's effect; "
            "the batch was rolled back"
        )


async def park(db: Tx, parks: list[Park]) -> None:
    """Set messages aside (their effect rows are written by ``write_effects``), storing each
    approval request unless one with its id exists."""
    requests: list[ApprovalRecord] = [p.approval for p in parks if p.approval is not None]
    if requests:
        await db.executemany(
            "INSERT OR IGNORE INTO approvals (request_id, actor_id, status, version, "
            "created_at, record) VALUES (?, ?, ?, ?, ?, ?)",
            [
                (a.request_id, a.actor_id, a.status, a.version, a.created_at, encode(a))
                for a in requests
            ],
        )
    # The claim counted an attempt that did not fail: give it back (I7 counts failures and
    # unfinished deliveries, not waiting).
    await db.executemany(
        "UPDATE mailbox SET deliver_at = ?, attempts = max(attempts - 1, 0), "
        "parks = parks + 1 WHERE msg_id = ?",
        [(p.until, p.msg_id) for p in parks],
    )


async def stop(db: Tx, stops: list[StopActor]) -> None:
    """Stop actors for good (a new fence, no lease); their mail goes to dead letters and each
    watcher gets its Terminated notice, in this transaction."""
    await db.executemany(
        "UPDATE actors SET status = ?, stop_reason = ?, fence = fence + 1, "
        "lease_owner = NULL, lease_expires = 0 WHERE actor_id = ?",
        [(st.status, st.reason, st.actor_id) for st in stops],
    )
    pending: list[tuple[str, str, float]] = []
    for st in stops:
        for (msg_id,) in await db.execute_fetchall(
            "SELECT msg_id FROM mailbox WHERE actor_id = ?", (st.actor_id,)
        ):
            pending.append((msg_id, f"actor {st.status}: {st.reason}", st.now))
    if pending:
        await dead_letter(db, pending)
    await db.executemany(
        "INSERT OR IGNORE INTO mailbox (msg_id, actor_id, type, payload, deliver_at, wants_reply, created_at) "
        "SELECT 'terminated:' || watched || ':' || watcher || ':' || ?, watcher, 'Terminated', ?, ?, 0, ? "
        "FROM watches WHERE watched = ?",
        [(repr(st.now), st.notice, st.now, st.now, st.actor_id) for st in stops],
    )
    await db.executemany("DELETE FROM watches WHERE watched = ?", [(st.actor_id,) for st in stops])


async def dead_letter(db: Tx, rows: Sequence[tuple[str, str, float]]) -> None:
    """Move mailbox rows ``(msg_id, reason, at)`` to dead letters, answering any waiting ask
    with its error history (the errors recorded on the message, then the reason)."""
    asked: dict[str, list[str]] = {}
    for chunk in chunks([m for m, _, _ in rows]):
        marks = ",".join("?" * len(chunk))
        for msg_id, errors in await db.execute_fetchall(
            f"SELECT msg_id, errors FROM mailbox WHERE wants_reply = 1 AND msg_id IN ({marks})",
            chunk,
        ):
            asked[msg_id] = decode_errors(errors, msg_id)
    if asked:
        await db.executemany(
            "INSERT OR REPLACE INTO replies (msg_id, actor_id, ok, payload, created_at) "
            "SELECT msg_id, actor_id, 0, ?, ? FROM mailbox WHERE msg_id = ?",
            [(encode([*asked[m], reason]), at, m) for m, reason, at in rows if m in asked],
        )
    await db.executemany(
        "INSERT OR REPLACE INTO dead_letters (msg_id, actor_id, type, payload, attempts, errors, reason, created_at) "
        "SELECT msg_id, actor_id, type, payload, attempts, errors, ?, ? FROM mailbox WHERE msg_id = ?",
        [(reason, at, msg_id) for msg_id, reason, at in rows],
    )
    await db.executemany("DELETE FROM mailbox WHERE msg_id = ?", [(m,) for m, _, _ in rows])


async def unpark(db: Tx, msg_id: str, now: float) -> bool:
    """Make a parked message due at ``now``, ready again for every runtime's scan: it moves to
    the end of the mailbox order, past every seq ever assigned (the scan's cursor is a seq)."""
    # Above every seq ever assigned (AUTOINCREMENT's high-water mark in sqlite_sequence), not
    # just above the rows still in the mailbox: a cursor may already be past acked messages.
    # An UPDATE does not move that mark, so move it by hand, or the next INSERT would reuse
    # this seq once the message is acked.
    cur = await db.execute(
        "UPDATE mailbox SET deliver_at = ?, "
        "seq = (SELECT seq + 1 FROM sqlite_sequence WHERE name = 'mailbox') "
        "WHERE msg_id = ? AND deliver_at > ?",
        (now, msg_id, now),
    )
    if cur.rowcount != 1:
        return False
    await db.execute("UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'mailbox'")
    return True


async def actors_in(db: Tx, ids: list[str]) -> list[ActorRecord]:
    out: list[ActorRecord] = []
    for chunk in chunks(ids):
        marks = ",".join("?" * len(chunk))
        rows = await db.execute_fetchall(
            f"SELECT {ACTOR_COLUMNS} FROM actors WHERE actor_id IN ({marks})", chunk
        )
        # Inside a batch: a damaged row is left out (its spawn or lease is not reported as
        # done), never raised, which would roll back every other actor's writes too.
        out.extend(ActorRecord(*r) for r in checked("actors", rows, ACTOR_TYPES, ignore_corrupt))
    return out
