"""The ``Store`` protocol and the records that cross it.

Nothing outside ``tether.runtime`` touches SQL. The runtime talks to a store in two ways:

* reads (``get_actor``, ``load_journal``, ``pending`` …), each its own snapshot;
* ``apply(batch)``: one atomic transaction holding many actors' writes. The group committer
  (``tether.runtime.committer``) builds batches; a store only has to apply one all-or-nothing.

Fencing (I8) is enforced inside ``apply``: every write that carries a fence is checked against
the actor's current fence in the same transaction, and a stale one is rejected on its own
without touching the rest of the batch.

Every implementation must pass ``tests/runtime/test_store_conformance.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

if TYPE_CHECKING:
    from tether.errors import CorruptRecordError

SCHEMA_VERSION = 3

#: ``deliver_at`` of a parked message: later than any clock, so no scan finds it due.
PARKED = 9.0e18


class ActorRecord(msgspec.Struct, frozen=True):
    """A row of the actor registry."""

    actor_id: str
    class_path: str
    init: bytes
    parent_id: str | None
    status: str  # "active" (passivated or not) | "stopped" | "failed"
    stop_reason: str | None
    fence: int
    lease_owner: str | None
    lease_expires: float
    created_at: float


# gc=False on the records a message makes on its way (StoredMessage, NewMessage, StepCommit,
# Snapshot, LateReply, Claim, EffectRecord, EffectWrite): they hold only data (strings, bytes,
# numbers, decoded messages and events, lists of other such records) and can never be part of
# a reference cycle. Left to the cycle collector, each one lives until its commit, long enough
# to be walked by young collections and promoted, and promotions trigger full collections.


class StoredMessage(msgspec.Struct, gc=False):
    """A mailbox row, as delivered to an actor."""

    msg_id: str
    actor_id: str
    type: str
    payload: bytes
    deliver_at: float
    attempts: int
    wants_reply: bool
    errors: Sequence[str] = ()  # the error of each failed attempt, oldest first
    seq: int = 0
    local: Any = None  # an in-memory system message (never stored), already decoded
    # the message as its receiver decodes it, when the sender in this process already did
    # (sends are checked by decoding them): saves decoding the payload again on delivery
    decoded: Any = None
    # times this message was set aside: parked (waiting on an effect or a person) or
    # dead-lettered and retried. Nonzero: its step may have ledger rows to replay.
    parks: int = 0


# gc=False: an int and bytes can form no cycle, and recovery makes one per event; left to the
# cycle collector, 100,000 of them trigger collections that walk the whole heap.
class JournalRow(msgspec.Struct, frozen=True, array_like=True, gc=False):
    seq: int
    payload: bytes


class Snapshot(msgspec.Struct, frozen=True, gc=False):
    seq: int
    state: bytes


class Reply(msgspec.Struct, frozen=True):
    """The stored answer to an ask: the handler's return value, or why there is none."""

    msg_id: str
    ok: bool
    payload: bytes  # encoded return value if ok, else the encoded error history (list[str])


class DeadLetter(msgspec.Struct, frozen=True):
    msg_id: str
    actor_id: str
    type: str
    payload: bytes
    attempts: int
    errors: list[str]
    reason: str
    created_at: float


# -- the writes a batch can hold ---------------------------------------------------------------


class NewMessage(msgspec.Struct, gc=False):
    msg_id: str
    actor_id: str
    type: str
    payload: bytes
    deliver_at: float
    created_at: float
    dedup_key: str | None = None
    wants_reply: bool = False
    # Delivery attempts already counted: 1 when the message is sent to an idle actor active in
    # the sending process, whose first attempt is then counted by the insert itself (I7)
    # instead of by a separate claim commit.
    attempts: int = 0
    # The message as the receiver decodes ``payload`` (the send's check did): in memory only,
    # handed to the receiver's cell with the message. Never stored.
    decoded: Any = None


class Spawn(msgspec.Struct):
    record: ActorRecord


class LeaseAcquire(msgspec.Struct):
    """Take the actor's lease if it is free, expired, ours, or held by a runtime known dead."""

    actor_id: str
    owner: str
    expires: float
    now: float


class LeaseRelease(msgspec.Struct):
    actor_id: str
    fence: int


