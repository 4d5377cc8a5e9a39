"""A circuit breaker's configuration: when it trips, how long it stays open, what counts.

Configuration, not journal: a policy is never stored (it may hold exception classes and a
callable), so it can change between runs; the breaker's journal folds under any policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import ClassVar, Final, Literal, NoReturn, TypeAlias, TypeGuard

import msgspec

from tether.deprecation import RenamedFields
from tether.errors import ConfigError

Outcome: TypeAlias = Literal["success", "failure", "ignored", "cancelled"]
WindowKind: TypeAlias = Literal["count", "time"]
#: Maps an exception to an outcome, or to ``None`` to fall back to ``record_on``/``ignore``.
Classifier: TypeAlias = Callable[[BaseException], Outcome | None]

OUTCOMES: Final = ("success", "failure", "ignored", "cancelled")


# -- policy ------------------------------------------------------------------------------------


class BreakerPolicy(msgspec.Struct, frozen=True, kw_only=True, metaclass=RenamedFields):
    """When a breaker trips, how long it stays open, and which exceptions count.

    The policy is configuration, not journal: it is never stored, so it may hold exception
    classes and a callable. Change it with ``msgspec.structs.replace`` (which re-validates).

    Attributes:
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
        open_multiplier: factor applied per consecutive trip (1 = fixed duration); the
            ``multiplier`` of ``RetryPolicy`` and ``Backoff``. ``open_growth=`` is its
            deprecated name.
        half_open_probes: trial calls let through once the open time is over; every one of
            them must succeed to close the breaker, and the first that fails (or is slow,
            when slow calls are tracked) opens it again (resilience4j's
            ``permittedNumberOfCallsInHalfOpenState``, judged strictly: see ``docs/guards.md``).
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
    open_multiplier: float = 2.0
    half_open_probes: int = 1
    max_open_duration: float | None = None
    record_on: tuple[type[BaseException], ...] = (Exception,)
    ignore: tuple[type[BaseException], ...] = ()
    classifier: Classifier | None = None

    _renamed_fields: ClassVar[Mapping[str, str]] = {"open_growth": "open_multiplier"}

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
        if not _whole(self.half_open_probes, 1):
            _bad("half_open_probes", self.half_open_probes, "an integer >= 1")
        if not _positive(self.open_duration):
            _bad("open_duration", self.open_duration, "a positive number of seconds")
        if not (_number(self.open_multiplier) and self.open_multiplier >= 1):
            _bad("open_multiplier", self.open_multiplier, "a number >= 1")
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
            duration *= self.open_multiplier
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
                if decided not in OUTCOMES:
                    raise ConfigError(
                        f"BreakerPolicy.classifier returned {decided!r}; "
                        f"expected one of {', '.join(OUTCOMES)} or None"
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
