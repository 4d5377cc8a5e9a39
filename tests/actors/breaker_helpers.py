"""Driving a breaker's pure core by hand, for the breaker tests: admit, refuse, record, trip."""

from __future__ import annotations

from tether.actors.guards.breaker import (
    Admitted,
    BreakerCore,
    BreakerEvent,
    CallToken,
    Outcome,
    Refused,
)

T0 = 1_700_000_000.0


def admitted(core: BreakerCore, now: float) -> CallToken:
    answer, _ = core.admit(now)
    assert isinstance(answer, Admitted), answer
    return answer.token


def refused(core: BreakerCore, now: float) -> Refused:
    answer, events = core.admit(now)
    assert isinstance(answer, Refused), answer
    assert events == []
    return answer


def call(
    core: BreakerCore, now: float, outcome: Outcome, duration: float = 0.1
) -> list[BreakerEvent]:
    """Admit a call at ``now`` and record its outcome at once."""
    return core.record(admitted(core, now), outcome, duration=duration, now=now)


def status(core: BreakerCore) -> str:
    """The status, read through a call so that mypy does not narrow it across decisions."""
    return core.state.status


def trip(core: BreakerCore, now: float) -> None:
    while status(core) == "closed":
        call(core, now, "failure")