class StopActor(msgspec.Struct):
    """Mark the actor stopped (or failed) for good. Its pending messages go to dead letters with
    the reason, and each watcher gets ``notice`` (an encoded ``Terminated``) in its mailbox."""

    actor_id: str
    reason: str
    now: float
    notice: bytes
    status: str = "stopped"  # "stopped" | "failed"


class Revive(msgspec.Struct):
    """Make a stopped actor active again (a supervisor restarting a permanent child)."""

    actor_id: str


class Watch(msgspec.Struct):
    """``watcher`` gets a ``Terminated`` notice when ``watched`` stops for good."""

    watcher: str
    watched: str


class LateReply(msgspec.Struct, frozen=True, gc=False):
    """An answer to an ask made by an earlier message (a task that took several steps)."""

    msg_id: str
    payload: bytes
    at: float


class StepCommit(msgspec.Struct, gc=False):
    """One processed message (I2): its events, outbox, reply and ack, plus the next claim."""

    actor_id: str
    fence: int
    msg_id: str
    events: Sequence[JournalRow]
    outbox: Sequence[NewMessage]
    reply: bytes | None = None
    snapshot: Snapshot | None = None
    claim_next: str | None = None
    stop: StopActor | None = None  # the actor stopped itself in this step
    late_replies: Sequence[LateReply] = ()


class Claim(msgspec.Struct, gc=False):
    """Count a delivery attempt before the handler runs, so a process-killing message is counted."""

    actor_id: str
    fence: int
    msg_id: str


class AttemptFailed(msgspec.Struct):
    """A handler raised: record the error; at ``max_attempts`` move the message to dead letters."""

    actor_id: str
    fence: int
    msg_id: str
    errors: list[str]
    dead_letter_reason: str | None = None  # set: move to dead letters with this reason
    now: float = 0.0
    claim_again: bool = False  # also count the attempt of the redelivery that follows


class EffectRecord(msgspec.Struct, gc=False):
    """A row of the effects ledger (I4): one effect of one step, from intent to receipt.

    ``status`` is one of

    * ``pending``: the intent is committed, no receipt yet (the call may have happened);
    * ``done`` / ``failed``: the receipt; ``result`` or ``error`` is the outcome, replayed as is;
    * ``quarantined``: held for a person (``reason`` says why); the step waits;
    * ``retry``: a person said to call again (with the same key);
    * ``aborted``: a person said not to; the step gets ``EffectAborted``.
    """

    actor_id: str
    msg_id: str
    idx: int
    key: str
    tool: str
    input_hash: str
    args: bytes  # msgpack of the validated arguments, as builtins
    status: str
    attempts: int
    result: bytes | None = None
    error: str | None = None
    reason: str | None = None
    history: list[str] = msgspec.field(default_factory=list)
    created_at: float = 0.0
    updated_at: float = 0.0


EFFECT_STATUSES = ("pending", "done", "failed", "quarantined", "retry", "aborted")


class EffectWrite(msgspec.Struct, gc=False):
    """Insert or update one ledger row, fenced like a step (a stale owner records nothing)."""

    fence: int
    record: EffectRecord

    @property
    def actor_id(self) -> str:
        return self.record.actor_id


class ApprovalDecision(msgspec.Struct, frozen=True, kw_only=True):
    """One person's decision on an approval request, as recorded."""

    kind: str  # "approve" | "reject" | "modify"
    by: str
    at: float
    reason: str | None = None
    args: bytes | None = None  # "modify": msgpack of the new arguments


class ApprovalRecord(msgspec.Struct, kw_only=True):
    """An approval request (I9), from the moment a call is held until it is decided.

    The request is bound to ``fingerprint`` (tool + canonical input): what is approved is what
    runs. ``version`` grows with every change, so concurrent deciders never overwrite each
    other (compare-and-swap in ``Store.update_approval``).
    """

    request_id: str
    actor_id: str
    msg_id: str
    idx: int
    tool: str
    tool_path: str  # "module:qualname" of the tool, to validate modified arguments anywhere
    args: bytes  # msgpack of the requested arguments
    fingerprint: str
    reason: str  # why the call was escalated
    context: bytes  # msgpack dict: what a reviewer needs (goal, if rejected, ...)
    deadline: float
    on_timeout: str  # "reject" | "approve"
    quorum: int
    status: str = "pending"  # "pending" | "approved" | "rejected"
    decisions: list[ApprovalDecision] = msgspec.field(default_factory=list)
    approved_args: bytes | None = None  # set when approved: the arguments that will run
    approved_fingerprint: str | None = None
    version: int = 0
    created_at: float = 0.0
    decided_at: float | None = None


