"""The circuit breaker's pure core, driven by an explicit clock (ports of anchors §6)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.actors.breaker_helpers import T0, admitted, call, refused, status, trip
from tether.actors.guards.breaker import (
    Admitted,
    BreakerCallRecorded,
    BreakerClosed,
    BreakerCore,
    BreakerEvent,
    BreakerHalfOpened,
    BreakerOpened,
    BreakerPolicy,
    BreakerProbeAdmitted,
    BreakerProbePassed,
    BreakerProbeReleased,
    BreakerReset,
    BreakerState,
    CallToken,
    Outcome,
    Refused,
    WindowCounts,
)
from tether.errors import ConfigError

# -- closed -> open ----------------------------------------------------------------------------


def test_breaker_stays_closed_below_threshold() -> None:
    """Two failures out of three allowed keep the breaker closed, each journaled."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    assert call(core, T0, "failure") == [BreakerCallRecorded(at=T0, failed=True)]
    assert call(core, T0 + 1, "failure") == [BreakerCallRecorded(at=T0 + 1, failed=True)]
    assert status(core) == "closed"
    assert core.counts(T0 + 1).failures == 2


def test_breaker_trips_after_threshold() -> None:
    """The third failure trips: the call is recorded, then the breaker opens for 30 s."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    call(core, T0, "failure")
    call(core, T0 + 1, "failure")
    events = call(core, T0 + 2, "failure")
    assert events == [
        BreakerCallRecorded(at=T0 + 2, failed=True),
        BreakerOpened(at=T0 + 2, until=T0 + 32, reason="3 of the last 3 calls failed", trips=1),
    ]
    assert status(core) == "open"
    refusal = refused(core, T0 + 10)
    assert refusal.retry_at == T0 + 32
    assert refusal.status == "open"
    assert core.remaining_open(T0 + 10) == 22


def test_breaker_open_refuses_until_retry_at() -> None:
    """While open no call is admitted, however many ask, and nothing is journaled."""
    core = BreakerCore(BreakerPolicy.for_kind("model"))
    trip(core, T0)
    for dt in (0, 1, 60, 119.999):
        assert refused(core, T0 + dt).retry_at == T0 + 120


def test_success_pushes_failures_out_of_a_consecutive_window() -> None:
    """window_size == failure_threshold means N consecutive failures; a success breaks the run."""
    core = BreakerCore(BreakerPolicy(failure_threshold=3, window_size=3))
    call(core, T0, "failure")
    call(core, T0, "failure")
    call(core, T0, "success")
    call(core, T0, "failure")
    call(core, T0, "failure")
    assert status(core) == "closed"
    call(core, T0, "failure")
    assert status(core) == "open"


def test_failures_spread_over_a_count_window_trip() -> None:
    """for_kind windows hold 2 x threshold calls: 3 failures among the last 6 trip."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    for outcome in ("failure", "success", "failure", "success", "failure"):
        call(core, T0, outcome)
    assert status(core) == "open"
    assert core.state.reason == "3 of the last 5 calls failed"


def test_unrecorded_exception_is_success_and_cancellation_is_cancelled() -> None:
    """The dependency answered a bad request (success); a cancellation is no answer at all."""
    policy = BreakerPolicy(record_on=(ConnectionError, TimeoutError), ignore=(PermissionError,))
    assert policy.classify(None) == "success"
    assert policy.classify(ConnectionError()) == "failure"
    assert policy.classify(TimeoutError()) == "failure"
    assert policy.classify(ValueError("bad argument")) == "success"
    assert policy.classify(PermissionError()) == "ignored"
    assert policy.classify(asyncio.CancelledError()) == "cancelled"
    assert policy.classify(KeyboardInterrupt()) == "cancelled"


def test_ignore_wins_over_record_on_and_classifier_comes_first() -> None:
    """ignore beats record_on; a classifier decides first and may defer with None."""

    def by_status(exc: BaseException) -> Outcome | None:
        status = getattr(exc, "status", None)
        return None if status is None else ("failure" if status >= 500 else "success")

    class HTTPError(Exception):
        def __init__(self, status: int) -> None:
            self.status = status

    policy = BreakerPolicy(ignore=(OSError,), classifier=by_status)
    assert policy.classify(OSError()) == "ignored"
    assert policy.classify(HTTPError(503)) == "failure"
    assert policy.classify(HTTPError(404)) == "success"
    assert policy.classify(RuntimeError()) == "failure"


