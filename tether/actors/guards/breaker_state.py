"""A circuit breaker's journal: its state, and the events that fold into it
(``breaker.py`` holds the decisions that emit them and the fold, ``BreakerCore``)."""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from tether.actors.messages import Event

Status: TypeAlias = Literal["closed", "open", "half_open"]


class CallSample(msgspec.Struct, frozen=True, array_like=True):
    """One recorded call in the window."""

    at: float
    failed: bool
    slow: bool


class WindowCounts(msgspec.Struct, frozen=True, kw_only=True):
    """What the window holds at a given time."""

    calls: int
    failures: int
    slow: int


class BreakerState(msgspec.Struct, frozen=True, kw_only=True):
    """A breaker's state: the fold of its events. All times are absolute (epoch seconds).

    Attributes:
        status: ``closed``, ``open`` or ``half_open``.
        generation: bumped by every transition; a call admitted in an older generation is
            stale and its answer is ignored.
        trips: consecutive trips since the last close (0 when closed).
        opened_at: when the current trip happened (``None`` when closed).
        until: open: when a probe may go; half-open: when probes still running are re-armed
            if every permit is out.
        reason: why the breaker last opened, for refusals.
        window: the recorded calls that still count (closed only; empty otherwise).
        probes_admitted: half-open: the permits out (probes running or succeeded).
        probes_passed: half-open: the probes of this open period that succeeded.

    The probe counts came with ``half_open_probes``: an older snapshot decodes with both 0 (a
    probe it had out died with the process that ran it, so the next caller probes).
    """

    status: Status = "closed"
    generation: int = 0
    trips: int = 0
    opened_at: float | None = None
    until: float = 0.0
    reason: str = ""
    window: tuple[CallSample, ...] = ()
    probes_admitted: int = 0
    probes_passed: int = 0

    def status_at(self, now: float) -> Status:
        """The status a caller meets at ``now``: an open breaker whose open time is over is
        ``half_open`` (the next caller's call is its trial), although no event has said so
        yet: the transition is journaled when that caller comes."""
        if self.status == "open" and self.until <= now:
            return "half_open"
        return self.status

    def remaining_open(self, now: float, probes: int = 1) -> float:
        """Seconds before the next caller may be admitted (0 when closed, due, or half-open
        with one of its ``probes`` permits free)."""
        if self.status == "closed":
            return 0.0
        if self.status == "half_open" and self.probes_admitted < probes:
            return 0.0
        return max(0.0, self.until - now)


class BreakerCallRecorded(Event):
    """A call admitted while closed finished with an outcome that counts."""

    at: float
    failed: bool
    slow: bool = False


class BreakerOpened(Event):
    """The breaker tripped (from closed) or a probe failed (from half-open)."""

    at: float
    until: float
    reason: str
    trips: int


class BreakerHalfOpened(Event):
    """The open time was over: a first probe was admitted; or, every permit being out past
    ``until``, the probes still running were re-armed and this one admitted in their place."""

    at: float
    until: float


class BreakerProbeAdmitted(Event):
    """One more probe in the same half-open period (a permit was free)."""

    at: float
    until: float


class BreakerProbePassed(Event):
    """A probe succeeded, and more must succeed before the breaker closes."""

    at: float


class BreakerProbeReleased(Event):
    """A probe was cancelled or raised an ignored exception: its permit is free again."""

    at: float
    outcome: str


class BreakerClosed(Event):
    """The last of the probes succeeded: the window and the trip count start again."""

    at: float


class BreakerReset(Event):
    """A person reset the breaker: closed, its window and trip count forgotten."""

    at: float
    by: str


BreakerEvent: TypeAlias = (
    BreakerCallRecorded
    | BreakerOpened
    | BreakerHalfOpened
    | BreakerProbeAdmitted
    | BreakerProbePassed
    | BreakerProbeReleased
    | BreakerClosed
    | BreakerReset
)