class Park(msgspec.Struct):
    """Set a message aside without counting its attempt: its step waits for a person (a
    quarantined effect, an approval) until ``until`` or until something unparks it. The effect
    row that explains why is written in the same transaction."""

    actor_id: str
    fence: int
    msg_id: str
    until: float = PARKED
    effect: EffectRecord | None = None
    approval: ApprovalRecord | None = None  # stored unless a request with its id exists


FencedWrite = LeaseRelease | StepCommit | Claim | AttemptFailed | EffectWrite | Park


class Batch(msgspec.Struct):
    spawns: list[Spawn] = msgspec.field(default_factory=list)
    releases: list[LeaseRelease] = msgspec.field(default_factory=list)
    acquires: list[LeaseAcquire] = msgspec.field(default_factory=list)
    messages: list[NewMessage] = msgspec.field(default_factory=list)
    steps: list[StepCommit] = msgspec.field(default_factory=list)
    claims: list[Claim] = msgspec.field(default_factory=list)
    failures: list[AttemptFailed] = msgspec.field(default_factory=list)
    stops: list[StopActor] = msgspec.field(default_factory=list)
    revives: list[Revive] = msgspec.field(default_factory=list)
    watches: list[Watch] = msgspec.field(default_factory=list)
    effects: list[EffectWrite] = msgspec.field(default_factory=list)
    parks: list[Park] = msgspec.field(default_factory=list)

    def fenced(self) -> list[FencedWrite]:
        """The writes whose fence must match the actor's current one (I8)."""
        return [
            *self.releases,
            *self.steps,
            *self.claims,
            *self.failures,
            *self.effects,
            *self.parks,
        ]


class BatchResult(msgspec.Struct):
    """Per-write outcomes of an applied batch."""

    # spawn: the record now stored under that id (the existing one if the id was taken)
    spawned: dict[str, ActorRecord] = msgspec.field(default_factory=dict)
    # lease acquisition: actor id -> new fence, or None when someone else holds it
    leases: dict[str, int | None] = msgspec.field(default_factory=dict)
    # dedup: msg_id of a message that was a duplicate -> msg_id of the one stored first
    duplicates: dict[str, str] = msgspec.field(default_factory=dict)
    # actor ids whose fenced writes in this batch were rejected as stale (I8)
    stale: set[str] = msgspec.field(default_factory=set)