def test_classifier_returning_garbage_is_a_config_error() -> None:
    """A classifier that returns something other than an outcome is reported, not trusted."""
    policy = BreakerPolicy(classifier=lambda exc: "boom")  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigError, match="classifier"):
        policy.classify(RuntimeError())


# -- half-open ---------------------------------------------------------------------------------


def test_breaker_admits_exactly_one_probe_under_concurrent_callers() -> None:
    """Five callers arrive together after the open time: one probe, four refusals."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    trip(core, T0)
    now = T0 + 30
    answers = []
    journal: list[BreakerEvent] = []
    for _ in range(5):
        answer, events = core.admit(now)
        answers.append(answer)
        journal.extend(events)
    probes = [a for a in answers if isinstance(a, Admitted)]
    assert len(probes) == 1
    assert probes[0].probe
    assert journal == [BreakerHalfOpened(at=now, until=now + 30)]
    refusals = [a for a in answers if isinstance(a, Refused)]
    assert len(refusals) == 4
    assert all(r.status == "half_open" and r.retry_at == now + 30 for r in refusals)


def test_probe_success_closes_and_resets_growth() -> None:
    """A successful probe closes the breaker; the next trip is back to the base duration."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    trip(core, T0)
    probe = admitted(core, T0 + 30)
    assert core.record(probe, "failure", duration=1, now=T0 + 31)[0].trips == 2  # type: ignore[union-attr]
    probe = admitted(core, T0 + 91)
    assert core.record(probe, "success", duration=1, now=T0 + 92) == [BreakerClosed(at=T0 + 92)]
    assert core.state == BreakerState(generation=core.state.generation)
    assert core.counts(T0 + 92).calls == 0
    trip(core, T0 + 100)
    assert core.state.trips == 1
    assert core.state.until == T0 + 130


def test_probe_failure_reopens_with_a_longer_duration() -> None:
    """Each failed probe doubles the open time, up to the cap (10 x open_duration)."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    trip(core, T0)
    now = T0
    durations = [core.state.until - now]
    for _ in range(6):
        now = core.state.until
        probe = admitted(core, now)
        events = core.record(probe, "failure", duration=0.5, now=now)
        assert [type(e) for e in events] == [BreakerOpened]
        durations.append(core.state.until - now)
    assert durations == [30, 60, 120, 240, 300, 300, 300]
    assert core.state.trips == 7


def test_hung_probe_is_rearmed_and_its_late_answer_ignored() -> None:
    """A probe still running after the open time lets another probe go; the first is stale."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    trip(core, T0)
    first = admitted(core, T0 + 30)
    assert refused(core, T0 + 59).retry_at == T0 + 60
    answer, events = core.admit(T0 + 60)
    assert isinstance(answer, Admitted)
    assert answer.probe
    assert events == [BreakerHalfOpened(at=T0 + 60, until=T0 + 90)]
    assert core.record(first, "success", duration=35, now=T0 + 65) == []
    assert status(core) == "half_open"
    assert core.record(answer.token, "success", duration=1, now=T0 + 66) == [
        BreakerClosed(at=T0 + 66)
    ]


def test_late_probe_answer_counts_until_someone_else_probes() -> None:
    """A slow probe that answers after its time, before anyone re-armed it, still decides."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    trip(core, T0)
    probe = admitted(core, T0 + 30)
    assert core.record(probe, "success", duration=45, now=T0 + 75) == [BreakerClosed(at=T0 + 75)]


@pytest.mark.parametrize("outcome", ["cancelled", "ignored"])
def test_cancelled_or_ignored_probe_releases_the_slot(outcome: Outcome) -> None:
    """Neither success nor failure: the breaker stays half-open and the next caller probes now."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    trip(core, T0)
    probe = admitted(core, T0 + 30)
    assert core.record(probe, outcome, duration=2, now=T0 + 32) == [
        BreakerProbeReleased(at=T0 + 32, outcome=outcome)
    ]
    assert status(core) == "half_open"
    assert core.state.trips == 1
    assert core.remaining_open(T0 + 32) == 0
    answer, _ = core.admit(T0 + 32)
    assert isinstance(answer, Admitted)
    assert answer.probe


