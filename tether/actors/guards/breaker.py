"""The pure core of a circuit breaker: journal events, a fold over them, and two decisions.

A breaker guards one dependency (a tool, an API, a database). It is event-sourced so that an
actor can wrap it: the decisions :meth:`BreakerCore.admit` and :meth:`BreakerCore.record` take
the time as an argument (``now``, seconds since the epoch from the runtime's injectable clock)
and return the events to journal; :meth:`BreakerCore.apply` folds an event into a
:class:`BreakerState`. No I/O, no clock reads, no asyncio: the same journal always folds to the
same state, so after a crash an open breaker is still open until the same absolute time.

States::

    closed --(threshold or rate reached)--> open --(open time over, one caller)--> half_open
    half_open --(probe succeeds)--> closed            (window and trip count reset)
    half_open --(probe fails or is slow)--> open      (open for longer: growth per trip)
    half_open --(probe cancelled or ignored)--> half_open, probe released at once
    half_open --(probe still running after its time)--> half_open, probe re-armed

Choices made where the libraries disagree (see ``resilience-hitl-anchors.md`` §0 and §1):

* **One probe per open period** (Polly v8, Hystrix): entering half-open admits exactly one
  call and sets ``until = now + open duration``; every other caller is refused until the probe
  answers or ``until`` passes, when the next caller becomes the new probe. A hung probe cannot
  wedge the breaker; the hung probe's late answer is ignored (it is stale).
* **Cancelled and ignored calls count as neither** (resilience4j ``releasePermission`` and
  ``ignoreExceptions``): they leave the window alone, and a cancelled or ignored probe releases
  its slot so that the next caller probes at once.
* **Stale answers are ignored**: every transition bumps ``generation``; an answer for a call
  admitted before the last transition (a closed-state call that finishes after the trip, Polly
  #217; a probe that was re-armed) changes nothing.
* **Exceptions that are not recorded count as success** (resilience4j ``recordExceptions``): the
  dependency answered; the error was the caller's (a bad argument). ``ignore`` wins over
  ``record_on``.
* **Growth**: the n-th consecutive trip stays open ``open_duration * open_growth**(n-1)``
  seconds, capped; a close resets n (resilience4j ``waitIntervalFunctionInOpenState``, Polly
  ``BreakDurationGenerator``).

Per-call outcomes are events too (:class:`BreakerCallRecorded`): that is how the window counts
survive a restart. They are skipped when they cannot change any later decision (a success
into a count window already full of successes; any success into a time window judged by
failure count alone), so a healthy breaker's journal stays short.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Final, Literal, NoReturn, TypeAlias, TypeGuard, assert_never

import msgspec

from tether.actors.messages import Event
from tether.errors import ConfigError

Outcome: TypeAlias = Literal["success", "failure", "ignored", "cancelled"]
Status: TypeAlias = Literal["closed", "open", "half_open"]
WindowKind: TypeAlias = Literal["count", "time"]
#: Maps an exception to an outcome, or to ``None`` to fall back to ``record_on``/``ignore``.
Classifier: TypeAlias = Callable[[BaseException], Outcome | None]

_OUTCOMES: Final = ("success", "failure", "ignored", "cancelled")


# -- policy ------------------------------------------------------------------------------------


class BreakerPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """When a breaker trips, how long it stays open, and which exceptions count.

    The policy is configuration, not journal: it is never stored, so it may hold exception
    classes and a callable. Change it with ``msgspec.structs.replace`` (which re-validates).

    Args:
        failure_threshold: trip when this many failures are in the window (``None``: judge by
            rates only). With ``window="count"`` and ``window_size == failure_threshold`` this
            is "N consecutive failures" (pybreaker, purgatory).
        window: ``"count"`` (the last ``window_size`` recorded calls) or ``"time"`` (the calls
            recorded in the last ``window_size`` seconds).
        window_size: calls (a whole number) or seconds.
        failure_rate: trip when failures / calls in the window reaches this (0 < rate <= 1).
        slow_call_rate: trip when slow calls / calls reaches this (0 < rate <= 1).
        slow_call_duration: a call taking longer than this many seconds is slow.
        minimum_calls: calls the window must hold before the rates are judged (the absolute
            ``failure_threshold`` needs no minimum); capped at a count window's size, as in
            resilience4j.
        open_duration: seconds the first trip stays open; also how long a probe may run before
            another caller may probe.
        open_growth: factor applied per consecutive trip (1 = fixed duration).
        max_open_duration: the cap on a grown open duration (``None``: 10 * ``open_duration``).
        record_on: exception types that count as failures.
        ignore: exception types that count as neither success nor failure (wins over
            ``record_on``).
        classifier: consulted first; returns an outcome, or ``None`` to use the type lists.
    """

    failure_threshold: int | None = 5
    window: WindowKind = "count"
    window_size: float = 10
    failure_rate: float | None = None
    slow_call_rate: float | None = None
    slow_call_duration: float | None = None
    minimum_calls: int = 5
    open_duration: float = 60.0
    open_growth: float = 2.0
    max_open_duration: float | None = None
    record_on: tuple[type[BaseException], ...] = (Exception,)
    ignore: tuple[type[BaseException], ...] = ()
    classifier: Classifier | None = None

    def __post_init__(self) -> None:
        if self.window not in ("count", "time"):
            _bad("window", self.window, "'count' or 'time'")
        if not _positive(self.window_size):
            _bad("window_size", self.window_size, "a positive number of calls or seconds")
        if self.window == "count" and not float(self.window_size).is_integer():
            _bad("window_size", self.window_size, "a whole number of calls for a count window")
        if self.failure_threshold is not None:
            if not _whole(self.failure_threshold, 1):
                _bad("failure_threshold", self.failure_threshold, "an integer >= 1 or None")
            if self.window == "count" and self.failure_threshold > self.window_size:
                _bad(
                    "failure_threshold",
                    self.failure_threshold,
                    f"at most window_size ({self.window_size:g}), or the breaker can never trip",
                )
        for name in ("failure_rate", "slow_call_rate"):
            rate = getattr(self, name)
            if rate is not None and not (_number(rate) and 0 < rate <= 1):
                _bad(name, rate, "a fraction in (0, 1] or None")
        if (self.slow_call_rate is None) != (self.slow_call_duration is None):
            _bad(
                "slow_call_duration" if self.slow_call_rate is not None else "slow_call_rate",
                None,
                "set together with "
                + ("slow_call_rate" if self.slow_call_rate is not None else "slow_call_duration"),
            )
        if self.slow_call_duration is not None and not _positive(self.slow_call_duration):
            _bad("slow_call_duration", self.slow_call_duration, "a positive number of seconds")
        if self.failure_threshold is None and self.failure_rate is None and not self.slow_call_rate:
            _bad("failure_threshold", None, "set, or failure_rate or slow_call_rate set")
        if not _whole(self.minimum_calls, 1):
            _bad("minimum_calls", self.minimum_calls, "an integer >= 1")
        if not _positive(self.open_duration):
            _bad("open_duration", self.open_duration, "a positive number of seconds")
        if not (_number(self.open_growth) and self.open_growth >= 1):
            _bad("open_growth", self.open_growth, "a number >= 1")
        if self.max_open_duration is not None and not (
            _positive(self.max_open_duration) and self.max_open_duration >= self.open_duration
        ):
            _bad("max_open_duration", self.max_open_duration, "None or >= open_duration")
        for name in ("record_on", "ignore"):
            types = getattr(self, name)
            if not isinstance(types, tuple) or not all(
                isinstance(t, type) and issubclass(t, BaseException) for t in types
            ):
                _bad(name, types, "a tuple of exception classes")
        if self.classifier is not None and not callable(self.classifier):
            _bad("classifier", self.classifier, "a callable or None")

    @classmethod
    def for_kind(cls, kind: str) -> BreakerPolicy:
        """The defaults for a kind of dependency (see ``KINDS``); unknown kinds raise ConfigError.

        Thresholds and open durations follow the reliability guide's per-tool-type table; the
        window holds the last ``2 * threshold`` calls, so a kind trips once at least half of its
        recent calls (and at least ``threshold`` of them) failed. That approximates the guide's
        own breaker, where each success cancels one failure.
        """
        try:
            threshold, open_for = KINDS[kind]
        except KeyError:
            raise ConfigError(
                f"BreakerPolicy.for_kind: unknown kind {kind!r}; known kinds: {', '.join(KINDS)}"
            ) from None
        return cls(
            failure_threshold=threshold,
            window="count",
            window_size=2 * threshold,
            open_duration=open_for,
        )

    @property
    def open_duration_cap(self) -> float:
        """The longest a grown open period lasts."""
        if self.max_open_duration is not None:
            return self.max_open_duration
        return 10 * self.open_duration

    def open_duration_for(self, trips: int) -> float:
        """How long the ``trips``-th consecutive trip (from 1) stays open."""
        cap = self.open_duration_cap
        duration = float(self.open_duration)
        for _ in range(max(0, trips - 1)):  # a loop, not `**`: growth**trips overflows
            duration *= self.open_growth
            if duration >= cap:
                return float(cap)
        return min(duration, float(cap))

    def classify(self, exc: BaseException | None) -> Outcome:
        """The outcome of a call that returned (``None``) or raised ``exc``.

        A ``BaseException`` that is not an ``Exception`` (cancellation, ``KeyboardInterrupt``,
        ``SystemExit``) means the call was interrupted, not answered: ``"cancelled"``.
        """
        if exc is None:
            return "success"
        if not isinstance(exc, Exception):
            return "cancelled"
        if self.classifier is not None:
            decided = self.classifier(exc)
            if decided is not None:
                if decided not in _OUTCOMES:
                    raise ConfigError(
                        f"BreakerPolicy.classifier returned {decided!r}; "
                        f"expected one of {', '.join(_OUTCOMES)} or None"
                    )
                return decided
        if isinstance(exc, self.ignore):
            return "ignored"
        if isinstance(exc, self.record_on):
            return "failure"
        return "success"

    def is_slow(self, duration: float) -> bool:
        """Whether a call that took ``duration`` seconds counts as slow."""
        return self.slow_call_duration is not None and duration > self.slow_call_duration


#: Defaults by kind of dependency: (failure threshold, open duration in seconds).
KINDS: Final[dict[str, tuple[int, float]]] = {
    "external_api": (3, 30.0),  # third-party dependencies fail unpredictably
    "database": (5, 60.0),  # DB trouble usually needs someone to act
    "file_system": (10, 15.0),  # FS errors are often transient
    "model": (2, 120.0),  # rate limits need a generous recovery time
    "memory_store": (10, 10.0),  # local; fast recovery expected
}


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: object) -> bool:
    return _number(value) and value > 0


def _whole(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _bad(field: str, value: object, expected: str) -> NoReturn:
    got = "" if value is None else f", got {value!r}"
    raise ConfigError(f"BreakerPolicy.{field} must be {expected}{got}")


# -- state and events --------------------------------------------------------------------------


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
        until: open: when a probe may go; half-open: when the running probe is re-armed (the
            probe's release time once it was cancelled or ignored).
        reason: why the breaker last opened, for refusals.
        window: the recorded calls that still count (closed only; empty otherwise).
    """

    status: Status = "closed"
    generation: int = 0
    trips: int = 0
    opened_at: float | None = None
    until: float = 0.0
    reason: str = ""
    window: tuple[CallSample, ...] = ()

    def remaining_open(self, now: float) -> float:
        """Seconds before the next caller may be admitted (0 when closed or due)."""
        if self.status == "closed":
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
    """The open time was over: one probe was admitted (or a hung probe was re-armed)."""

    at: float
    until: float


