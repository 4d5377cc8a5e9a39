"""``Store``: what the runtime asks of a store, and the contracts every backend keeps.

The runtime talks to a store in two ways: reads, each its own snapshot, and ``apply(batch)``,
one atomic transaction holding many actors' writes (the group committer builds the batches).
It never assumes what only one backend gives. The contracts below are what it relies on; each
is a case of the conformance suite (``tether.testing.conformance``), which every backend —
ours or another package's — must pass.

**Batches are atomic; fencing is inside the write (I2, I8).** ``apply`` writes a whole batch
or nothing. Every write that carries a fence (``Batch.fenced()``: steps, claims, failures,
releases, effect intents and receipts, parks) is checked against the actor's current fence
*in the transaction that writes it*, never by an earlier read: a takeover's fence increment
and a stale owner's commit are serialised, so a stale owner's writes — its effect intents
above all — are refused, each on its own, reported in ``BatchResult.stale``, while the rest
of the batch commits. (On PostgreSQL: ``SELECT … FOR SHARE`` of the actors' rows first, as
Temporal checks its shard's range id.)

**The scan for new messages is a cursor (``scan_messages``).** Along a chain of calls, each
given the cursor the one before returned (the first one ``None``), every committed message is
returned once when it is ready, and once more each time a write makes it ready again
(``unpark``, ``update_approval`` deciding, ``resolve_effect``, ``retry_dead_letter``). Not
"every message with a sequence number above a watermark": with concurrent writers, a
transaction holding a lower number can commit after a higher one was read, and a watermark
would skip it for good (Akka Persistence JDBC shipped that bug). The cursor is opaque: the
runtime keeps it and hands it back, nothing more. A single-writer store (SQLite, memory) may
make it a sequence watermark, since its sequence order is its commit order; a multi-writer one
must not (on PostgreSQL, PgQ's way: store ``pg_current_xact_id()`` with each row, read only
rows of transactions older than ``pg_snapshot_xmin(pg_current_snapshot())``, in
``(xid, seq)`` order, and re-stamp a row when it is made ready again).

**Leases run on the store's clock.** A lease write carries a ttl (``LeaseAcquire.ttl``,
``renew_leases(owner, ttl)``), never an absolute expiry computed on the writer's clock; the
store judges expiry (acquisition, ``orphaned``) and sets the new expiry on its own clock, so
runtimes on hosts whose clocks disagree still agree on who holds a lease. A store shared by
hosts uses the database server's clock (``clock_timestamp()``); a store local to one machine
(SQLite, memory) uses the clock it was built with — ``open_store(url, clock=…)``, which the
``Runtime`` passes its own (so ``tether.testing.FakeClock`` moves leases too), or the system
clock. ``StoreAdmin.store_time`` reads it.

**"Is the owner still alive" is a same-host shortcut.** A lease whose owner is not a
registered runtime is free at once; registered runtimes are removed by ``remove_runtime``
(their own close, or a runtime that found the process dead). A store never judges a process's
liveness itself. Runtimes register with a host identity (``tether.store.hosts``) that names a
pid namespace on one boot of one kernel, and a runtime only ever asks about a pid under its
own identity: another host's runtime is left to its lease's expiry.

**Optional fast paths are declared, never guessed.** ``immediate`` is a store's synchronous
write path (``ImmediateWrites``) or None; the committer uses it when it is there. A store may
also have a ``batched_reads`` attribute (``tether.store.reads.BatchedReads``: many actors'
record, snapshot, journal and mail reads in one call); the runtime gathers the reads of many
activations into one call when it is there, and reads one call at a time when it is absent or
None (it is not part of this protocol, so a store written before it needs no change). Nor is
``write_lanes``: how many batches a store's ``apply`` commits at once (an int; absent: 1, one
batch after another); the committer then has that many batches in flight, one actor's writes
always in one of them in turn (``tether.runtime.lanes``). ``changes``
is a store's feed of other processes' writes (``ChangeFeed``: PostgreSQL's LISTEN/NOTIFY) or
None; the runtime then scans at once when told, instead of at its next poll. Polling stays
the correctness path either way: a wakeup is a hint, never a promise.

"Due", here and in ``pending``, ``scan_messages`` and ``orphaned``: ``deliver_at <= now``, or
sent without a delay (``deliver_at == created_at``): such a message is due at once even if the
reader's clock is a little behind the sender's. ``now`` arguments are the runtime's clock
(message times are written on it); only leases are judged on the store's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from tether.store.admin import OnCorrupt, StoreAdmin
from tether.store.records import (
    ActorRecord,
    ApprovalRecord,
    AuditRecord,
    Batch,
    BatchResult,
    DeadLetter,
    EffectRecord,
    MessageCursor,
    MessagePage,
    NewMessage,
    Reply,
    StoredMessage,
    Write,
)


class ImmediateWrites(Protocol):
    """The write path of a store whose writes never wait (no I/O, no thread hop): applied by
    the caller, in the caller's turn of the event loop. The committer then applies each write
    as it is submitted, in submission order, without batching (``runtime/committer.py``)."""

    def apply_sync(self, batch: Batch) -> BatchResult:
        """Exactly what ``await store.apply(batch)`` does and returns, without waiting."""
        ...

    def apply_one(self, write: Write) -> BatchResult | None:
        """Exactly what ``apply_sync`` of a batch holding ``write`` alone does and returns,
        without building the batch; or None, having changed nothing, for a write it leaves to
        ``apply_sync`` (it may take only the commonest kinds)."""
        ...


class ChangeFeed(Protocol):
    """Wakeups from the writes of other processes sharing a store (PostgreSQL's LISTEN/NOTIFY):
    a hint to look now, never a promise. What changed is read from the store as always."""

    def listen(self, wake: Callable[[], None]) -> None:
        """Call ``wake()``, in the event loop that called ``listen``, soon after another
        process (or another handle on the store) committed a write; and once after a lost
        connection to the feed is made again (notices may have been missed meanwhile)."""
        ...


class Store(StoreAdmin, Protocol):
    """Durable storage for actors, mailboxes, journals, replies, dead letters, the effects
    ledger and approvals. See the module docstring for the contracts every method keeps."""

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def immediate(self) -> ImmediateWrites | None:
        """The store's synchronous write path, or None (a store whose writes wait: SQLite's run
        on a writer thread). Read by the committer on every write: a store may withdraw it
        (None) at any time, and its writes then go through ``apply``."""
        ...

    @property
    def changes(self) -> ChangeFeed | None:
        """The store's feed of other processes' writes, or None (the runtime polls only)."""
        ...

    async def open(self) -> None:
        """Connect, and create the schema if the store is new and was opened with ``create``
        (``open_store``'s option). ``StoreOpenError`` if it cannot be opened, or does not exist
        and may not be created; ``SchemaVersionError`` if it has another schema version (it is
        never migrated silently: ``migrate``)."""
        ...

    async def close(self) -> None:
        """Release every connection; safe to call twice, or after a failed ``open``."""
        ...

    async def migrate(self, *, force: bool = False) -> tuple[int, int]:
        """Upgrade the schema to this tether's version, all or nothing, on a store that is not
        open (``tether migrate``); returns (version before, version after), equal if there was
        nothing to do ((0, 0) for a store with no schema). Refused (``StoreError``) while a
        runtime registered in the store may be alive, unless ``force``."""
        ...

    # -- the one write ------------------------------------------------------------------------

    async def apply(self, batch: Batch) -> BatchResult:
        """Apply every write of ``batch`` in one transaction, all or nothing, except fenced
        writes of a stale fence, which are skipped and reported in ``BatchResult.stale``
        (module docstring: checked inside this transaction). A batch that cannot be applied
        raises ``StoreError`` and leaves nothing of itself behind.

        Spawns keep an existing record (``spawned`` reports the one stored). A lease
        acquisition succeeds (``leases[actor] = new fence``) when the actor is active and its
        lease is free, expired on the store's clock, already the acquirer's, or held by an
        owner that is not a registered runtime; the new expiry is the store's now + ttl.
        Messages with a dedup key already stored for their actor are not stored
        (``duplicates``)."""
        ...

    # -- mail ---------------------------------------------------------------------------------

    async def pending(
        self, actor_id: str, now: float, limit: int, *, on_corrupt: OnCorrupt | None = None
    ) -> list[StoredMessage]:
        """Up to ``limit`` due messages of one actor, in mailbox order."""
        ...

    async def scan_messages(
        self,
        cursor: MessageCursor | None,
        now: float,
        limit: int,
        *,
        skip_prefix: str | None = None,
        runtime_id: str | None = None,
    ) -> MessagePage:
        """The next page of messages that became ready since ``cursor`` (None: since the store
        began), at most ``limit``, and the cursor to pass next.

        Contract (module docstring): along a chain of calls, every committed message is
        returned once when it is ready, and once more each time it is made ready again, even
        if a transaction that wrote it began before, and committed after, a page that went
        past it. A message sent without a delay is ready once committed; one that is not yet
        due when the scan reaches it need not be returned later: ``due_between`` finds it when
        it comes due. Within a page, messages are in the order they became ready. ``more``:
        the page stopped at ``limit``; call again at once.

        Messages whose id starts with ``skip_prefix`` and that were never restored are left
        out (and do not count towards ``limit``): the runtime that sent them routed each one
        itself once it was stored. With ``runtime_id`` (the scanning runtime), so are the
        messages of actors whose lease a registered runtime other than ``runtime_id`` holds,
        unexpired on the store's clock, judged in the read that finds the rows (the actors
        ``orphaned`` does not name, less the scanner's own); the cursor may move past them
        (they need not be returned to this chain later). Their holder delivers them: its own
        scan reads the same rows with the actor still its own or free, or a later owner reads
        the actor's whole mailbox when it takes the lease (after ``orphaned`` names it, once a
        dead holder's lease expired). A cursor not made by this store raises ``StoreError``."""
        ...

    async def due_between(
        self, after: float, upto: float, *, runtime_id: str | None = None
    ) -> list[str]:
        """Ids of actors with a delayed message (``deliver_at > created_at``) whose
        ``deliver_at`` is in ``(after, upto]``. With ``scan_messages`` this finds every
        delayed message: one the cursor went past before it was due has ``deliver_at`` after
        that scan's ``now``, so a later window holds it. ``runtime_id`` leaves out the actors
        another live runtime holds, as ``scan_messages`` does."""
        ...

    async def orphaned(self, now: float, limit: int) -> list[str]:
        """Ids of actors with messages due at ``now`` whose lease is free, expired on the
        store's clock, or held by an owner that is not a registered runtime."""
        ...

    async def get_replies(self, msg_ids: list[str]) -> list[Reply]:
        """The stored replies among ``msg_ids``."""
        ...

    async def find_dedup(self, actor_id: str, dedup_key: str) -> str | None:
        """The msg id stored first under ``(actor_id, dedup_key)``, or None."""
        ...

    async def watchers(self, actor_id: str) -> list[str]:
        """Ids of the actors watching ``actor_id``, sorted."""
        ...

    # -- leases and runtimes ------------------------------------------------------------------

    async def renew_leases(self, owner: str, ttl: float) -> None:
        """Set the expiry of every lease ``owner`` holds to the store's now + ``ttl``."""
        ...

    async def register_runtime(self, runtime_id: str, host: str, pid: int, started: float) -> None:
        """Record a runtime that serves the store: ``host`` is its host identity
        (``tether.store.hosts.this_host()``), stored and listed as given."""
        ...

    async def remove_runtime(self, runtime_id: str) -> None:
        """Forget a runtime and free every lease it holds (its fences stay)."""
        ...

    # -- dead letters and retention -----------------------------------------------------------

    async def reuse_id(self, record: ActorRecord, *, dependents: Sequence[str] = ()) -> list[str]:
        """Give the id of a stopped (or failed) actor to ``record``, a new actor, in one
        transaction: erase what its predecessor left that the newcomer would otherwise take
        for its own (journal, snapshot, effects ledger, approvals, dedup keys, the watches it
        held; a message still in its mailbox goes to dead letters, answering its asker),
        then store ``record`` in its place, active, with the predecessor's fence (fences only
        grow, I8). The predecessor's dead letters stay: they are records (I7).

        ``dependents`` are actors whose state is the predecessor's too (a session's guards):
        the same rows of theirs are erased, and their fence grows and their lease is freed, so
        an instance still holding their old state commits nothing more; their records stay.

        Returns what stands in the way, one sentence each, and changes nothing, when there is
        no such actor, it is not stopped or failed, or its ledger holds an effect whose outcome
        is not recorded (``pending``, ``retry`` or ``quarantined``): erasing it would lose
        the only trace of a call that may have happened (``tether.store.reuse`` words it the
        same for every backend). ``[]`` when done."""
        ...

    async def retry_dead_letter(
        self, msg_id: str, now: float, *, audit: AuditRecord | None = None
    ) -> DeadLetter | None:
        """Move a dead letter back to its actor's mailbox, due at ``now``, with a fresh attempt
        count (and ``parks`` 1: its past in the ledger is read again); it is ready again for
        ``scan_messages``. The dead letter, or None if there is none (nothing written).
        ``audit``: appended to the audit log in the same transaction as the move."""
        ...

    async def discard_dead_letter(self, msg_id: str, *, audit: AuditRecord | None = None) -> bool:
        """Delete a dead letter; False if there was none (nothing written). ``audit``:
        appended to the audit log in the same transaction as the deletion."""
        ...

    async def purge(self, before: float) -> int:
        """Delete dedup keys and replies older than ``before``; return how many rows went."""
        ...

    # -- the effects ledger (I4) and approvals (I9) -------------------------------------------

    async def effects_of(self, actor_id: str, msg_id: str) -> list[EffectRecord]:
        """The ledger rows of one step, by effect index."""
        ...

    async def recent_effects(
        self,
        actor_id: str,
        limit: int,
        *,
        after: float | None = None,
        exclude_tools: Collection[str] = (),
    ) -> list[EffectRecord]:
        """The newest ``limit`` ledger rows of ``actor_id`` created strictly after ``after``
        whose tool is not in ``exclude_tools``, returned oldest first.

        The same rows, in the same order, as the tail of ``find_effects(actor_id=...)`` after
        those filters: ordered by ``(created_at, msg_id, idx)``. Both filters apply before the
        limit, and at most ``limit`` rows are decoded, however long the actor's ledger: this is
        how a loop guard rebuilds its recent calls. ``limit`` must be >= 0 (``ValueError``)."""
        ...

    async def resolve_effect(
        self, key: str, record: EffectRecord, now: float, *, audit: AuditRecord | None = None
    ) -> EffectRecord | None:
        """Replace the quarantined row ``key`` with ``record`` and make its parked message due
        at ``now`` (ready again for ``scan_messages``), in one transaction, with ``audit``
        appended to the audit log. None if ``key`` is not quarantined (any more): then
        nothing is written."""
        ...

    async def unpark(self, msg_id: str, now: float) -> bool:
        """Make a parked message due at ``now``: ready again for ``scan_messages``, whoever
        parked it. False if it is not parked (not in the mailbox, or due by ``now``)."""
        ...

    async def update_approval(
        self,
        record: ApprovalRecord,
        expected_version: int,
        *,
        audit: AuditRecord | None = None,
        notices: Sequence[NewMessage] = (),
    ) -> bool:
        """Store ``record`` if the stored one still has ``expected_version``; when ``record`` is
        no longer pending, make its parked message due at ``record.decided_at`` (ready again for
        ``scan_messages``). In the same transaction: ``audit`` is appended to the audit log and
        ``notices`` are stored as messages (those whose dedup key is taken, not). False if
        someone else changed it first: then nothing at all is written."""
        ...

    async def append_audit(self, record: AuditRecord) -> int:
        """Append a row to the audit log on its own (an attempt that was refused, so changed
        nothing else); the store assigns its ``seq``, returned: above every earlier row's."""
        ...

    async def purge_receipts(self, before: float) -> int:
        """Delete finished ledger rows (done, failed, aborted) last touched before ``before``
        whose message is no longer in the mailbox; return how many went."""
        ...