def test_slow_probe_reopens_when_slow_calls_are_tracked() -> None:
    """With slow-call tracking on, a probe that succeeds too slowly is no sign of recovery."""
    policy = BreakerPolicy(
        failure_threshold=2, window_size=4, slow_call_rate=1.0, slow_call_duration=5.0
    )
    core = BreakerCore(policy)
    trip(core, T0)
    probe = admitted(core, T0 + 60)
    events = core.record(probe, "success", duration=9, now=T0 + 69)
    assert isinstance(events[0], BreakerOpened)
    assert "took 9 s" in events[0].reason
    assert core.state.trips == 2


# -- N probes in half-open ----------------------------------------------------------------------


def probing(probes: int) -> BreakerCore:
    """A breaker that tripped at T0 (open 30 s) and lets ``probes`` trial calls go."""
    core = BreakerCore(
        BreakerPolicy(failure_threshold=3, window_size=6, open_duration=30, half_open_probes=probes)
    )
    trip(core, T0)
    return core


def test_half_open_admits_n_probes_and_refuses_the_rest() -> None:
    """half_open_probes=3: three trial calls go, the fourth caller is told when to retry."""
    core = probing(3)
    journal: list[BreakerEvent] = []
    tokens = []
    for dt in (30, 31, 32):
        answer, events = core.admit(T0 + dt)
        assert isinstance(answer, Admitted)
        assert answer.probe
        tokens.append(answer.token)
        journal.extend(events)
    assert journal == [
        BreakerHalfOpened(at=T0 + 30, until=T0 + 60),
        BreakerProbeAdmitted(at=T0 + 31, until=T0 + 61),
        BreakerProbeAdmitted(at=T0 + 32, until=T0 + 62),
    ]
    refusal = refused(core, T0 + 33)
    assert (refusal.status, refusal.retry_at, refusal.probes) == ("half_open", T0 + 62, 3)
    assert "3 trial calls are checking" in refusal.describe("search", T0 + 33)
    assert len({t.generation for t in tokens}) == 1  # one half-open period


def test_all_n_probes_must_succeed_to_close() -> None:
    """Each success but the last is journaled; the N-th closes the breaker."""
    core = probing(3)
    tokens = [admitted(core, T0 + 30) for _ in range(3)]
    assert core.record(tokens[0], "success", duration=1, now=T0 + 31) == [
        BreakerProbePassed(at=T0 + 31)
    ]
    assert core.record(tokens[1], "success", duration=1, now=T0 + 32) == [
        BreakerProbePassed(at=T0 + 32)
    ]
    assert status(core) == "half_open"
    assert core.state.probes_passed == 2
    assert core.record(tokens[2], "success", duration=1, now=T0 + 33) == [BreakerClosed(at=T0 + 33)]
    assert status(core) == "closed"


def test_one_failed_probe_reopens_and_the_other_probes_are_stale() -> None:
    """Two successes then a failure: open again for longer; the last probe's answer is moot."""
    core = probing(4)
    tokens = [admitted(core, T0 + 30) for _ in range(4)]
    for token in tokens[:2]:
        core.record(token, "success", duration=1, now=T0 + 31)
    events = core.record(tokens[2], "failure", duration=1, now=T0 + 32)
    assert events == [
        BreakerOpened(
            at=T0 + 32, until=T0 + 92, reason="a trial call failed (2 of 4 had succeeded)", trips=2
        )
    ]
    assert core.record(tokens[3], "success", duration=1, now=T0 + 33) == []
    assert status(core) == "open"
    assert core.state.probes_passed == 0


@pytest.mark.parametrize("outcome", ["cancelled", "ignored"])
def test_a_cancelled_or_ignored_probe_of_n_frees_its_permit_only(outcome: Outcome) -> None:
    """Neither success nor failure: another caller probes in its place, and the other probes
    still count (their answers are not stale)."""
    core = probing(2)
    first, second = admitted(core, T0 + 30), admitted(core, T0 + 30)
    refused(core, T0 + 31)
    assert core.record(first, outcome, duration=1, now=T0 + 31) == [
        BreakerProbeReleased(at=T0 + 31, outcome=outcome)
    ]
    assert core.remaining_open(T0 + 31) == 0
    third = admitted(core, T0 + 31)
    refused(core, T0 + 31)
    assert core.record(second, "success", duration=1, now=T0 + 32) == [
        BreakerProbePassed(at=T0 + 32)
    ]
    assert core.record(third, "success", duration=1, now=T0 + 33) == [BreakerClosed(at=T0 + 33)]


