"""The rows and writes that cross the storage seam.

Everything a store hands the runtime (``ActorRecord``, ``StoredMessage``, ``JournalRow`` …)
and everything the runtime asks a store to write (``Batch`` and the twelve kinds of write it
holds) is a record of this module: plain data, no behaviour, no backend. What a store must do
with them is written in ``tether.store.protocol``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NewType

import msgspec

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
    lease_expires: float  # on the store's clock (``StoreAdmin.store_time``)
    created_at: float
    # The seq of the actor's last committed journal event (0: none), written in the same
    # transaction as every step: recovery checks that it folded every event up to it, so a
    # journal that lost rows (a damaged page) is named, never folded into a wrong state.
    head_seq: int = 0


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
    seq: int = 0  # its place in the store's mailbox order; meaningless to any other store
    local: Any = None  # an in-memory system message (never stored), already decoded
    # the message as its receiver decodes it, when the sender in this process already did
    # (sends are checked by decoding them): saves decoding the payload again on delivery
    decoded: Any = None
    # times this message was set aside: parked (waiting on an effect or a person) or
    # dead-lettered and retried. Nonzero: its step may have ledger rows to replay.
    parks: int = 0
    # The W3C trace context the message was sent in (``00-<trace id>-<span id>-<flags>``), or
    # None: its steps' spans join that trace, in whichever process and after however many
    # restarts they run (``tether.runtime.tracing``). Stored with the message, never changed.
    traceparent: str | None = None


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


class RuntimeRecord(msgspec.Struct, frozen=True):
    """A registered runtime (one process serving the store).

    ``host`` is the host identity of ``tether.store.hosts.this_host()``: it names a pid
    namespace on one boot of one kernel, so that "is process ``pid`` still alive" is only
    ever asked where that pid means the same process (a same-host shortcut, never a
    judgement on another host's runtime)."""

    runtime_id: str
    host: str
    pid: int
    started_at: float


# -- the scan for new messages ------------------------------------------------------------------

#: Where a scan of new messages stopped: an opaque token, meaningful only to the store that
#: returned it (``Store.scan_messages``). The runtime keeps it and hands it back; it never
#: compares, orders or does arithmetic on it.
MessageCursor = NewType("MessageCursor", bytes)


class ScannedMessage(msgspec.Struct, frozen=True, gc=False):
    """A message a scan found ready. ``restored``: it came back through the store (unparked,
    a dead letter retried, ``parks > 0``), whoever sent it first."""

    actor_id: str
    msg_id: str
    restored: bool


class MessagePage(msgspec.Struct, frozen=True):
    """One page of ``Store.scan_messages``: the messages found, the cursor to pass to the next
    call, and whether the store stopped at the limit (more are ready: call again at once)."""

    messages: list[ScannedMessage]
    cursor: MessageCursor
    more: bool


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
    traceparent: str | None = None  # stored with the message (``StoredMessage.traceparent``)
    # The message as the receiver decodes ``payload`` (the send's check did): in memory only,
    # handed to the receiver's cell with the message. Never stored.
    decoded: Any = None


class Spawn(msgspec.Struct):
    record: ActorRecord


class LeaseAcquire(msgspec.Struct):
    """Take the actor's lease if it is free, expired, ours, or held by a runtime known dead,
    for ``ttl`` seconds. Expiry is judged, and the new one computed, on the store's clock
    (``Store`` docstring, "Leases"): a writer never sends an absolute time."""

    actor_id: str
    owner: str
    ttl: float


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
    # Ledger rows settled with the step: a retry that the breaker refused and that the step
    # went on without, marked failed (it was never made) in the step's own transaction.
    effects: Sequence[EffectRecord] = ()


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
    # With a dead letter: a ``tether.DeadLettered`` for the actor itself, stored with the move
    # (its dedup key makes a second move's notice a duplicate).
    notice: NewMessage | None = None


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
    """One person's decision on an approval request, as recorded.

    ``authenticated``: an authentication layer established ``by`` (the console's tokens or
    its trusted proxy, or the application's own code calling ``decide``); False for a name
    the decider typed (the CLI's ``--by``). ``via``: where it came from (``console``,
    ``api``, ``cli``, ``policy``, ``app``). Records written before these fields existed
    read as authenticated decisions of the application."""

    kind: str  # "approve" | "reject" | "modify"
    by: str
    at: float
    reason: str | None = None  # a rejection's reason; an approval's or modification's comment
    args: bytes | None = None  # "modify": msgpack of the new arguments
    authenticated: bool = True
    via: str = "app"


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
    # Where the policy's webhooks post this request and its outcome (``tether.Webhook``):
    # their URLs only, never their secrets. A decision made in any process stores the
    # outcome's notices with itself (``Store.update_approval``).
    notify: list[str] = msgspec.field(default_factory=list)
    # The trace of the step that asked (W3C ``traceparent``): a decision, whoever makes it and
    # wherever, is a span in that trace (``tether.runtime.tracing.span_in_trace_of``).
    traceparent: str | None = None


class AuditRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt to decide an approval or to resolve a quarantined effect or a dead letter,
    allowed or refused: a row of the audit log.

    An allowed attempt's row is written in the same transaction as what it changed
    (``Store.update_approval``, ``resolve_effect``, ``retry_dead_letter``,
    ``discard_dead_letter``); a refused one's on its own (``Store.append_audit``).
    """

    seq: int = 0  # the store's order of the log; 0 in a write (the store assigns it)
    at: float
    identity: str  # who, as the authentication layer named them
    authenticated: bool  # False: a name the decider typed, that nothing checked (CLI --by)
    via: str  # "console" | "api" | "cli" | "policy" | "app"
    action: str  # "approve" | "reject" | "modify" | "timeout" | "effect.done" | ...
    target: str  # the approval request id, effect key or dead letter's message id
    outcome: str  # "allowed" | "refused"
    detail: str = ""  # what it left (a status, a quorum count), or why it was refused
    actor_id: str | None = None  # the session or actor it concerns
    version_before: int | None = None  # an approval's version before and after the attempt
    version_after: int | None = None
    fingerprint: str | None = None  # of the call as it stands after the attempt
    remote: str | None = None  # the client's address, as the console saw it


AUDIT_OUTCOMES = ("allowed", "refused")


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
    # Messages stored with the park, by a live owner only: the notices of a new approval
    # request (each with a dedup key, so a step parked again stores none twice).
    notices: Sequence[NewMessage] = ()


FencedWrite = LeaseRelease | StepCommit | Claim | AttemptFailed | EffectWrite | Park

#: Any one write a batch can hold.
Write = (
    Spawn
    | LeaseAcquire
    | LeaseRelease
    | NewMessage
    | StepCommit
    | Claim
    | AttemptFailed
    | StopActor
    | Revive
    | Watch
    | EffectWrite
    | Park
)


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
    # Nothing here concerns another runtime (``GroupCommitter.local``): every message is for an
    # actor active in the writing runtime, every reply for an ask waiting there. A store with a
    # ``ChangeFeed`` sends no notice for it; the others' polling, the correctness path, is
    # unchanged. Never stored.
    local: bool = False

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
