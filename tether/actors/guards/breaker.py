"""The pure core of a circuit breaker: journal events, a fold over them, and its decisions.

A breaker guards one dependency (a tool, an API, a database). It is event-sourced so that an
actor can wrap it: the decisions :meth:`BreakerCore.admit` and :meth:`BreakerCore.record` take
the time as an argument (``now``, seconds since the epoch from the runtime's injectable clock)
and return the events to journal; :meth:`BreakerCore.apply` folds an event into a
:class:`BreakerState`. No I/O, no clock reads, no asyncio: the same journal always folds to the
same state, so after a crash an open breaker is still open until the same absolute time.

States (N = ``half_open_probes``, 1 by default)::

    closed --(threshold or rate reached)--> open --(open time over, a caller)--> half_open
    half_open --(N probes succeeded)--> closed        (window and trip count reset)
    half_open --(a probe fails or is slow)--> open    (open for longer: growth per trip)
    half_open --(probe cancelled or ignored)--> half_open, its permit free at once
    half_open --(all N permits out, time over)--> half_open, the hung probes re-armed
    any --(reset by an operator)--> closed            (window and trip count reset)

Choices made where the libraries disagree (see ``resilience-hitl-anchors.md`` §0 and §1, and
``docs/guards.md`` for the cases ported from resilience4j's and pybreaker's suites):

* **N probes per open period, one by default** (Polly v8 and Hystrix: one; resilience4j
  ``permittedNumberOfCallsInHalfOpenState``: N). Entering half-open admits one call and sets
  ``until = now + open duration``; the next N - 1 callers are probes too (each pushes
  ``until`` to its own start + open duration); every other caller is refused until a probe
  frees its permit or ``until`` passes, when the next caller re-arms the hung probes: it
  becomes a probe in their place, and their late answers are ignored (stale). Probes that
  already succeeded still count. A hung probe cannot wedge the breaker.
* **Every probe must succeed** (pybreaker ``success_threshold``): the first failed (or, with
  slow calls tracked, slow) probe opens the breaker again at once; resilience4j instead judges
  the probes' failure and slow-call rates, against the closed-state limits, once
  ``min(minimumNumberOfCalls, N)`` of them have answered.
* **Cancelled and ignored calls count as neither** (resilience4j ``releasePermission`` and
  ``ignoreExceptions``): they leave the window alone, and a cancelled or ignored probe frees
  its permit so that the next caller probes at once.
* **Stale answers are ignored**: every transition bumps ``generation``; an answer for a call
  admitted before the last transition (a closed-state call that finishes after the trip, Polly
  #217; a probe that was re-armed) changes nothing.
* **Exceptions that are not recorded count as success** (resilience4j ``recordExceptions``): the
  dependency answered; the error was the caller's (a bad argument). ``ignore`` wins over
  ``record_on``.
* **Growth**: the n-th consecutive trip stays open ``open_duration * open_multiplier**(n-1)``
  seconds, capped; a close resets n (resilience4j ``waitIntervalFunctionInOpenState``, Polly
  ``BreakDurationGenerator``).

Per-call outcomes are events too (:class:`BreakerCallRecorded`): that is how the window counts
survive a restart. They are skipped when they cannot change any decision, now or later (a
success into a count window already full of successes; any success into a time window judged
by failure count alone), so a healthy breaker's journal stays short.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal, TypeAlias, assert_never

import msgspec

from tether.actors.guards.breaker_policy import KINDS as KINDS
from tether.actors.guards.breaker_policy import OUTCOMES
from tether.actors.guards.breaker_policy import BreakerPolicy as BreakerPolicy
from tether.actors.guards.breaker_policy import Classifier as Classifier
from tether.actors.guards.breaker_policy import Outcome as Outcome
from tether.actors.guards.breaker_policy import WindowKind as WindowKind
from tether.actors.guards.breaker_state import BreakerCallRecorded as BreakerCallRecorded
from tether.actors.guards.breaker_state import BreakerClosed as BreakerClosed
from tether.actors.guards.breaker_state import BreakerEvent as BreakerEvent
from tether.actors.guards.breaker_state import BreakerHalfOpened as BreakerHalfOpened
from tether.actors.guards.breaker_state import BreakerOpened as BreakerOpened
from tether.actors.guards.breaker_state import BreakerProbeAdmitted as BreakerProbeAdmitted
from tether.actors.guards.breaker_state import BreakerProbePassed as BreakerProbePassed
from tether.actors.guards.breaker_state import BreakerProbeReleased as BreakerProbeReleased
from tether.actors.guards.breaker_state import BreakerReset as BreakerReset
from tether.actors.guards.breaker_state import BreakerState as BreakerState
from tether.actors.guards.breaker_state import CallSample as CallSample
from tether.actors.guards.breaker_state import Status as Status
from tether.actors.guards.breaker_state import WindowCounts as WindowCounts

# -- answers -----------------------------------------------------------------------------------


class CallToken(msgspec.Struct, frozen=True, kw_only=True):
    """Handed out with an admission; give it back to :meth:`BreakerCore.record`."""

    generation: int
    probe: bool


class Admitted(msgspec.Struct, frozen=True, kw_only=True):
    """The call may go. ``probe``: it is one of the half-open trial calls."""

    token: CallToken

    @property
    def probe(self) -> bool:
        return self.token.probe


class Refused(msgspec.Struct, frozen=True, kw_only=True):
    """The call may not go. Tool-independent facts; the caller adds the tool's name.

    Attributes:
        retry_at: the earliest time (epoch seconds) a call may be admitted.
        reason: why the breaker opened, e.g. ``"3 of the last 4 calls failed"``.
        status: ``open``, or ``half_open`` while every probe permit is out.
        probes: how many trial calls the breaker lets through when half-open.
    """

    retry_at: float
    reason: str
    status: Literal["open", "half_open"]
    probes: int = 1

    def describe(self, tool: str, now: float) -> str:
        """A sentence for the model: what is unavailable, why, and for how long."""
        wait = max(0.0, self.retry_at - now)
        if self.status == "half_open":
            checking = (
                "a single trial call is" if self.probes == 1 else f"{self.probes} trial calls are"
            )
            what = f"{checking} checking whether it recovered (it opened because {self.reason})"
        else:
            what = f"its circuit breaker is open because {self.reason}"
        return (
            f"The tool {tool!r} is unavailable: {what}. Do not call it again for "
            f"{math.ceil(wait):d} s; use another tool or report the outage."
        )


Admission: TypeAlias = Admitted | Refused


# -- the core ----------------------------------------------------------------------------------


class BreakerCore:
    """A breaker's decisions over its current state.

    ``state`` is the fold of every event this core returned (and of those it was rebuilt from):
    ``admit`` and ``record`` apply their events before returning them. An actor wrapper can
    therefore build a throwaway core from its own state per message, persist the returned
    events, and use :meth:`apply` as its ``apply``; both folds agree.
    """

    __slots__ = ("policy", "state")

    def __init__(self, policy: BreakerPolicy | None = None, state: BreakerState | None = None):
        self.policy = policy if policy is not None else BreakerPolicy()
        self.state = state if state is not None else BreakerState()

    @classmethod
    def fold(
        cls,
        policy: BreakerPolicy,
        events: Iterable[BreakerEvent],
        state: BreakerState | None = None,
    ) -> BreakerCore:
        """A core whose state is ``events`` folded over ``state`` (rehydration; no side effects)."""
        core = cls(policy, state)
        for event in events:
            core.state = core.apply(core.state, event)
        return core

    # -- the fold ------------------------------------------------------------------------------

    def apply(self, state: BreakerState, event: BreakerEvent) -> BreakerState:
        """The state after ``event``. Pure: reads only the policy's window bounds."""
        if isinstance(event, BreakerCallRecorded):
            sample = CallSample(at=event.at, failed=event.failed, slow=event.slow)
            window = self._prune((*state.window, sample), event.at)
            return msgspec.structs.replace(state, window=window)
        if isinstance(event, BreakerOpened):
            return BreakerState(
                status="open",
                generation=state.generation + 1,
                trips=event.trips,
                opened_at=event.at,
                until=event.until,
                reason=event.reason,
            )
        if isinstance(event, BreakerHalfOpened):
            # From open: the first probe. From half-open: a re-arm; the probes that succeeded
            # still count, those running are stale (new generation) and give their permits up.
            passed = state.probes_passed if state.status == "half_open" else 0
            return msgspec.structs.replace(
                state,
                status="half_open",
                generation=state.generation + 1,
                until=event.until,
                probes_admitted=passed + 1,
                probes_passed=passed,
            )
        if isinstance(event, BreakerProbeAdmitted):
            return msgspec.structs.replace(
                state, probes_admitted=state.probes_admitted + 1, until=event.until
            )
        if isinstance(event, BreakerProbePassed):
            return msgspec.structs.replace(state, probes_passed=state.probes_passed + 1)
        if isinstance(event, BreakerProbeReleased):
            # No new generation: the other probes still running still count. (A journal of
            # the one-probe breaker also re-armed here; the next caller probing at once is
            # what both folds decide.)
            return msgspec.structs.replace(state, probes_admitted=max(0, state.probes_admitted - 1))
        if isinstance(event, BreakerClosed | BreakerReset):
            return BreakerState(generation=state.generation + 1)
        assert_never(event)

    def _prune(self, window: tuple[CallSample, ...], now: float) -> tuple[CallSample, ...]:
        if self.policy.window == "count":
            return window[-int(self.policy.window_size) :]
        horizon = now - self.policy.window_size
        return tuple(s for s in window if s.at > horizon)

    # -- decisions -----------------------------------------------------------------------------

    def admit(self, now: float) -> tuple[Admission, list[BreakerEvent]]:
        """May a call go now? Returns the answer and the events to journal.

        Closed: always (no events). Half-open with a probe permit free: this caller is one more
        probe (``BreakerProbeAdmitted``). Otherwise, before ``until``: refused. At or after
        ``until``: this caller becomes a probe (``BreakerHalfOpened``): the first of the open
        period, or, every permit being out, in place of the probes still running, which are
        re-armed (their answers will be stale). A probe may run for an open duration before
        that.
        """
        state = self.state
        if state.status == "closed":
            return Admitted(token=CallToken(generation=state.generation, probe=False)), []
        probes = self.policy.half_open_probes
        run_for = self.policy.open_duration_for(state.trips)
        events: list[BreakerEvent]
        if state.status == "half_open" and state.probes_admitted < probes:
            events = [BreakerProbeAdmitted(at=now, until=max(state.until, now + run_for))]
        elif now < state.until:
            refusal = Refused(
                retry_at=state.until, reason=state.reason, status=state.status, probes=probes
            )
            return refusal, []
        else:
            events = [BreakerHalfOpened(at=now, until=now + run_for)]
        self._emit(events)
        return Admitted(token=CallToken(generation=self.state.generation, probe=True)), events

    def record(
        self, token: CallToken, outcome: Outcome, *, duration: float, now: float
    ) -> list[BreakerEvent]:
        """Record how an admitted call ended; returns the events to journal (maybe none).

        ``duration`` is the call's own run time (for slow-call tracking); ``now`` is when it
        ended. Use :meth:`BreakerPolicy.classify` to turn an exception into an outcome.
        """
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}, not {outcome!r}")
        state = self.state
        if token.generation != state.generation:
            return []  # admitted before the last transition: stale
        policy = self.policy
        slow = policy.is_slow(duration)
        events: list[BreakerEvent]
        if token.probe:
            if state.status != "half_open":  # pragma: no cover - generation guards this
                return []
            if outcome in ("ignored", "cancelled"):
                events = [BreakerProbeReleased(at=now, outcome=outcome)]
            elif outcome == "failure" or (slow and policy.slow_call_rate is not None):
                events = [self._opened(now, state.trips + 1, self._probe_failed(outcome, duration))]
            elif state.probes_passed + 1 >= policy.half_open_probes:
                events = [BreakerClosed(at=now)]
            else:
                events = [BreakerProbePassed(at=now)]
        else:
            if state.status != "closed":  # pragma: no cover - generation guards this
                return []
            if outcome in ("ignored", "cancelled"):
                return []
            failed = outcome == "failure"
            if not (failed or slow) and not self._success_matters():
                return []
            recorded = BreakerCallRecorded(at=now, failed=failed, slow=slow)
            # Every recorded call is judged, a success too: it may be the call that brings
            # the window to ``minimum_calls`` with the rate already over the limit (5 calls,
            # 3 failed: 60 %), as resilience4j judges each call its window records. Applied
            # once: the fold prunes the window as of ``now``, which is what is judged.
            self.state = self.apply(state, recorded)
            reason = self._trip_reason(self.state.window)
            if reason is None:
                return [recorded]
            events = [self._opened(now, 1, reason)]
            self._emit(events)
            return [recorded, *events]
        self._emit(events)
        return events

    def reset(self, now: float, *, by: str) -> list[BreakerEvent]:
        """A person closes the breaker (resilience4j ``reset()``, pybreaker ``close()``): closed,
        its window and trip count forgotten, whatever its state. Calls still running were
        admitted before the reset: their answers are stale. Returns the event to journal."""
        events: list[BreakerEvent] = [BreakerReset(at=now, by=by)]
        self._emit(events)
        return events

    # -- queries -------------------------------------------------------------------------------

    def remaining_open(self, now: float) -> float:
        """Seconds before the next caller may be admitted (0 when closed, due, or half-open
        with a probe permit free)."""
        return self.state.remaining_open(now, self.policy.half_open_probes)

    def counts(self, now: float) -> WindowCounts:
        """The window's counts as of ``now`` (closed state; zeros otherwise)."""
        window = self._live(self.state.window, now)
        return WindowCounts(
            calls=len(window),
            failures=sum(s.failed for s in window),
            slow=sum(s.slow for s in window),
        )

    # -- internals -----------------------------------------------------------------------------

    def _emit(self, events: list[BreakerEvent]) -> None:
        for event in events:
            self.state = self.apply(self.state, event)

    def _probe_failed(self, outcome: Outcome, duration: float) -> str:
        """Why a probe opened the breaker again, for refusals."""
        probes = self.policy.half_open_probes
        notes = [] if outcome == "failure" else [f"slow above {self.policy.slow_call_duration:g} s"]
        if probes > 1:
            notes.append(f"{self.state.probes_passed} of {probes} had succeeded")
        what = "the trial call" if probes == 1 else "a trial call"
        why = f"{what} failed" if outcome == "failure" else f"{what} took {duration:g} s"
        return f"{why} ({'; '.join(notes)})" if notes else why

    def _opened(self, now: float, trips: int, reason: str) -> BreakerOpened:
        until = now + self.policy.open_duration_for(trips)
        return BreakerOpened(at=now, until=until, reason=reason, trips=trips)

    def _live(self, window: tuple[CallSample, ...], now: float) -> tuple[CallSample, ...]:
        if self.policy.window == "count":
            return window
        return self._prune(window, now)

    def _success_matters(self) -> bool:
        """Whether recording a clean success can change a decision, now or later (a success
        that is not recorded is not judged either: it could not trip).

        Count window: only if the window is not yet full, or still holds a failure or slow
        call that the success would push out. Time window: only if rates are judged (a
        success is in their denominator); the failure threshold ignores successes.
        """
        policy = self.policy
        if policy.window == "time":
            return policy.failure_rate is not None or policy.slow_call_rate is not None
        window = self.state.window
        return len(window) < policy.window_size or any(s.failed or s.slow for s in window)

    def _trip_reason(self, window: tuple[CallSample, ...]) -> str | None:
        """Why ``window`` (pruned as of the call just recorded) trips the breaker, or None."""
        policy = self.policy
        calls = len(window)
        failures = slow = 0
        for sample in window:  # one pass: a time window may hold thousands of calls
            failures += sample.failed
            slow += sample.slow
        span = (
            f"the last {calls} calls"
            if policy.window == "count"
            else f"{calls} calls in the last {policy.window_size:g} s"
        )
        if policy.failure_threshold is not None and failures >= policy.failure_threshold:
            return f"{failures} of {span} failed"
        minimum = policy.minimum_calls
        if policy.window == "count":
            minimum = min(minimum, int(policy.window_size))
        if calls < minimum:
            return None
        if policy.failure_rate is not None and failures / calls >= policy.failure_rate:
            return (
                f"{failures} of {span} failed ({failures / calls:.0%}, "
                f"limit {policy.failure_rate:.0%})"
            )
        if policy.slow_call_rate is not None and slow / calls >= policy.slow_call_rate:
            return (
                f"{slow} of {span} took longer than {policy.slow_call_duration:g} s "
                f"({slow / calls:.0%}, limit {policy.slow_call_rate:.0%})"
            )
        return None