def test_hung_probes_of_n_are_rearmed_keeping_those_that_passed() -> None:
    """One probe passed, one hangs: after the open duration another caller probes in the
    hung one's place; the hung one's late answer is ignored; one more success closes."""
    core = probing(2)
    passed, hung = admitted(core, T0 + 30), admitted(core, T0 + 30)
    core.record(passed, "success", duration=1, now=T0 + 31)
    assert refused(core, T0 + 59).retry_at == T0 + 60
    answer, events = core.admit(T0 + 60)
    assert isinstance(answer, Admitted)
    assert answer.probe
    assert events == [BreakerHalfOpened(at=T0 + 60, until=T0 + 90)]
    assert (core.state.probes_admitted, core.state.probes_passed) == (2, 1)
    assert core.record(hung, "failure", duration=40, now=T0 + 70) == []  # stale
    assert core.record(answer.token, "success", duration=1, now=T0 + 71) == [
        BreakerClosed(at=T0 + 71)
    ]


# -- reset ---------------------------------------------------------------------------------------


def test_reset_clears_a_closed_breakers_window() -> None:
    """resilience4j reset(): the window forgets its calls; a full threshold is needed again."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    call(core, T0, "failure")
    call(core, T0, "failure")
    assert core.reset(T0 + 1, by="ops") == [BreakerReset(at=T0 + 1, by="ops")]
    assert status(core) == "closed"
    assert core.counts(T0 + 1) == WindowCounts(calls=0, failures=0, slow=0)
    call(core, T0 + 2, "failure")
    call(core, T0 + 2, "failure")
    assert status(core) == "closed"
    call(core, T0 + 2, "failure")
    assert status(core) == "open"


def test_reset_closes_an_open_breaker_and_forgets_its_trips() -> None:
    core = probing(2)
    assert core.reset(T0 + 1, by="ops") == [BreakerReset(at=T0 + 1, by="ops")]
    assert core.state == BreakerState(generation=core.state.generation)
    trip(core, T0 + 2)
    assert core.state.until == T0 + 32  # the first trip again: no growth


def test_a_call_in_flight_across_a_reset_is_stale() -> None:
    """A reset starts afresh: an answer for a call admitted before it changes nothing."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    before = admitted(core, T0)
    core.reset(T0 + 1, by="ops")
    assert core.record(before, "failure", duration=1, now=T0 + 2) == []
    assert core.counts(T0 + 2).calls == 0


# -- ignored, cancelled and stale calls while closed ---------------------------------------------


@pytest.mark.parametrize("outcome", ["cancelled", "ignored"])
def test_cancelled_and_ignored_calls_count_as_neither(outcome: Outcome) -> None:
    """They leave the window untouched and journal nothing."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    call(core, T0, "failure")
    call(core, T0, "failure")
    before = core.state
    for _ in range(10):
        assert call(core, T0 + 1, outcome) == []
    assert core.state == before
    call(core, T0 + 2, "failure")
    assert status(core) == "open"


def test_answer_from_before_the_trip_is_ignored() -> None:
    """A call admitted while closed that finishes after the trip changes nothing."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    slow_caller = admitted(core, T0)
    trip(core, T0 + 1)
    opened = core.state
    assert core.record(slow_caller, "failure", duration=5, now=T0 + 5) == []
    assert core.record(slow_caller, "success", duration=5, now=T0 + 5) == []
    assert core.state == opened


def test_record_rejects_an_unknown_outcome() -> None:
    core = BreakerCore()
    with pytest.raises(ValueError, match="outcome"):
        core.record(admitted(core, T0), "maybe", duration=0, now=T0)  # type: ignore[arg-type]


# -- windows, rates and minimum calls ------------------------------------------------------------


def test_time_window_failures_expire() -> None:
    """Failures older than the time window no longer count towards the threshold."""
    core = BreakerCore(BreakerPolicy(failure_threshold=3, window="time", window_size=60))
    call(core, T0, "failure")
    call(core, T0 + 10, "failure")
    assert core.counts(T0 + 59).failures == 2
    assert core.counts(T0 + 61).failures == 1
    call(core, T0 + 61, "failure")
    assert status(core) == "closed"
    assert core.counts(T0 + 61).failures == 2
    call(core, T0 + 65, "failure")
    assert status(core) == "open"
    assert core.state.reason == "3 of 3 calls in the last 60 s failed"