class BreakerProbeReleased(Event):
    """The probe was cancelled or raised an ignored exception: the next caller probes."""

    at: float
    outcome: str


class BreakerClosed(Event):
    """A probe succeeded: the window and the trip count start again."""

    at: float


BreakerEvent: TypeAlias = (
    BreakerCallRecorded | BreakerOpened | BreakerHalfOpened | BreakerProbeReleased | BreakerClosed
)


# -- answers -----------------------------------------------------------------------------------


class CallToken(msgspec.Struct, frozen=True, kw_only=True):
    """Handed out with an admission; give it back to :meth:`BreakerCore.record`."""

    generation: int
    probe: bool


class Admitted(msgspec.Struct, frozen=True, kw_only=True):
    """The call may go. ``probe``: it is the single half-open trial call."""

    token: CallToken

    @property
    def probe(self) -> bool:
        return self.token.probe


class Refused(msgspec.Struct, frozen=True, kw_only=True):
    """The call may not go. Tool-independent facts; the caller adds the tool's name.

    Attributes:
        retry_at: the earliest time (epoch seconds) a call may be admitted.
        reason: why the breaker opened, e.g. ``"3 of the last 4 calls failed"``.
        status: ``open``, or ``half_open`` while a probe is running.
    """

    retry_at: float
    reason: str
    status: Literal["open", "half_open"]

    def describe(self, tool: str, now: float) -> str:
        """A sentence for the model: what is unavailable, why, and for how long."""
        wait = max(0.0, self.retry_at - now)
        if self.status == "half_open":
            what = f"a single trial call is checking whether it recovered (it opened because {self.reason})"
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
            return msgspec.structs.replace(
                state, status="half_open", generation=state.generation + 1, until=event.until
            )
        if isinstance(event, BreakerProbeReleased):
            return msgspec.structs.replace(
                state, status="half_open", generation=state.generation + 1, until=event.at
            )
        if isinstance(event, BreakerClosed):
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

        Closed: always (no events). Open or half-open before ``until``: refused. At or after
        ``until``: this caller becomes the one probe (``BreakerHalfOpened``); the probe is
        re-armed after another open duration if it has not answered by then.
        """
        state = self.state
        if state.status == "closed":
            return Admitted(token=CallToken(generation=state.generation, probe=False)), []
        if now < state.until:
            return Refused(retry_at=state.until, reason=state.reason, status=state.status), []
        events: list[BreakerEvent] = [
            BreakerHalfOpened(at=now, until=now + self.policy.open_duration_for(state.trips))
        ]
        self._emit(events)
        return Admitted(token=CallToken(generation=self.state.generation, probe=True)), events

    def record(
        self, token: CallToken, outcome: Outcome, *, duration: float, now: float
    ) -> list[BreakerEvent]:
        """Record how an admitted call ended; returns the events to journal (maybe none).

        ``duration`` is the call's own run time (for slow-call tracking); ``now`` is when it
        ended. Use :meth:`BreakerPolicy.classify` to turn an exception into an outcome.
        """
        if outcome not in _OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(_OUTCOMES)}, not {outcome!r}")
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
                why = (
                    "the trial call failed"
                    if outcome == "failure"
                    else f"the trial call took {duration:g} s (slow above {policy.slow_call_duration:g} s)"
                )
                events = [self._opened(now, state.trips + 1, why)]
            else:
                events = [BreakerClosed(at=now)]
        else:
            if state.status != "closed":  # pragma: no cover - generation guards this
                return []
            if outcome in ("ignored", "cancelled"):
                return []
            failed = outcome == "failure"
            if not (failed or slow) and not self._success_matters():
                return []
            recorded = BreakerCallRecorded(at=now, failed=failed, slow=slow)
            events = [recorded]
            if failed or slow:
                reason = self._trip_reason(self.apply(state, recorded).window, now)
                if reason is not None:
                    events.append(self._opened(now, 1, reason))
        self._emit(events)
        return events

    # -- queries -------------------------------------------------------------------------------

    def remaining_open(self, now: float) -> float:
        """Seconds before the next caller may be admitted (0 when closed or due)."""
        return self.state.remaining_open(now)

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

    def _opened(self, now: float, trips: int, reason: str) -> BreakerOpened:
        until = now + self.policy.open_duration_for(trips)
        return BreakerOpened(at=now, until=until, reason=reason, trips=trips)

    def _live(self, window: tuple[CallSample, ...], now: float) -> tuple[CallSample, ...]:
        if self.policy.window == "count":
            return window
        return self._prune(window, now)

    def _success_matters(self) -> bool:
        """Whether recording a clean success can change a later decision.

        Count window: only if the window is not yet full, or still holds a failure or slow
        call that the success would push out. Time window: only if rates are judged (a
        success is in their denominator); the failure threshold ignores successes.
        """
        policy = self.policy
        if policy.window == "time":
            return policy.failure_rate is not None or policy.slow_call_rate is not None
        window = self.state.window
        return len(window) < policy.window_size or any(s.failed or s.slow for s in window)

    def _trip_reason(self, window: tuple[CallSample, ...], now: float) -> str | None:
        policy = self.policy
        window = self._live(window, now)
        calls = len(window)
        failures = sum(s.failed for s in window)
        slow = sum(s.slow for s in window)
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