class Store(Protocol):
    """Durable storage for actors, mailboxes, journals, replies and dead letters."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def apply(self, batch: Batch) -> BatchResult:
        """Apply every write of ``batch`` in one transaction, all or nothing (except stale
        fenced writes, which are skipped and reported in ``BatchResult.stale``)."""
        ...

    async def get_actor(self, actor_id: str) -> ActorRecord | None:
        """The actor's record; ``CorruptRecordError`` naming the column if its row is damaged
        (a value of the wrong type, written into the store by hand or by a disk fault)."""
        ...

    async def list_actors(
        self,
        *,
        parent_id: str | None = None,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[ActorRecord]:
        """Actors (of ``parent_id`` if given), oldest first. A damaged row raises
        ``CorruptRecordError``, unless ``on_corrupt`` is given: then it is left out and
        reported as ``on_corrupt(actor_id, error)``, like ``find_approvals``."""
        ...

    async def load_snapshot(self, actor_id: str) -> Snapshot | None: ...

    async def load_journal(self, actor_id: str, after_seq: int, limit: int) -> list[JournalRow]: ...

    async def pending(
        self,
        actor_id: str,
        now: float,
        limit: int,
        *,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[StoredMessage]:
        """Due messages of one actor, in mailbox order.

        "Due" here and in ``new_messages`` and ``orphaned``: ``deliver_at <= now``, or sent
        without a delay (``deliver_at == created_at``): such a message is due at once even if
        the reader's clock is a little behind the sender's.

        Here, in ``dead_letters``, ``find_effects`` and ``list_runtimes``: a row damaged in the
        store (a value of the wrong type) raises ``CorruptRecordError`` naming its table, key,
        column and value, unless ``on_corrupt`` is given: then it is left out and reported as
        ``on_corrupt(key, error)``. A store that keeps decoded records never calls it."""
        ...

    async def new_messages(
        self, after_seq: int, now: float, limit: int, *, skip_prefix: str | None = None
    ) -> list[tuple[int, str, str, bool]]:
        """``(seq, actor_id, msg_id, restored)`` of due messages stored after ``after_seq``.
        ``restored``: the message came back through the store (unparked, or a dead letter
        retried, ``parks > 0``), whoever sent it first. Messages whose id starts with
        ``skip_prefix`` and that were never restored are left out: the runtime that sent them
        routed each one itself once it was stored."""
        ...

    async def orphaned(self, now: float, limit: int) -> list[str]:
        """Ids of actors with due messages whose lease is free, expired or held by a dead runtime."""
        ...

    async def due_between(self, after: float, upto: float) -> list[str]:
        """Ids of actors with a delayed message (``deliver_at > created_at``) whose ``deliver_at``
        is in ``(after, upto]``. Messages sent without a delay are found by ``new_messages``."""
        ...

    async def get_replies(self, msg_ids: list[str]) -> list[Reply]: ...

    async def find_dedup(self, actor_id: str, dedup_key: str) -> str | None: ...

    async def watchers(self, actor_id: str) -> list[str]: ...

    async def renew_leases(self, owner: str, expires: float) -> None: ...

    async def register_runtime(
        self, runtime_id: str, host: str, pid: int, started: float
    ) -> None: ...

    async def list_runtimes(
        self, *, on_corrupt: Callable[[str, CorruptRecordError], None] | None = None
    ) -> list[tuple[str, str, int, float]]: ...

    async def remove_runtime(self, runtime_id: str) -> None: ...

    async def dead_letters(
        self,
        actor_id: str | None = None,
        *,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[DeadLetter]: ...

    async def dead_letter(self, msg_id: str) -> DeadLetter | None: ...

    async def retry_dead_letter(self, msg_id: str, now: float) -> DeadLetter | None:
        """Move a dead letter back to its actor's mailbox with a fresh attempt count."""
        ...

    async def discard_dead_letter(self, msg_id: str) -> bool: ...

    async def purge(self, before: float) -> int:
        """Delete dedup keys and replies older than ``before``; return how many rows went."""
        ...

    # -- the effects ledger (I4) --------------------------------------------------------------

    async def effects_of(self, actor_id: str, msg_id: str) -> list[EffectRecord]:
        """The ledger rows of one step, by effect index."""
        ...

    async def find_effects(
        self,
        *,
        actor_id: str | None = None,
        status: str | None = None,
        key: str | None = None,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[EffectRecord]:
        """Ledger rows matching every filter given, oldest first."""
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
        self, key: str, record: EffectRecord, now: float
    ) -> EffectRecord | None:
        """Replace the quarantined row ``key`` with ``record`` and make its parked message due
        at ``now``, in one transaction. None if ``key`` is not quarantined (any more)."""
        ...

    async def unpark(self, msg_id: str, now: float) -> bool:
        """Make a parked message due at ``now`` (stored after every other message, so that
        every runtime's scan sees it). False if it is not parked."""
        ...

    async def find_approvals(
        self,
        *,
        status: str | None = None,
        actor_id: str | None = None,
        request_id: str | None = None,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[ApprovalRecord]:
        """Approval requests matching every filter given, oldest first.

        A matching row that cannot be decoded raises ``CorruptRecordError`` naming its request,
        unless ``on_corrupt`` is given: then it is left out of the result and reported as
        ``on_corrupt(request_id, error)``, so that a listing still serves every other request
        (a store that keeps no encoded rows never calls it)."""
        ...

    async def update_approval(self, record: ApprovalRecord, expected_version: int) -> bool:
        """Store ``record`` if the stored one still has ``expected_version``; when ``record`` is
        no longer pending, make its parked message due now (``record.decided_at``). False if
        someone else changed it first (nothing written)."""
        ...

    async def purge_receipts(self, before: float) -> int:
        """Delete finished ledger rows (done, failed, aborted) last touched before ``before``
        whose message is no longer in the mailbox; return how many went."""
        ...