def test_minimum_calls_before_rates_are_judged() -> None:
    """A 100 % failure rate over fewer than minimum_calls calls does not trip."""
    policy = BreakerPolicy(
        failure_threshold=None, failure_rate=0.5, window_size=10, minimum_calls=4
    )
    core = BreakerCore(policy)
    call(core, T0, "failure")
    call(core, T0, "failure")
    call(core, T0, "success")
    assert status(core) == "closed"  # 2/3 = 67 %, but only 3 calls
    call(core, T0, "success")  # 2/4 = 50 %: the success brings the minimum, and trips
    assert status(core) == "open"
    assert core.state.reason == "2 of the last 4 calls failed (50%, limit 50%)"


def test_failure_rate_is_judged_on_every_recorded_call_successes_included() -> None:
    """5 calls, 3 failures, limit 50 %: the fifth call, a success, trips (resilience4j)."""
    policy = BreakerPolicy(
        failure_threshold=None, failure_rate=0.5, window_size=10, minimum_calls=5
    )
    core = BreakerCore(policy)
    for outcome in ("failure", "failure", "failure", "success"):
        call(core, T0, outcome)
    assert status(core) == "closed"  # 3/4, under the minimum of 5 calls
    assert call(core, T0 + 1, "success") == [
        BreakerCallRecorded(at=T0 + 1, failed=False),
        BreakerOpened(
            at=T0 + 1,
            until=T0 + 61,
            reason="3 of the last 5 calls failed (60%, limit 50%)",
            trips=1,
        ),
    ]


def test_slow_call_rate_is_judged_on_a_fast_call_too() -> None:
    """Three slow calls then two fast ones: the fifth, fast, call brings the minimum and trips."""
    policy = BreakerPolicy(
        failure_threshold=None,
        window="time",
        window_size=60,
        minimum_calls=5,
        slow_call_rate=0.5,
        slow_call_duration=2.0,
    )
    core = BreakerCore(policy)
    for duration in (5.0, 5.0, 5.0, 0.1):
        call(core, T0, "success", duration=duration)
    assert status(core) == "closed"
    call(core, T0 + 1, "success", duration=0.1)
    assert status(core) == "open"
    assert core.state.reason == (
        "3 of 5 calls in the last 60 s took longer than 2 s (60%, limit 50%)"
    )


def test_minimum_calls_is_capped_at_a_count_window() -> None:
    """minimum_calls larger than a count window is capped at its size (resilience4j)."""
    policy = BreakerPolicy(failure_threshold=None, failure_rate=1.0, window_size=3, minimum_calls=5)
    core = BreakerCore(policy)
    for _ in range(3):
        call(core, T0, "failure")
    assert status(core) == "open"


def test_failure_rate_below_threshold_stays_closed() -> None:
    """A failure rate under the limit (Polly: 9 < 10 no break) keeps the breaker closed."""
    policy = BreakerPolicy(
        failure_threshold=None, failure_rate=0.5, window_size=10, minimum_calls=4
    )
    core = BreakerCore(policy)
    for outcome in ("success", "failure", "success", "success", "failure", "success", "success"):
        call(core, T0, outcome)
    assert status(core) == "closed"


def test_slow_call_rate_trips() -> None:
    """Successful but slow calls trip the breaker once their share reaches the limit."""
    policy = BreakerPolicy(
        failure_threshold=None,
        window_size=10,
        minimum_calls=4,
        slow_call_rate=0.75,
        slow_call_duration=2.0,
    )
    core = BreakerCore(policy)
    call(core, T0, "success", duration=0.5)
    call(core, T0, "success", duration=3.0)
    call(core, T0, "success", duration=2.0)  # not longer than the limit: fast
    call(core, T0, "success", duration=4.0)
    assert status(core) == "closed"  # 2/4 slow
    for _ in range(3):
        call(core, T0, "success", duration=9.0)
    assert status(core) == "closed"  # 5/7 = 71 % slow
    call(core, T0, "success", duration=9.0)
    assert status(core) == "open"  # 6/8 = 75 %
    assert core.state.reason == "6 of the last 8 calls took longer than 2 s (75%, limit 75%)"


