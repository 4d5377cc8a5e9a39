"""What a batch writes once its fences are checked, in the order every SQL backend writes it.

A ``Batch`` holds writes by kind; several kinds write the same tables (a step's outbox, a
park's approval notices and a dead letter's notice are all messages; a step may claim the
next message and stop its actor). ``plan`` gathers them once, leaving out the fenced writes
of stale actors (I8), so that the SQLite and PostgreSQL stores apply a batch alike:

    fences → spawns → revives → watches → releases → acquires → messages (sends, outboxes,
    notices) → steps (journal, snapshots, replies, acks) → claims → failures (and dead
    letters) → effects (and the rows settled with a step) → parks → stops

Messages go before steps (a step's reply reads its message's row before the ack deletes it;
an outbox message to an actor stopping in the same batch is dead-lettered with its mail),
effects before parks (a park's effect row explains why it waits), stops last.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeVar

from tether.store.records import (
    AttemptFailed,
    Batch,
    EffectRecord,
    LeaseRelease,
    NewMessage,
    Park,
    StepCommit,
    StopActor,
)

W = TypeVar("W", bound=Any)


def live(writes: list[W], stale: set[str]) -> list[W]:
    """``writes`` of actors whose fence held."""
    return [w for w in writes if w.actor_id not in stale] if stale else writes


class BatchPlan(NamedTuple):
    """The writes of a batch by table, in the order they are applied (module docstring)."""

    releases: list[LeaseRelease]
    messages: list[NewMessage]
    steps: list[StepCommit]
    claims: list[str]  # msg ids, each counted once per claim
    failures: list[AttemptFailed]
    effects: list[EffectRecord]
    parks: list[Park]
    stops: list[StopActor]


def plan(b: Batch, stale: set[str]) -> BatchPlan:
    """The writes of ``b`` once ``stale`` actors' fenced writes are left out."""
    steps = live(b.steps, stale)
    parks = live(b.parks, stale)
    messages = list(b.messages)
    for s in steps:
        messages.extend(s.outbox)
    for p in parks:  # a new approval request's notices, stored with its park
        messages.extend(p.notices)
    # A dead letter's notice (tether.DeadLettered), stored with the move, by a live owner only.
    messages.extend(
        f.notice
        for f in b.failures
        if f.notice is not None and f.dead_letter_reason is not None and f.actor_id not in stale
    )
    claims = [c.msg_id for c in live(b.claims, stale)]
    claims.extend(s.claim_next for s in steps if s.claim_next is not None)
    effects = [e.record for e in live(b.effects, stale)]
    for s in steps:
        if s.effects:  # a retry its step went on without, settled with the step
            effects.extend(s.effects)
    effects.extend(p.effect for p in parks if p.effect is not None)
    stops = [s.stop for s in steps if s.stop is not None] + list(b.stops)
    return BatchPlan(
        releases=live(b.releases, stale),
        messages=messages,
        steps=steps,
        claims=claims,
        failures=live(b.failures, stale),
        effects=effects,
        parks=parks,
        stops=stops,
    )
