"""Write lanes: which of a store's concurrent commits a write goes through, and why that is safe.

A store that can commit several batches at once (``PostgresStore(writers=N)``: N writer
connections) says so with a ``write_lanes`` attribute (an int; absent: 1). The group
committer then keeps one queue per lane and commits each lane's batches one after another,
the lanes concurrently (``committer.py``). A write's lane is a pure function of the actor
it belongs to (``lane_key``), so:

**Invariant.** Every write of one actor goes through the same lane, and a lane commits its
batches in submission order. So the writes of one actor commit in the order they were
submitted, exactly as with one writer. Writes of two actors on different lanes may commit in
either order, or one without the other when the process dies in between.

The key of each kind of write (``tether.store.records``):

* ``StepCommit``, ``Claim``, ``AttemptFailed``, ``Park``, ``EffectWrite``, ``LeaseAcquire``,
  ``LeaseRelease``, ``StopActor``, ``Revive``: the actor they change and are fenced by (the
  stepping actor; for a guard's journal append, the guard). A step's outbox, reply, late
  replies and settled effect rows, a park's effect row, approval request and notices, a
  failure's dead letter and notice, a stop's dead letters and watchers' notices ride in the
  same transaction as the write that carries them (I2): one commit, whatever the lane.
* ``NewMessage`` sent outside a step (a tell or ask from outside, a first attempt counted at
  insert): its receiver, the actor whose mailbox, claims and steps it orders with.
* ``Spawn``: the new actor. ``Watch``: the watched actor, whose ``StopActor`` reads it.

Guards that keep state about one session (its loop guard ``<session>/loops`` and gate
``<session>/gate``) take the session's key (``home``): their journal appends are submitted
with the session's effect intents and steps, unawaited in between ("the same batch",
``effects.py``, ``LiveActor.defer``), and on one lane they stay in the same or an earlier
commit than the session's write that follows them, as with one writer. A shared guard (a
breaker, one per tool) cannot: its appends come from many sessions, and its own journal order
needs one lane. Audit of what relied on order across actors, with one writer:

* Journal ``seq`` is numbered at submission, per actor: one lane per actor keeps it dense.
* Effect intents vs guard journals: every future is awaited together (``all_settled``)
  before the call is made, so the call never runs before both committed. Only a crash in
  between can leave a session's intent committed without a breaker's event of the same
  decision (the breaker then lacks one sample or probe admission, and admits again after
  its recovery). A breaker's state is a health signal over a window, not a ledger: the
  effect's own row (I4) is what replay trusts. With one writer this could already happen
  when the breaker's append failed alone (a stale fence, a batch retried write by write).
* Acks, replies, claims: the ack of a message is in its step's transaction; a reply in the
  step that answers it; a claim on the receiver's lane, after the message's insert (the
  runtime routes a message to its receiver only once its commit settled, ``on_stored``).
* Leases, fencing: acquire, release and every fenced write of one actor share its lane; each
  transaction checks its fences as before (``writes.check_fences``). Lease renewal and a
  runtime's registration are store writes outside the committer: the store runs them alone,
  none of its batches at the same time (``PostgresStore``), as one writer did.
* Messages between actors: per sender and receiver, FIFO holds (a step's outbox is on the
  sender's lane; an outside tell or ask is awaited before the next). Two senders' messages
  were never ordered against each other by a promise (runtimes on other hosts write
  concurrently); the mailbox order is the store's, by insert (``insert_messages``).
* Dead letters, approvals, decisions, retention: in the transaction of the write that causes
  them, or store writes outside the committer, run alone as above.
* Everything else the runtime submits (spawn, stop, watch, revive, lease, claim) it awaits
  before it goes on: nothing of another actor is submitted after it unawaited.
"""

from __future__ import annotations

from tether.actors.guards.actors import GATE_SUFFIX, LOOPS_SUFFIX
from tether.store.records import Spawn, Watch, Write

_SESSION_GUARDS = (LOOPS_SUFFIX, GATE_SUFFIX)


def home(actor_id: str) -> str:
    """The actor whose lane ``actor_id``'s writes take: a session's own guards take the
    session's; every other actor its own. A pure function of the id: stable for ever."""
    if actor_id.endswith(_SESSION_GUARDS):
        return actor_id.rpartition("/")[0]
    return actor_id


def lane_key(write: Write) -> str:
    """The actor ``write`` is ordered with (module docstring)."""
    if type(write) is Spawn:
        return home(write.record.actor_id)
    if type(write) is Watch:
        return home(write.watched)
    return home(write.actor_id)  # type: ignore[union-attr]


def lane_count(store: object) -> int:
    """How many batches ``store`` can commit at once (its ``write_lanes``; 1 if it does not
    say). A value that is not a positive int is taken as 1: one lane is always safe."""
    lanes = getattr(store, "write_lanes", 1)
    return lanes if type(lanes) is int and lanes >= 1 else 1