def test_time_window_with_rates_counts_successes() -> None:
    """In a time window judged by rate, successes are journaled: they are the denominator."""
    policy = BreakerPolicy(
        failure_threshold=None, failure_rate=0.5, window="time", window_size=60, minimum_calls=2
    )
    core = BreakerCore(policy)
    assert call(core, T0, "success") == [BreakerCallRecorded(at=T0, failed=False)]
    call(core, T0 + 1, "success")
    call(core, T0 + 2, "failure")
    assert status(core) == "closed"  # 1/3
    call(core, T0 + 70, "failure")  # the old calls expired: 1/1, below minimum_calls
    assert status(core) == "closed"
    call(core, T0 + 71, "failure")  # 2/2
    assert status(core) == "open"


def test_healthy_successes_are_not_journaled() -> None:
    """Once a count window is full of successes, more successes change nothing and emit nothing."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    emitted = [call(core, T0 + i, "success") for i in range(20)]
    assert sum(len(e) for e in emitted) == 6  # fills the window of 6, then silence
    call(core, T0 + 30, "failure")
    assert all(len(call(core, T0 + 31, "success")) == 1 for _ in range(6))  # pushes it out
    assert call(core, T0 + 32, "success") == []


def test_time_window_by_threshold_skips_successes() -> None:
    """A time window judged by failure count alone never needs successes."""
    core = BreakerCore(BreakerPolicy(failure_threshold=2, window="time", window_size=10))
    assert call(core, T0, "success") == []
    assert len(call(core, T0, "failure")) == 1


# -- rehydration ---------------------------------------------------------------------------------


def test_counters_survive_recreation() -> None:
    """A core folded from the journal has the same window: one more failure trips both."""
    policy = BreakerPolicy.for_kind("database")
    live = BreakerCore(policy)
    journal: list[BreakerEvent] = []
    outcomes: list[Outcome] = ["failure", "success", "failure", "failure", "success", "failure"]
    for i, outcome in enumerate(outcomes):
        journal.extend(call(live, T0 + i, outcome))
    rebuilt = BreakerCore.fold(policy, journal)
    assert rebuilt.state == live.state
    assert (
        rebuilt.counts(T0 + 6) == live.counts(T0 + 6) == WindowCounts(calls=6, failures=4, slow=0)
    )
    assert call(rebuilt, T0 + 7, "failure") == call(live, T0 + 7, "failure")
    assert status(rebuilt) == status(live) == "open"


def test_open_breaker_survives_recreation_with_the_same_remaining_time() -> None:
    """Times are absolute: after a crash the breaker reopens at the same instant."""
    policy = BreakerPolicy.for_kind("model")
    live = BreakerCore(policy)
    journal: list[BreakerEvent] = []
    journal.extend(call(live, T0, "failure"))
    journal.extend(call(live, T0 + 1, "failure"))
    # crash; the journal is all that is left, decoded from storage
    stored = msgspec.msgpack.encode(journal)
    recovered = msgspec.msgpack.decode(stored, type=list[BreakerEvent])
    rebuilt = BreakerCore.fold(policy, recovered)
    assert rebuilt.state == live.state
    assert rebuilt.remaining_open(T0 + 51) == live.remaining_open(T0 + 51) == 70
    assert refused(rebuilt, T0 + 51).retry_at == T0 + 121


def test_rehydration_is_side_effect_free() -> None:
    """Folding twice gives the same state and never emits anything (pybreaker #26)."""
    policy = BreakerPolicy.for_kind("external_api")
    live = BreakerCore(policy)
    journal = [e for outcome in ("failure", "failure") for e in call(live, T0, outcome)]
    assert BreakerCore.fold(policy, journal).state == BreakerCore.fold(policy, journal).state
    assert BreakerCore.fold(policy, []).state == BreakerState()


def test_a_snapshot_from_before_half_open_probes_still_decodes() -> None:
    """A stored state without probe counts (written before ``half_open_probes`` existed)
    decodes with none out and none passed: its probe died with the process that ran it, so
    the next caller probes."""
    old = msgspec.msgpack.encode(
        {
            "status": "half_open",
            "generation": 2,
            "trips": 1,
            "opened_at": T0,
            "until": T0 + 60,
            "reason": "3 of the last 3 calls failed",
            "window": [],
        }
    )
    state = msgspec.msgpack.Decoder(BreakerState).decode(old)
    assert (state.probes_admitted, state.probes_passed) == (0, 0)
    core = BreakerCore(BreakerPolicy.for_kind("external_api"), state)
    probe = admitted(core, T0 + 31)
    assert core.record(probe, "success", duration=1, now=T0 + 32) == [BreakerClosed(at=T0 + 32)]


def test_a_journal_from_before_half_open_probes_folds_to_the_same_decisions() -> None:
    """The events a one-probe breaker journaled (a probe released, then re-armed) fold under
    the N-probe fold to one probe out, refusals until its time, then a new probe."""
    policy = BreakerPolicy.for_kind("external_api")
    journal: list[BreakerEvent] = [
        BreakerCallRecorded(at=T0, failed=True),
        BreakerCallRecorded(at=T0, failed=True),
        BreakerCallRecorded(at=T0, failed=True),
        BreakerOpened(at=T0, until=T0 + 30, reason="3 of the last 3 calls failed", trips=1),
        BreakerHalfOpened(at=T0 + 30, until=T0 + 60),
        BreakerProbeReleased(at=T0 + 31, outcome="cancelled"),
        BreakerHalfOpened(at=T0 + 32, until=T0 + 62),
    ]
    stored = msgspec.msgpack.encode(journal)
    core = BreakerCore.fold(policy, msgspec.msgpack.decode(stored, type=list[BreakerEvent]))
    assert (status(core), core.state.probes_admitted, core.state.trips) == ("half_open", 1, 1)
    assert refused(core, T0 + 61).retry_at == T0 + 62
    probe = admitted(core, T0 + 62)
    assert core.record(probe, "success", duration=1, now=T0 + 63) == [BreakerClosed(at=T0 + 63)]


def test_events_are_tagged_by_class_name() -> None:
    """Journal payloads name their own type, as tether.Event requires."""
    encoded = msgspec.json.encode(BreakerClosed(at=T0))
    assert msgspec.json.decode(encoded) == {"type": "BreakerClosed", "at": T0}
    msgspec.msgpack.encode(BreakerState())  # a snapshot must be encodable


def test_refusal_describes_itself_for_the_model() -> None:
    """The caller adds the tool name; the sentence gives the reason and the wait."""
    core = BreakerCore(BreakerPolicy.for_kind("external_api"))
    trip(core, T0)
    text = refused(core, T0 + 4.5).describe("web_search", T0 + 4.5)
    assert "'web_search' is unavailable" in text
    assert "3 of the last 3 calls failed" in text
    assert "26 s" in text
    admitted(core, T0 + 30)
    assert "single trial call" in refused(core, T0 + 31).describe("web_search", T0 + 31)


# -- policy ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "threshold", "open_for"),
    [
        ("external_api", 3, 30),
        ("database", 5, 60),
        ("file_system", 10, 15),
        ("model", 2, 120),
        ("memory_store", 10, 10),
    ],
)
def test_for_kind_follows_the_table(kind: str, threshold: int, open_for: float) -> None:
    policy = BreakerPolicy.for_kind(kind)
    assert policy.failure_threshold == threshold
    assert policy.open_duration == open_for
    assert policy.window == "count"
    assert policy.window_size == 2 * threshold


def test_for_kind_rejects_an_unknown_kind_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown kind 'graphql'.*external_api, database"):
        BreakerPolicy.for_kind("graphql")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"window": "sliding"}, "window"),
        ({"window_size": 0}, "window_size"),
        ({"window_size": 2.5}, "window_size"),
        ({"failure_threshold": 0}, "failure_threshold"),
        ({"failure_threshold": True}, "failure_threshold"),
        ({"failure_threshold": 11, "window_size": 10}, "failure_threshold"),
        ({"failure_threshold": None}, "failure_threshold"),
        ({"failure_rate": 0}, "failure_rate"),
        ({"failure_rate": 1.5}, "failure_rate"),
        ({"slow_call_rate": 0.5}, "slow_call_duration"),
        ({"slow_call_duration": 2.0}, "slow_call_rate"),
        ({"slow_call_rate": 0.5, "slow_call_duration": -1}, "slow_call_duration"),
        ({"minimum_calls": 0}, "minimum_calls"),
        ({"half_open_probes": 0}, "half_open_probes"),
        ({"half_open_probes": 2.0}, "half_open_probes"),
        ({"half_open_probes": True}, "half_open_probes"),
        ({"open_duration": 0}, "open_duration"),
        ({"open_duration": float("inf")}, "open_duration"),
        ({"open_multiplier": 0.5}, "open_multiplier"),
        ({"max_open_duration": 10, "open_duration": 60}, "max_open_duration"),
        ({"record_on": (ValueError, "KeyError")}, "record_on"),
        ({"ignore": [ValueError]}, "ignore"),
        ({"classifier": "not callable"}, "classifier"),
    ],
)
def test_policy_validation_names_the_bad_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"BreakerPolicy\.{field} must be"):
        BreakerPolicy(**kwargs)


def test_replace_revalidates_the_policy() -> None:
    with pytest.raises(ConfigError, match="open_duration"):
        msgspec.structs.replace(BreakerPolicy.for_kind("model"), open_duration=-1)


def test_open_duration_growth_does_not_overflow() -> None:
    policy = BreakerPolicy(open_duration=1, open_multiplier=10, max_open_duration=3600)
    assert policy.open_duration_for(1) == 1
    assert policy.open_duration_for(3) == 100
    assert policy.open_duration_for(10_000) == 3600
    assert BreakerPolicy(open_multiplier=1).open_duration_for(50) == 60


# -- property: the journal is the state ------------------------------------------------------------

POLICIES = [
    BreakerPolicy.for_kind("external_api"),
    BreakerPolicy(failure_threshold=2, window_size=2, open_duration=5),
    BreakerPolicy(failure_threshold=3, window="time", window_size=20, open_duration=10),
    BreakerPolicy(
        failure_threshold=None,
        failure_rate=0.5,
        slow_call_rate=0.5,
        slow_call_duration=1.0,
        window="time",
        window_size=30,
        minimum_calls=3,
        open_duration=8,
        open_multiplier=1.5,
    ),
    BreakerPolicy(failure_threshold=2, window_size=3, open_duration=6, half_open_probes=3),
    BreakerPolicy(
        failure_threshold=None,
        failure_rate=0.5,
        window_size=4,
        minimum_calls=2,
        open_duration=5,
        half_open_probes=2,
    ),
]

OPS = st.lists(
    st.tuples(
        st.sampled_from(["admit", "admit", "admit", "finish", "finish", "reset"]),
        st.floats(min_value=0, max_value=15, allow_nan=False),  # time step
        st.integers(min_value=0, max_value=7),  # which outstanding call
        st.sampled_from(["success", "failure", "failure", "ignored", "cancelled"]),
        st.floats(min_value=0, max_value=3, allow_nan=False),  # duration
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(policy_index=st.integers(0, len(POLICIES) - 1), ops=OPS)
def test_fold_of_emitted_events_equals_live_state(
    policy_index: int, ops: list[tuple[str, float, int, Outcome, float]]
) -> None:
    """Whatever happens, folding the journal rebuilds the live state, and at most
    ``half_open_probes`` probes run."""
    policy = POLICIES[policy_index]
    live = BreakerCore(policy)
    journal: list[BreakerEvent] = []
    outstanding: list[CallToken] = []
    now = T0
    for kind, step, pick, outcome, duration in ops:
        now += step
        before = live.state
        if kind == "reset":
            events = live.reset(now, by="property")
        elif kind == "admit" or not outstanding:
            answer, events = live.admit(now)
            if isinstance(answer, Admitted):
                outstanding.append(answer.token)
                if answer.probe:
                    assert before.status != "closed"
                    permit_free = before.status == "half_open" and (
                        before.probes_admitted < policy.half_open_probes
                    )
                    assert permit_free or now >= before.until
            else:
                assert before.status != "closed"
                assert answer.retry_at > now
        else:
            token = outstanding.pop(pick % len(outstanding))
            events = live.record(token, outcome, duration=duration, now=now)
        journal.extend(events)
        live_probes = [t for t in outstanding if t.probe and t.generation == live.state.generation]
        assert len(live_probes) <= policy.half_open_probes
        if live.state.status == "half_open":  # the permits out are exactly the probes that
            # are running and those that succeeded
            state = live.state
            assert len(live_probes) == state.probes_admitted - state.probes_passed
        assert BreakerCore.fold(policy, journal).state == live.state
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(journal), type=list[BreakerEvent])
    assert BreakerCore.fold(policy, decoded).state == live.state
