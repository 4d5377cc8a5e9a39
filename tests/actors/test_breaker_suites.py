"""resilience4j's and pybreaker's breaker test suites, ported to tether's breaker.

Every case of the two suites below that has a tether equivalent is a test here, named after it
(``test_r4j_…``, ``test_pybreaker_…``). Cases about the state machine drive ``BreakerCore``
with explicit times (a ``FakeClock`` where the original advances one); cases about what a
caller sees go through a runtime on a real SQLite file: a ``Client`` session calls a tool
through ``self.effect``, and the dependency's own record (``SERVICE``) says which calls were
made. The reasons for each difference are in ``docs/guards.md``.

resilience4j ``CircuitBreakerStateMachineTest`` (resilience4j/resilience4j @ af9e7c97, file
last changed in d6e80d70; ``resilience4j-circuitbreaker/src/test/java/io/github/resilience4j/
circuitbreaker/internal/``). Its breaker: failure rate 50 %, slow calls over 4 s at 50 %, a
20 s time window of at least 5 calls, open 5 s, 4 calls in half-open, NumberFormatException
ignored: ``R4J`` below (``ValueError`` ignored).

| original case | tether |
|---|---|
| shouldReturnTheCorrectName | test_r4j_should_return_the_correct_name |
| shouldThrowCallNotPermittedExceptionWhenStateIsOpen | test_r4j_should_throw_call_not_permitted_exception_when_state_is_open (a refusal is ``ToolUnavailable``; the count of refused calls is a metrics API: none) |
| shouldThrowCallNotPermittedExceptionWhenStateIsForcedOpen | no equivalent: no forced-open state |
| shouldIncreaseCounterOnReleasePermission | test_r4j_should_increase_counter_on_release_permission (a released permit is a cancelled or ignored probe) |
| shouldThrowCallNotPermittedExceptionWhenNotFurtherTestCallsArePermitted | test_r4j_should_throw_call_not_permitted_exception_when_not_further_test_calls_are_permitted |
| shouldOnlyPermitFourCallsInHalfOpenState | test_r4j_should_only_permit_four_calls_in_half_open_state (no manual transitions: tripped by failures, re-opened by a failed probe) |
| shouldOpenAfterFailureRateThresholdExceeded2 | test_r4j_should_open_after_failure_rate_threshold_exceeded2 |
| shouldOpenAfterFailureRateThresholdExceeded | test_r4j_should_open_after_failure_rate_threshold_exceeded (failed before issue #15 point 5: a success never tripped) |
| shouldOpenAfterSlowCallRateThresholdExceeded | test_r4j_should_open_after_slow_call_rate_threshold_exceeded |
| shouldOpenAfterSlowCallRateThresholdExceededUsingMockClock | test_r4j_should_open_after_slow_call_rate_threshold_exceeded_using_mock_clock (the core is given each call's duration; the runtime measures it on the monotonic clock) |
| shouldTransitionToHalfOpenAfterWaitDuration | test_r4j_should_transition_to_half_open_after_wait_duration (half-open begins with its first probe: no state without a caller) |
| shouldTransitionToHalfOpenAfterPassedWaitDuration | test_r4j_should_transition_to_half_open_after_passed_wait_duration (``transitionToOpenStateFor(2 h)``: ``open_duration=7200``) |
| shouldTransitionToHalfOpenAfterPassedWaitUntil | no equivalent: no call opens a breaker until a given time (see forced open) |
| shouldTransitionToHalfOpenAfterWaitInterval | test_r4j_should_transition_to_half_open_after_wait_interval (``open_multiplier=1.5``) |
| shouldTransitionBackToOpenStateWhenFailureRateIsAboveThreshold | deliberate difference: test_r4j_should_transition_back_to_open_state_when_failure_rate_is_above_threshold (the first failed probe re-opens) |
| shouldTransitionBackToOpenStateWhenSlowCallRateIsAboveThreshold | deliberate difference: test_r4j_should_transition_back_to_open_state_when_slow_call_rate_is_above_threshold (the first slow probe re-opens) |
| shouldTransitionBackToClosedStateWhenFailureIsBelowThreshold | deliberate difference: test_r4j_should_transition_back_to_closed_state_when_failure_is_below_threshold (1 failed probe of 4 re-opens; 4 successes close, window empty) |
| shouldResetMetrics | test_r4j_should_reset_metrics |
| shouldDisableCircuitBreaker | test_r4j_should_disable_circuit_breaker (a tool declared ``breaker=None``; no run-time switch) |
| shouldForceOpenCircuitBreaker | no equivalent: no forced-open state |
| shouldReleasePermissionWhenExceptionIgnored | test_r4j_should_release_permission_when_exception_ignored; deliberate difference in its last step (a failure after 3 successes re-opens) |
| shouldIgnoreExceptionsAndThenTransitionToClosed | test_r4j_should_ignore_exceptions_and_then_transition_to_closed |
| shouldNotAllowTransitionFromClosedToHalfOpen | test_r4j_should_not_allow_transition_from_closed_to_half_open (no manual transitions: a closed breaker never probes) |
| shouldResetToClosedState | test_r4j_should_reset_to_closed_state (``ResetBreaker``) |
| shouldResetClosedState | test_r4j_should_reset_closed_state (failed before issue #15 point 6) |
| shouldResetMetricsAfterMetricsOnlyStateTransition | no equivalent: no metrics-only state |
| shouldRecordMetricsInMetricsOnlyState | no equivalent: no metrics-only state, no event publisher |
| shouldPublishEachEventOnceInMetricOnlyState | no equivalent: no metrics-only state, no event publisher |
| allCircuitBreakerStatesAllowTransitionToMetricsOnlyMode | no equivalent: no metrics-only state, no manual transitions |
| allCircuitBreakerStatesAllowTransitionToItsOwnState | no equivalent: no manual transitions |
| circuitBreakerDoesNotPublishStateTransitionEventsForInternalTransitions | test_r4j_circuit_breaker_does_not_publish_state_transition_events_for_internal_transitions (journal events, not listeners) |
| circuitBreakerTransitionsToOpenAfterWaitDurationInHalfOpenState | deliberate difference: test_r4j_circuit_breaker_transitions_to_open_after_wait_duration_in_half_open_state (hung probes are re-armed; no timer) |
| circuitBreakerTransitionsToClosedAfterWaitDurationInHalfOpenState | deliberate difference: test_r4j_circuit_breaker_transitions_to_closed_after_wait_duration_in_half_open_state (never closed without successful probes) |
| circuitBreakerInitializeInClosedState | test_r4j_circuit_breaker_initialize_in_closed_state |
| circuitBreakerInitializeInOpenState | test_r4j_circuit_breaker_initialize_in_open_state (no initial-state option: a journal that ends open) |
| circuitBreakerInitializeInMetricOnlyState | no equivalent: no metrics-only state |

pybreaker ``tests/pybreaker_test.py`` (danielfm/pybreaker @ 3c436f20, file last changed in
a500113d). pybreaker's ``fail_max=N`` (N failures in a row) is tether's ``failure_threshold=N,
window_size=N``; its ``reset_timeout`` is ``open_duration``; its ``success_threshold`` is
``half_open_probes``. Its storage-based cases ran against memory and Redis; here they run
through a runtime on SQLite.

| original case | tether |
|---|---|
| test_successful_call | test_pybreaker_successful_call |
| test_one_failed_call | test_pybreaker_one_failed_call |
| test_one_successful_call_after_failed_call | test_pybreaker_one_successful_call_after_failed_call (no counter reset: the window keeps the failure, but 3 more in a row are needed to trip) |
| test_several_failed_calls_setting_absent | deliberate difference: test_pybreaker_several_failed_calls_setting_absent (the tripping call reports its own failure) |
| test_throw_new_error_on_trip_false | test_pybreaker_throw_new_error_on_trip_false |
| test_throw_new_error_on_trip_true | deliberate difference: test_pybreaker_throw_new_error_on_trip_true (no such option) |
| test_traceback_in_circuitbreaker_error | test_pybreaker_traceback_in_circuitbreaker_error (the tripping call's error chains the cause; the refusal says why) |
| test_failed_call_after_timeout | test_pybreaker_failed_call_after_timeout (re-opened for longer: growth) |
| test_successful_after_timeout | test_pybreaker_successful_after_timeout |
| test_failed_call_when_halfopen | test_pybreaker_failed_call_when_halfopen (no ``half_open()``: tripped and due) |
| test_successful_call_when_halfopen | test_pybreaker_successful_call_when_halfopen |
| test_close | test_pybreaker_close (``ResetBreaker``) |
| test_transition_events | test_pybreaker_transition_events (the journal, not listeners) |
| test_call_events | no equivalent: no listeners (each call is a ledger row, a span and a log line) |
| test_generator | no equivalent: tools are async functions, not generators |
| test_contextmanager | no equivalent: the breaker guards tools, not blocks of code |
| test_default_state | test_pybreaker_default_state (the state is the journal's fold) |
| test_default_params | test_pybreaker_default_params |
| test_new_with_custom_reset_timeout | test_pybreaker_new_with_custom_reset_timeout |
| test_new_with_custom_fail_max | test_pybreaker_new_with_custom_fail_max |
| test_new_with_custom_excluded_exceptions | test_pybreaker_new_with_custom_excluded_exceptions (``record_on=()``) |
| test_fail_max_setter | test_pybreaker_fail_max_setter (frozen policies: ``msgspec.structs.replace``, validated again) |
| test_reset_timeout_setter | test_pybreaker_reset_timeout_setter |
| test_call_with_no_args | test_pybreaker_call_with_no_args |
| test_call_with_args | test_pybreaker_call_with_args (bound to the tool's parameters by name before anything is recorded) |
| test_call_with_kwargs | test_pybreaker_call_with_kwargs |
| test_call_async_with_no_args, test_call_async_with_args, test_call_async_with_kwargs | the same as their synchronous cases (every tether tool is async); Tornado: no equivalent |
| test_add_listener, test_add_listeners, test_remove_listener | no equivalent: no listeners (transitions are journal events, structlog events and the ``tether.breakers.transitions`` counter) |
| test_excluded_exceptions | test_pybreaker_excluded_exceptions (``classifier``) |
| test_excluded_callable_exceptions | test_pybreaker_excluded_callable_exceptions |
| test_excluded_callable_and_types_exceptions | test_pybreaker_excluded_callable_and_types_exceptions |
| test_add_excluded_exception, test_add_excluded_exceptions, test_remove_excluded_exception | test_pybreaker_add_excluded_exception (a replaced policy) |
| test_decorator | test_pybreaker_decorator (``@tether.tool``) |
| test_decorator_call_future, test_no_tornado_raises | no equivalent: Tornado |
| test_name | test_pybreaker_name (a tool's name names its breaker) |
| test_success_threshold_default_behavior | test_pybreaker_success_threshold_default_behavior |
| test_success_threshold_multiple_successes_required | test_pybreaker_success_threshold_multiple_successes_required |
| test_success_threshold_failure_resets_counter | test_pybreaker_success_threshold_failure_resets_counter |
| test_success_threshold_property | test_pybreaker_success_threshold_property |
| test_success_threshold_redis_storage | test_pybreaker_success_threshold_redis_storage (across a restart, on SQLite) |
| test_create_new_state__bad_state | test_pybreaker_create_new_state__bad_state (a stored state that names no status) |
| test_notify_not_called_on_init | test_pybreaker_notify_not_called_on_init (folding decides nothing) |
| test_notify_called_on_state_change | test_pybreaker_notify_called_on_state_change |
| test_failure_count_not_reset_during_creation | test_pybreaker_failure_count_not_reset_during_creation |
| test_state_opened_at_not_reset_during_creation | test_pybreaker_state_opened_at_not_reset_during_creation |
| test_namespace, test_cluster_mode (Redis) | no equivalent: no Redis storage; a breaker is a journaled actor in the store |
| test_fallback_state, test_missing_state (Redis) | no equivalent: a breaker whose journal cannot be read is replaced by an in-memory one and said so (tests/badinput/test_corrupt_store.py); a missing journal is a new, closed breaker |
| CircuitBreakerThreadsTestCase.test_fail_thread_safety | test_pybreaker_fail_thread_safety (concurrent sessions, not threads) |
| CircuitBreakerThreadsTestCase.test_success_thread_safety | test_pybreaker_success_thread_safety |
| CircuitBreakerThreadsTestCase.test_half_open_thread_safety | test_pybreaker_half_open_thread_safety |
| CircuitBreakerThreadsTestCase.test_fail_max_thread_safety | test_pybreaker_fail_max_thread_safety |
| CircuitBreakerRedisConcurrencyTestCase (4 cases) | no equivalent: one runtime owns a breaker; other runtimes on the store use an in-memory one (docs/operations.md) |
| CircuitBreakerContextManagerTestCase.test_calling | test_pybreaker_calling (the context manager's semantics, as a caller of a tool sees them) |
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import tether
from tests.actors.breaker_helpers import T0, admitted, call, refused, status, trip
from tests.actors.breaker_suite_actors import (
    SERVICE,
    Client,
    Lookup,
    LookupByPosition,
    Ping,
    Use,
    ping,
)
from tether.actors.guards.actors import GetBreakerState, ResetBreaker, breaker_id
from tether.actors.guards.breaker import (
    Admitted,
    BreakerCallRecorded,
    BreakerCore,
    BreakerEvent,
    BreakerHalfOpened,
    BreakerOpened,
    BreakerPolicy,
    BreakerProbeAdmitted,
    BreakerProbePassed,
    BreakerProbeReleased,
    BreakerState,
    CallToken,
    Outcome,
    WindowCounts,
)
from tether.errors import ConfigError
from tether.testing import FakeClock

TRANSITIONS = ("BreakerOpened", "BreakerHalfOpened", "BreakerClosed", "BreakerReset")


@pytest.fixture(autouse=True)
def _fresh_service() -> Iterator[None]:
    SERVICE.clear()
    yield
    SERVICE.clear()


# -- through a runtime: what a caller sees -----------------------------------------------------


def runtime(path: Path, clock: FakeClock) -> tether.Runtime:
    return tether.Runtime(path / "agents.db", clock=clock, poll_interval=0.02)


async def use(rt: tether.Runtime, tool: str, n: int, session: str = "c1") -> str:
    """``session`` (a Client, spawned or resumed) calls ``tool``; what it was told."""
    ref = await rt.spawn(Client, session)
    answer: str = await ref.ask(Use(tool=tool, n=n), timeout=5)
    return answer


async def breaker(rt: tether.Runtime, tool: str) -> dict[str, Any]:
    """The breaker's state as a person asks for it (``GetBreakerState``)."""
    told: dict[str, Any] = await rt.ref(breaker_id(tool)).ask(GetBreakerState(), timeout=5)
    return told


async def reset(rt: tether.Runtime, tool: str) -> dict[str, Any]:
    told: dict[str, Any] = await rt.ref(breaker_id(tool)).ask(ResetBreaker(by="ops"), timeout=5)
    return told


async def journal(rt: tether.Runtime, tool: str) -> list[str]:
    """The event types in the breaker's committed journal, in order."""
    rows = await rt.store.load_journal(breaker_id(tool), 0, 10_000)
    return [msgspec.msgpack.decode(row.payload)["type"] for row in rows]


async def trip_through(rt: tether.Runtime, tool: str, failures: int) -> list[str]:
    """``failures`` failed calls of ``tool`` from session c1; what c1 was told of each."""
    return [await use(rt, tool, n) for n in range(failures)]


async def concurrently(rt: tether.Runtime, tool: str, sessions: int, calls: int) -> list[str]:
    """``sessions`` sessions call ``tool`` ``calls`` times each, all sessions at once."""
    for s in range(sessions):
        await rt.spawn(Client, f"s{s}")
    answers: list[str] = []

    async def session(s: int) -> None:
        for n in range(calls):
            told = await use(rt, tool, 100 * s + n, f"s{s}")
            answers.append(told)

    async with anyio.create_task_group() as tg:
        for s in range(sessions):
            tg.start_soon(session, s)
    return answers


FAILED = (
    "failed: TransientToolError: tool '{}': 503 Service Unavailable (cause: TransientToolError)"
)


# resilience4j, through a runtime


@pytest.mark.anyio
async def test_r4j_should_return_the_correct_name(tmp_path: Path) -> None:
    """A tool's breaker is named after the tool: actor ``breaker:<tool>``."""
    SERVICE.mode["fail_max3"] = "ok"
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        assert await use(rt, "fail_max3", 1) == "ok 1"
        assert (await breaker(rt, "fail_max3"))["tool"] == "fail_max3"
        [guards] = [n for n in await rt.tree() if n.id == "tether.guards"]
    assert guards.find("breaker:fail_max3") is not None


@pytest.mark.anyio
async def test_r4j_should_throw_call_not_permitted_exception_when_state_is_open(
    tmp_path: Path,
) -> None:
    """An open breaker refuses with ``ToolUnavailable``; the dependency is not called."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        await trip_through(rt, "fail_max3", 3)
        told = await use(rt, "fail_max3", 9)
    assert told.startswith("unavailable: The tool 'fail_max3' is unavailable")
    assert told.endswith("(retry_in=30)")
    assert SERVICE.numbers("fail_max3") == [0, 1, 2]


@pytest.mark.anyio
async def test_r4j_should_disable_circuit_breaker(tmp_path: Path) -> None:
    """``breaker=None``: every call goes, however many fail, and no breaker is kept."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        told = await trip_through(rt, "unguarded", 10)
        assert await rt.store.get_actor(breaker_id("unguarded")) is None
    assert told == [FAILED.format("unguarded")] * 10
    assert SERVICE.numbers("unguarded") == list(range(10))


@pytest.mark.anyio
async def test_r4j_should_reset_to_closed_state(tmp_path: Path) -> None:
    """An operator's ``ResetBreaker`` closes an open breaker; the next call goes."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        await trip_through(rt, "fail_max3", 3)
        assert (await breaker(rt, "fail_max3"))["status"] == "open"
        assert (await reset(rt, "fail_max3"))["status"] == "closed"
        SERVICE.mode["fail_max3"] = "ok"
        assert await use(rt, "fail_max3", 7) == "ok 7"
        assert (await journal(rt, "fail_max3"))[-2:] == ["BreakerReset", "BreakerCallRecorded"]


@pytest.mark.anyio
async def test_r4j_should_reset_closed_state(tmp_path: Path) -> None:
    """Two successes in the window; a reset of the closed breaker forgets them."""
    SERVICE.mode["fail_max3"] = "ok"
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        for n in range(2):
            await use(rt, "fail_max3", n)
        assert (await breaker(rt, "fail_max3"))["window"] == {
            "calls": 2,
            "failures": 0,
            "slow": 0,
        }
        told = await reset(rt, "fail_max3")
    assert told["status"] == "closed"
    assert told["window"] == {"calls": 0, "failures": 0, "slow": 0}


# resilience4j, the state machine: the test class's breaker, as a tether policy

R4J = BreakerPolicy(
    failure_threshold=None,
    failure_rate=0.5,
    slow_call_rate=0.5,
    slow_call_duration=4.0,
    window="time",
    window_size=20,
    minimum_calls=5,
    open_duration=5,
    open_multiplier=1,  # resilience4j's waitDurationInOpenState is fixed unless a function is set
    half_open_probes=4,
    ignore=(ValueError,),  # NumberFormatException
)


def r4j(**changes: Any) -> BreakerCore:
    return BreakerCore(msgspec.structs.replace(R4J, **changes))


def r4j_open(**changes: Any) -> BreakerCore:
    """``transitionToOpenState()`` at T0: tether has no such call; 5 failures (100 %) trip it."""
    core = r4j(**changes)
    trip(core, T0)
    return core


def probes(core: BreakerCore, now: float, n: int) -> list[CallToken]:
    """``n`` callers at ``now``, each admitted as a probe."""
    tokens = [admitted(core, now) for _ in range(n)]
    assert all(t.probe for t in tokens)
    return tokens


def counts(core: BreakerCore, now: float) -> tuple[int, int, int]:
    c = core.counts(now)
    return c.calls, c.failures, c.slow


def test_r4j_should_increase_counter_on_release_permission() -> None:
    """Four permits; a released one (a cancelled probe) can be taken again."""
    core = r4j_open()
    first, *_ = probes(core, T0 + 5, 4)
    refused(core, T0 + 5)
    refused(core, T0 + 5)
    core.record(first, "cancelled", duration=0, now=T0 + 5)
    admitted(core, T0 + 5)
    refused(core, T0 + 5)


def test_r4j_should_throw_call_not_permitted_exception_when_not_further_test_calls_are_permitted() -> (
    None
):
    core = r4j_open()
    probes(core, T0 + 5, 4)
    refusal = refused(core, T0 + 5)
    assert (refusal.status, refusal.retry_at) == ("half_open", T0 + 10)
    assert "4 trial calls are checking" in refusal.describe("search", T0 + 5)


def test_r4j_should_only_permit_four_calls_in_half_open_state() -> None:
    """Four probes, then refusals; opened again and due again, four permits again."""
    core = r4j_open()
    tokens = probes(core, T0 + 5, 4)
    refused(core, T0 + 5)
    refused(core, T0 + 5)
    core.record(tokens[0], "failure", duration=0, now=T0 + 6)  # transitionToOpenState()
    assert status(core) == "open"
    probes(core, T0 + 11, 4)
    refused(core, T0 + 11)
    refused(core, T0 + 11)


def test_r4j_should_open_after_failure_rate_threshold_exceeded2() -> None:
    """Three successes, two failures (40 %): closed; one more failure (50 %): open."""
    core = r4j()
    outcomes: list[Outcome] = ["success", "success", "success", "failure", "failure"]
    for i, outcome in enumerate(outcomes):
        call(core, T0 + i, outcome)
    assert status(core) == "closed"
    call(core, T0 + 5, "failure")
    assert status(core) == "open"


def test_r4j_should_open_after_failure_rate_threshold_exceeded() -> None:
    """Three failures, then two successes: the fifth call, a success, brings the window to
    its minimum at 60 % failed and opens it, with one open event; the next caller is refused."""
    core = r4j()
    assert admitted(core, T0).probe is False
    for i in (1, 2, 3):
        call(core, T0, "failure")
        assert (status(core), counts(core, T0)) == ("closed", (i, i, 0))
    call(core, T0, "success")
    assert (status(core), counts(core, T0)) == ("closed", (4, 3, 0))
    events = call(core, T0, "success")
    assert [type(e) for e in events] == [BreakerCallRecorded, BreakerOpened]
    assert core.state.reason == "3 of 5 calls in the last 20 s failed (60%, limit 50%)"
    refused(core, T0)


def test_r4j_should_open_after_slow_call_rate_threshold_exceeded() -> None:
    """Slow error, slow success, fast error, fast success (40 % failed), slow success: 60 %
    slow opens it."""
    core = r4j()
    calls: list[tuple[Outcome, float]] = [
        ("failure", 5.0),
        ("success", 5.0),
        ("failure", 0.1),
        ("success", 0.1),
    ]
    for outcome, took in calls:
        call(core, T0, outcome, duration=took)
        assert status(core) == "closed"
    call(core, T0, "success", duration=5.0)
    assert status(core) == "open"
    assert (
        core.state.reason == "3 of 5 calls in the last 20 s took longer than 4 s (60%, limit 50%)"
    )


def test_r4j_should_open_after_slow_call_rate_threshold_exceeded_using_mock_clock() -> None:
    """The calls take their time on a FakeClock: 5 s, 5 s, 1 s, 1 s, 5 s."""
    clock = FakeClock(T0)
    core = r4j()

    def takes(seconds: float) -> None:
        token = admitted(core, clock.now())
        started = clock.now()
        clock.advance(seconds)
        core.record(token, "success", duration=clock.now() - started, now=clock.now())

    for seconds, expected in [(5, (1, 0, 1)), (5, (2, 0, 2)), (1, (3, 0, 2)), (1, (4, 0, 2))]:
        takes(seconds)
        assert (status(core), counts(core, clock.now())) == ("closed", expected)
    takes(5)
    assert status(core) == "open"
    assert (
        core.state.reason == "3 of 5 calls in the last 20 s took longer than 4 s (60%, limit 50%)"
    )


def test_r4j_should_transition_to_half_open_after_wait_duration() -> None:
    """Refused at 0 s and 3 s; at 6 s (past the 5 s) the caller is the first probe, and the
    half-open period starts with no calls counted."""
    core = r4j_open()
    refused(core, T0)
    refused(core, T0 + 3)
    assert status(core) == "open"
    assert admitted(core, T0 + 6).probe
    assert status(core) == "half_open"
    assert (core.state.probes_admitted, core.state.probes_passed) == (1, 0)
    assert counts(core, T0 + 6) == (0, 0, 0)


def test_r4j_should_transition_to_half_open_after_passed_wait_duration() -> None:
    """Open for 2 h (``transitionToOpenStateFor``: here the policy's ``open_duration``)."""
    core = r4j_open(open_duration=7200)
    refused(core, T0)
    refused(core, T0 + 3600)
    assert status(core) == "open"
    assert admitted(core, T0 + 7201).probe
    assert status(core) == "half_open"


def test_r4j_should_transition_to_half_open_after_wait_interval() -> None:
    """Exponential backoff (resilience4j's ``ofExponentialBackoff(5 s)`` = x1.5): the first
    trip is open 5 s, the second 7.5 s."""
    core = r4j_open(open_multiplier=1.5)
    refused(core, T0 + 3)
    probe = admitted(core, T0 + 6)
    core.record(probe, "failure", duration=0, now=T0 + 6)
    assert core.state.until == T0 + 13.5
    refused(core, T0 + 12)
    assert admitted(core, T0 + 17).probe
    assert status(core) == "half_open"


def test_r4j_should_transition_back_to_open_state_when_failure_rate_is_above_threshold() -> None:
    """Deliberate difference: resilience4j waits for the four probes (failure, failure,
    success, failure: 75 %); tether opens again at the first failed probe, and the others'
    answers are stale."""
    core = r4j_open()
    tokens = probes(core, T0 + 5, 4)
    events = core.record(tokens[0], "failure", duration=0, now=T0 + 5)
    assert events == [
        BreakerOpened(
            at=T0 + 5, until=T0 + 10, reason="a trial call failed (0 of 4 had succeeded)", trips=2
        )
    ]
    later: list[Outcome] = ["failure", "success", "failure"]
    for token, outcome in zip(tokens[1:], later, strict=True):
        assert core.record(token, outcome, duration=0, now=T0 + 6) == []
    assert status(core) == "open"


def test_r4j_should_transition_back_to_open_state_when_slow_call_rate_is_above_threshold() -> None:
    """Deliberate difference: the first slow probe (5 s, slow above 4 s) opens it again."""
    core = r4j_open()
    tokens = probes(core, T0 + 5, 4)
    core.record(tokens[0], "success", duration=5, now=T0 + 10)
    assert status(core) == "open"
    assert core.state.reason == "a trial call took 5 s (slow above 4 s; 0 of 4 had succeeded)"


def test_r4j_should_transition_back_to_closed_state_when_failure_is_below_threshold() -> None:
    """Deliberate difference: a failed probe among four (25 %, under resilience4j's 50 %)
    opens it again; four successful probes close it, and the closed window starts empty."""
    core = r4j_open()
    tokens = probes(core, T0 + 5, 4)
    core.record(tokens[0], "failure", duration=0, now=T0 + 5)
    assert status(core) == "open"
    tokens = probes(core, T0 + 10, 4)
    for token in tokens:
        core.record(token, "success", duration=0, now=T0 + 10)
    assert status(core) == "closed"
    assert counts(core, T0 + 10) == (0, 0, 0)
    call(core, T0 + 10, "success")
    assert counts(core, T0 + 10) == (1, 0, 0)


def test_r4j_should_reset_metrics() -> None:
    core = r4j()
    call(core, T0, "success")
    call(core, T0, "failure")
    assert counts(core, T0) == (2, 1, 0)
    core.reset(T0, by="ops")
    assert counts(core, T0) == (0, 0, 0)


def test_r4j_should_release_permission_when_exception_ignored() -> None:
    """Three successful probes; an ignored exception frees its permit and counts as nothing;
    then a failure. Deliberate difference at the end: resilience4j closes (1 failure in 4 is
    under 50 %), tether opens again (every probe must succeed)."""
    core = r4j_open()
    tokens = probes(core, T0 + 5, 4)
    for i, token in enumerate(tokens[:3], start=1):
        core.record(token, "success", duration=0, now=T0 + 5)
        assert (status(core), core.state.probes_passed) == ("half_open", i)
    ignored = R4J.classify(ValueError("not a number"))
    assert core.record(tokens[3], ignored, duration=0, now=T0 + 5) == [
        BreakerProbeReleased(at=T0 + 5, outcome="ignored")
    ]
    assert (status(core), core.state.probes_passed) == ("half_open", 3)
    last = admitted(core, T0 + 5)
    core.record(last, R4J.classify(RuntimeError()), duration=0, now=T0 + 5)
    assert status(core) == "open"


def test_r4j_should_ignore_exceptions_and_then_transition_to_closed() -> None:
    """Four ignored probes free their permits; then four successes close the breaker."""
    core = r4j_open()
    for _ in range(4):
        token = admitted(core, T0 + 5)
        core.record(token, R4J.classify(ValueError()), duration=0, now=T0 + 5)
        assert status(core) == "half_open"
    assert (core.state.probes_admitted, core.state.probes_passed) == (0, 0)
    for _ in range(3):
        core.record(admitted(core, T0 + 5), "success", duration=0, now=T0 + 5)
        assert status(core) == "half_open"
    core.record(admitted(core, T0 + 5), "success", duration=0, now=T0 + 5)
    assert status(core) == "closed"
    assert counts(core, T0 + 5) == (0, 0, 0)


def test_r4j_should_not_allow_transition_from_closed_to_half_open() -> None:
    """A closed breaker never probes: its callers are plain calls and nothing is journaled."""
    core = r4j()
    for dt in (0, 5, 3600):
        answer, events = core.admit(T0 + dt)
        assert isinstance(answer, Admitted)
        assert (answer.probe, events) == (False, [])
    assert status(core) == "closed"


def test_r4j_circuit_breaker_does_not_publish_state_transition_events_for_internal_transitions() -> (
    None
):
    """Only transitions journal a transition event: refusals journal nothing, more probes in
    the same half-open period are not a transition."""
    core = r4j()
    journal_: list[BreakerEvent] = []
    for _ in range(5):
        journal_ += call(core, T0, "failure")
    for dt in (0, 1, 4):
        journal_ += core.admit(T0 + dt)[1]  # refused
    tokens = []
    for _ in range(6):  # four probes, two refused
        answer, events = core.admit(T0 + 5)
        journal_ += events
        if isinstance(answer, Admitted):
            tokens.append(answer.token)
    journal_ += core.record(tokens[0], "failure", duration=0, now=T0 + 5)
    kinds = [type(e).__name__ for e in journal_]
    assert [k for k in kinds if k in TRANSITIONS] == [
        "BreakerOpened",
        "BreakerHalfOpened",
        "BreakerOpened",
    ]
    assert kinds.count("BreakerProbeAdmitted") == 3


def test_r4j_circuit_breaker_transitions_to_open_after_wait_duration_in_half_open_state() -> None:
    """Deliberate difference: resilience4j opens a half-open breaker after
    ``maxWaitDurationInHalfOpenState`` on a timer. tether has no timer: once every probe has
    run for an open duration without answering, the next caller re-arms them (a new probe in
    their place, still half-open); their late answers are stale."""
    core = r4j_open()
    hung = probes(core, T0 + 5, 4)
    refused(core, T0 + 9)
    answer, events = core.admit(T0 + 10)
    assert isinstance(answer, Admitted)
    assert answer.probe
    assert events == [BreakerHalfOpened(at=T0 + 10, until=T0 + 15)]
    assert status(core) == "half_open"
    assert all(core.record(t, "failure", duration=6, now=T0 + 11) == [] for t in hung)


def test_r4j_circuit_breaker_transitions_to_closed_after_wait_duration_in_half_open_state() -> None:
    """Deliberate difference: ``transitionToStateAfterWaitDuration(CLOSED)`` closes without
    evidence; tether closes only on the probes' successes, however long they take."""
    core = r4j_open()
    probes(core, T0 + 5, 4)
    refused(core, T0 + 6)
    assert status(core) == "half_open"
    later = admitted(core, T0 + 3600)  # re-armed, not closed
    assert (status(core), later.probe) == ("half_open", True)


def test_r4j_circuit_breaker_initialize_in_closed_state() -> None:
    assert BreakerCore(R4J).state.status == "closed"
    assert BreakerCore.fold(R4J, []).state == BreakerState()
    core = r4j_open()
    assert status(core) == "open"


def test_r4j_circuit_breaker_initialize_in_open_state() -> None:
    """tether's way to start open: a journal that ends open (I10) folds to open, and goes
    half-open after its wait like any open breaker."""
    opened = BreakerOpened(at=T0, until=T0 + 2, reason="3 of 5 calls failed", trips=1)
    core = BreakerCore.fold(R4J, [opened])
    assert status(core) == "open"
    refused(core, T0 + 1)
    assert admitted(core, T0 + 2).probe
    assert status(core) == "half_open"


# pybreaker, through a runtime (pybreaker's fail_max=N is tether's N failures in a window of N)


@pytest.mark.anyio
async def test_pybreaker_successful_call(tmp_path: Path) -> None:
    SERVICE.mode["fail_max3"] = "ok"
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        assert await use(rt, "fail_max3", 1) == "ok 1"
        state = await breaker(rt, "fail_max3")
    assert (state["status"], state["window"]["failures"]) == ("closed", 0)


@pytest.mark.anyio
async def test_pybreaker_one_failed_call(tmp_path: Path) -> None:
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        assert await use(rt, "fail_max3", 1) == FAILED.format("fail_max3")
        state = await breaker(rt, "fail_max3")
    assert (state["status"], state["window"]["failures"]) == ("closed", 1)


@pytest.mark.anyio
async def test_pybreaker_one_successful_call_after_failed_call(tmp_path: Path) -> None:
    """pybreaker zeroes its counter on a success; tether's window of 3 keeps the failure, but
    it takes 3 failures in a row after the success to trip, as in pybreaker."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        await use(rt, "fail_max3", 0)
        SERVICE.mode["fail_max3"] = "ok"
        assert await use(rt, "fail_max3", 1) == "ok 1"
        SERVICE.mode["fail_max3"] = "fail"
        await use(rt, "fail_max3", 2)
        await use(rt, "fail_max3", 3)
        assert (await breaker(rt, "fail_max3"))["status"] == "closed"
        await use(rt, "fail_max3", 4)
        assert (await breaker(rt, "fail_max3"))["status"] == "open"


@pytest.mark.anyio
async def test_pybreaker_several_failed_calls_setting_absent(tmp_path: Path) -> None:
    """Three failures open it. Deliberate difference: pybreaker raises CircuitBreakerError
    from the third call; tether tells the third caller its own call's failure (the call was
    made), and refuses from the fourth call on."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        told = await trip_through(rt, "fail_max3", 3)
        state = await breaker(rt, "fail_max3")
    assert told == [FAILED.format("fail_max3")] * 3
    assert (state["status"], state["trips"]) == ("open", 1)
    assert state["reason"] == "3 of the last 3 calls failed"


@pytest.mark.anyio
async def test_pybreaker_throw_new_error_on_trip_false(tmp_path: Path) -> None:
    """The tripping call reports its own error; the next is refused without being made."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        told = await trip_through(rt, "fail_max3", 4)
        assert (await breaker(rt, "fail_max3"))["status"] == "open"
    assert told[:3] == [FAILED.format("fail_max3")] * 3
    assert told[3].startswith("unavailable:")
    assert SERVICE.numbers("fail_max3") == [0, 1, 2]


@pytest.mark.anyio
async def test_pybreaker_throw_new_error_on_trip_true(tmp_path: Path) -> None:
    """Deliberate difference: tether has no ``throw_new_error_on_trip=True``; the tripping
    caller learns that its call failed (ToolFailed), not that the breaker opened."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        told = await trip_through(rt, "fail_max3", 3)
    assert not any(line.startswith("unavailable") for line in told)


@pytest.mark.anyio
async def test_pybreaker_traceback_in_circuitbreaker_error(tmp_path: Path) -> None:
    """The tripping call's error carries the dependency's exception as its cause; the later
    refusal says why the breaker opened."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        told = await trip_through(rt, "fail_max3", 4)
    assert told[2].endswith("(cause: TransientToolError)")
    assert "because 3 of the last 3 calls failed" in told[3]


@pytest.mark.anyio
async def test_pybreaker_failed_call_after_timeout(tmp_path: Path) -> None:
    """After the open time one trial call is made; it fails: open again, for longer."""
    clock = FakeClock(T0)
    async with runtime(tmp_path, clock) as rt:
        await trip_through(rt, "fail_max3", 3)
        clock.advance(31)
        assert await use(rt, "fail_max3", 3) == FAILED.format("fail_max3")
        refusal = await use(rt, "fail_max3", 4)
        state = await breaker(rt, "fail_max3")
    assert refusal.endswith("(retry_in=60)")
    assert (state["status"], state["trips"]) == ("open", 2)
    assert SERVICE.numbers("fail_max3") == [0, 1, 2, 3]


@pytest.mark.anyio
async def test_pybreaker_successful_after_timeout(tmp_path: Path) -> None:
    """While open the dependency is not called; after the open time one successful call
    closes the breaker, and it was called exactly once."""
    clock = FakeClock(T0)
    async with runtime(tmp_path, clock) as rt:
        await trip_through(rt, "fail_max3", 3)
        SERVICE.mode["fail_max3"] = "ok"
        assert (await use(rt, "fail_max3", 8)).startswith("unavailable")
        clock.advance(31)
        assert await use(rt, "fail_max3", 9) == "ok 9"
        state = await breaker(rt, "fail_max3")
    assert (state["status"], state["window"]["failures"]) == ("closed", 0)
    assert SERVICE.numbers("fail_max3") == [0, 1, 2, 9]


@pytest.mark.anyio
async def test_pybreaker_close(tmp_path: Path) -> None:
    """An operator closes it by hand (``ResetBreaker``): counter 0, closed."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        await trip_through(rt, "fail_max3", 4)
        state = await reset(rt, "fail_max3")
    assert (state["status"], state["trips"], state["window"]["failures"]) == ("closed", 0, 0)


@pytest.mark.anyio
async def test_pybreaker_transition_events(tmp_path: Path) -> None:
    """closed -> open -> half-open -> closed, as the breaker's journal records it."""
    clock = FakeClock(T0)
    async with runtime(tmp_path, clock) as rt:
        await trip_through(rt, "fail_max3", 3)
        clock.advance(30)
        SERVICE.mode["fail_max3"] = "ok"
        await use(rt, "fail_max3", 3)
        kinds = await journal(rt, "fail_max3")
    assert [k for k in kinds if k in TRANSITIONS] == [
        "BreakerOpened",
        "BreakerHalfOpened",
        "BreakerClosed",
    ]


@pytest.mark.anyio
async def test_pybreaker_call_with_no_args(tmp_path: Path) -> None:
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        SERVICE.mode["ping"] = "ok"
        assert await (await rt.spawn(Client, "c1")).ask(Ping(), timeout=5) == "pong"
    assert SERVICE.calls == [("ping", {})]


@pytest.mark.anyio
async def test_pybreaker_call_with_args(tmp_path: Path) -> None:
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        SERVICE.mode["lookup"] = "ok"
        client = await rt.spawn(Client, "c1")
        told = await client.ask(LookupByPosition(key="a", default="1"), timeout=5)
    assert told == "a=1"
    assert SERVICE.calls == [("lookup", {"key": "a", "default": "1"})]


@pytest.mark.anyio
async def test_pybreaker_call_with_kwargs(tmp_path: Path) -> None:
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        SERVICE.mode["lookup"] = "ok"
        told = await (await rt.spawn(Client, "c1")).ask(Lookup(key="a", default="1"), timeout=5)
    assert told == "a=1"
    assert SERVICE.calls == [("lookup", {"key": "a", "default": "1"})]


@pytest.mark.anyio
async def test_pybreaker_success_threshold_redis_storage(tmp_path: Path) -> None:
    """Two successes needed in half-open, the first before a restart and the second after:
    the probe that passed is in the breaker's journal (I10)."""
    clock = FakeClock(T0)
    async with runtime(tmp_path, clock) as rt:
        await trip_through(rt, "success_threshold2", 3)
        clock.advance(31)
        SERVICE.mode["success_threshold2"] = "ok"
        assert await use(rt, "success_threshold2", 3) == "ok 3"
        before = await breaker(rt, "success_threshold2")
    async with runtime(tmp_path, clock) as rt:
        assert await use(rt, "success_threshold2", 4) == "ok 4"
        after = await breaker(rt, "success_threshold2")
        kinds = await journal(rt, "success_threshold2")
    assert (before["status"], before["probes"]["passed"]) == ("half_open", 1)
    assert after["status"] == "closed"
    assert kinds[-4:] == [
        "BreakerHalfOpened",  # the first probe, before the restart
        "BreakerProbePassed",
        "BreakerProbeAdmitted",  # the second, after it
        "BreakerClosed",
    ]


@pytest.mark.anyio
async def test_pybreaker_calling(tmp_path: Path) -> None:
    """pybreaker's ``calling()`` context manager, as tether's caller sees it: two failures
    open it; while open the call is not made; after the open time a success closes it."""
    clock = FakeClock(T0)
    async with runtime(tmp_path, clock) as rt:
        await trip_through(rt, "fail_max2", 2)
        assert (await breaker(rt, "fail_max2"))["status"] == "open"
        SERVICE.mode["fail_max2"] = "ok"
        assert (await use(rt, "fail_max2", 5)).startswith("unavailable")
        clock.advance(10)
        assert await use(rt, "fail_max2", 6) == "ok 6"
        state = await breaker(rt, "fail_max2")
    assert (state["status"], state["window"]["failures"]) == ("closed", 0)
    assert SERVICE.numbers("fail_max2") == [0, 1, 6]


# pybreaker's thread-safety cases, as concurrent sessions of one runtime


@pytest.mark.anyio
async def test_pybreaker_fail_thread_safety(tmp_path: Path) -> None:
    """3 sessions x 20 failures at once: the window counts 60, exactly."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        told = await concurrently(rt, "fail_max100", sessions=3, calls=20)
        state = await breaker(rt, "fail_max100")
    assert told == [FAILED.format("fail_max100")] * 60
    assert (state["status"], state["window"]["failures"]) == ("closed", 60)


@pytest.mark.anyio
async def test_pybreaker_success_thread_safety(tmp_path: Path) -> None:
    SERVICE.mode["rated"] = "ok"
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        told = await concurrently(rt, "rated", sessions=3, calls=20)
        state = await breaker(rt, "rated")
    assert all(line.startswith("ok") for line in told)
    assert state["window"] == {"calls": 60, "failures": 0, "slow": 0}


@pytest.mark.anyio
async def test_pybreaker_half_open_thread_safety(tmp_path: Path) -> None:
    """5 sessions call at once after the open time: one half-open transition, one call made
    (it is still running while the other 4 are refused)."""
    clock = FakeClock(T0)
    async with runtime(tmp_path, clock) as rt:
        await trip_through(rt, "fail_max1", 1)
        clock.advance(10)
        SERVICE.mode["fail_max1"] = "block"
        told: list[str] = []
        for s in range(5):
            await rt.spawn(Client, f"s{s}")

        async def session(s: int) -> None:
            told.append(await use(rt, "fail_max1", 10 + s, f"s{s}"))

        async with anyio.create_task_group() as tg:
            for s in range(5):
                tg.start_soon(session, s)
            with anyio.fail_after(5):
                while len(told) < 4:
                    await anyio.sleep(0.01)
            SERVICE.released.set()
        kinds = await journal(rt, "fail_max1")
    assert kinds.count("BreakerHalfOpened") == 1
    assert sum(line.startswith("unavailable") for line in told) == 4
    assert sum(line.startswith("ok") for line in told) == 1
    assert len(SERVICE.numbers("fail_max1")) == 2  # the trip, and the one probe


@pytest.mark.anyio
async def test_pybreaker_fail_max_thread_safety(tmp_path: Path) -> None:
    """3 sessions fail at once: the journal counts exactly 5 failures and one trip; answers
    of calls admitted before the trip that arrive after it are stale."""
    async with runtime(tmp_path, FakeClock(T0)) as rt:
        told = await concurrently(rt, "fail_max5", sessions=3, calls=10)
        kinds = await journal(rt, "fail_max5")
    assert kinds.count("BreakerCallRecorded") == 5
    assert kinds.count("BreakerOpened") == 1
    made = len(SERVICE.numbers("fail_max5"))
    assert 5 <= made <= 7  # at most one call per other session was under way at the trip
    assert sum(line.startswith("unavailable") for line in told) == 30 - made


# pybreaker, the state machine


def consecutive(failures: int = 5, **policy: Any) -> BreakerPolicy:
    """pybreaker's ``CircuitBreaker(fail_max=failures)``."""
    return BreakerPolicy(failure_threshold=failures, window_size=failures, **policy)


def half_open(policy: BreakerPolicy) -> BreakerCore:
    """pybreaker's ``half_open()``: tether gets there by tripping and waiting."""
    core = BreakerCore(policy)
    trip(core, T0)
    return core


def test_pybreaker_failed_call_when_halfopen() -> None:
    core = half_open(consecutive())
    probe = admitted(core, T0 + 60)
    assert status(core) == "half_open"
    core.record(probe, "failure", duration=0, now=T0 + 60)
    assert (status(core), core.state.trips) == ("open", 2)


def test_pybreaker_successful_call_when_halfopen() -> None:
    core = half_open(consecutive())
    probe = admitted(core, T0 + 60)
    core.record(probe, "success", duration=0, now=T0 + 60)
    assert (status(core), core.state.trips, counts(core, T0 + 60)) == ("closed", 0, (0, 0, 0))


def test_pybreaker_default_state() -> None:
    """The state a breaker starts in is the one its stored journal folds to."""
    policy = consecutive(3)
    opened: list[BreakerEvent] = [BreakerOpened(at=T0, until=T0 + 60, reason="r", trips=1)]
    half: list[BreakerEvent] = [*opened, BreakerHalfOpened(at=T0 + 60, until=T0 + 120)]
    journals: list[tuple[list[BreakerEvent], str]] = [
        ([], "closed"),
        (opened, "open"),
        (half, "half_open"),
    ]
    for events, expected in journals:
        assert BreakerCore.fold(policy, events).state.status == expected


def test_pybreaker_default_params() -> None:
    """tether's defaults: 5 failures (in the last 10 calls), open 60 s, one probe, every
    exception recorded, none ignored."""
    policy = BreakerPolicy()
    assert (policy.failure_threshold, policy.window_size, policy.open_duration) == (5, 10, 60)
    assert (policy.half_open_probes, policy.record_on, policy.ignore) == (1, (Exception,), ())
    assert BreakerCore(policy).state.status == "closed"


def test_pybreaker_new_with_custom_reset_timeout() -> None:
    policy = BreakerPolicy(open_duration=30)
    assert (policy.open_duration, policy.failure_threshold) == (30, 5)


def test_pybreaker_new_with_custom_fail_max() -> None:
    policy = consecutive(10)
    assert (policy.failure_threshold, policy.open_duration) == (10, 60)


def test_pybreaker_new_with_custom_excluded_exceptions() -> None:
    """pybreaker ``exclude=[Exception]`` counts every exception as a success: tether's
    ``record_on=()``."""
    policy = BreakerPolicy(record_on=())
    assert policy.classify(RuntimeError()) == "success"


def test_pybreaker_fail_max_setter() -> None:
    """Policies are frozen; a changed copy is validated again."""
    policy = msgspec.structs.replace(consecutive(5), failure_threshold=10, window_size=10)
    assert policy.failure_threshold == 10
    with pytest.raises(ConfigError, match="failure_threshold"):
        msgspec.structs.replace(policy, failure_threshold=11)


def test_pybreaker_reset_timeout_setter() -> None:
    policy = msgspec.structs.replace(BreakerPolicy(), open_duration=30)
    assert policy.open_duration == 30
    with pytest.raises(ConfigError, match="open_duration"):
        msgspec.structs.replace(policy, open_duration=0)


def lookup_is_fine(exc: BaseException) -> Outcome | None:
    """pybreaker's ``exclude=[LookupError]`` (subclasses too): a success."""
    return "success" if isinstance(exc, LookupError) else None


def test_pybreaker_excluded_exceptions() -> None:
    """An excluded exception (KeyError, a LookupError, too) counts as a success: with
    ``fail_max=2`` the failures either side of it never trip."""
    policy = consecutive(2, classifier=lookup_is_fine)
    core = BreakerCore(policy)
    for exc in (NotImplementedError(), LookupError(), NotImplementedError(), KeyError()):
        call(core, T0, policy.classify(exc))
        assert status(core) == "closed"
    assert [policy.classify(e) for e in (LookupError(), KeyError())] == ["success"] * 2
    assert counts(core, T0) == (2, 1, 0)  # never two failures in a row


def test_pybreaker_excluded_callable_exceptions() -> None:
    class Exc(Exception):
        def __init__(self, value: str) -> None:
            self.value = value

    def good_is_fine(exc: BaseException) -> Outcome | None:
        return "success" if isinstance(exc, Exc) and exc.value == "good" else None

    policy = consecutive(2, classifier=good_is_fine)
    outcomes = [policy.classify(e) for e in (Exc("bad"), Exc("good"), NotImplementedError())]
    assert outcomes == ["failure", "success", "failure"]


def test_pybreaker_excluded_callable_and_types_exceptions() -> None:
    class Exc(Exception):
        def __init__(self, value: str) -> None:
            self.value = value

    def good_or_lookup_is_fine(exc: BaseException) -> Outcome | None:
        good = isinstance(exc, Exc) and exc.value == "good"
        return "success" if good else lookup_is_fine(exc)

    policy = consecutive(2, classifier=good_or_lookup_is_fine)
    errors = (Exc("bad"), Exc("good"), NotImplementedError(), LookupError())
    assert [policy.classify(e) for e in errors] == ["failure", "success", "failure", "success"]


def test_pybreaker_add_excluded_exception() -> None:
    """Excluding more (or fewer) exceptions later: a replaced copy of the policy."""
    policy = BreakerPolicy()
    more = msgspec.structs.replace(policy, record_on=(), ignore=(NotImplementedError,))
    assert more.classify(NotImplementedError()) == "ignored"
    fewer = msgspec.structs.replace(more, ignore=())
    assert fewer.classify(NotImplementedError()) == "success"


def test_pybreaker_decorator() -> None:
    """``@tether.tool`` keeps the function's name and docstring; the breaker is the tool's."""
    assert (ping.name, ping.description) == ("ping", "A call with no arguments.")
    assert breaker_id(ping.name) == "breaker:ping"


def test_pybreaker_name() -> None:
    async def fn() -> None: ...

    named = tether.Tool(fn, name="test_breaker")
    assert breaker_id(named.name) == "breaker:test_breaker"


def test_pybreaker_success_threshold_default_behavior() -> None:
    core = half_open(consecutive(3))
    core.record(admitted(core, T0 + 60), "success", duration=0, now=T0 + 60)
    assert (status(core), core.state.probes_passed) == ("closed", 0)


def test_pybreaker_success_threshold_multiple_successes_required() -> None:
    core = half_open(consecutive(3, half_open_probes=3))
    for passed in (1, 2):
        assert core.record(admitted(core, T0 + 60), "success", duration=0, now=T0 + 60) == [
            BreakerProbePassed(at=T0 + 60)
        ]
        assert (status(core), core.state.probes_passed) == ("half_open", passed)
    core.record(admitted(core, T0 + 60), "success", duration=0, now=T0 + 60)
    assert (status(core), core.state.probes_passed) == ("closed", 0)


def test_pybreaker_success_threshold_failure_resets_counter() -> None:
    core = half_open(consecutive(3, half_open_probes=3))
    for _ in range(2):
        core.record(admitted(core, T0 + 60), "success", duration=0, now=T0 + 60)
    core.record(admitted(core, T0 + 60), "failure", duration=0, now=T0 + 60)
    assert (status(core), core.state.probes_passed) == ("open", 0)


def test_pybreaker_success_threshold_property() -> None:
    policy = BreakerPolicy(half_open_probes=5)
    assert policy.half_open_probes == 5
    assert msgspec.structs.replace(policy, half_open_probes=10).half_open_probes == 10
    with pytest.raises(ConfigError, match="half_open_probes"):
        msgspec.structs.replace(policy, half_open_probes=0)


def test_pybreaker_create_new_state__bad_state() -> None:
    """A stored state naming no state tether knows is refused when read, not trusted."""
    bad = msgspec.msgpack.encode({"status": "foo"})
    with pytest.raises(msgspec.ValidationError, match="status"):
        msgspec.msgpack.Decoder(BreakerState).decode(bad)


def test_pybreaker_notify_not_called_on_init() -> None:
    """Rebuilding a breaker from its journal decides nothing and returns no event."""
    journal_ = [BreakerOpened(at=T0, until=T0 + 60, reason="r", trips=1)]
    core = BreakerCore.fold(consecutive(3), journal_)
    again = BreakerCore.fold(consecutive(3), journal_)
    assert core.state == again.state
    assert status(core) == "open"


def test_pybreaker_notify_called_on_state_change() -> None:
    """Every change of state is an event to journal (and to report)."""
    core = BreakerCore(consecutive(1))
    events = call(core, T0, "failure")
    assert [type(e) for e in events] == [BreakerCallRecorded, BreakerOpened]
    assert core.admit(T0 + 60)[1] == [BreakerHalfOpened(at=T0 + 60, until=T0 + 120)]


def test_pybreaker_failure_count_not_reset_during_creation() -> None:
    """Rebuilt from its journal, in each state, a breaker keeps its counts."""
    policy = consecutive(3, half_open_probes=2)
    live = BreakerCore(policy)
    closed = call(live, T0, "failure") + call(live, T0, "failure")
    assert BreakerCore.fold(policy, closed).counts(T0) == WindowCounts(calls=2, failures=2, slow=0)
    opened = closed + call(live, T0, "failure")
    assert BreakerCore.fold(policy, opened).state.trips == 1
    answer, halfway = live.admit(T0 + 60)
    assert isinstance(answer, Admitted)
    halfway = opened + halfway + live.record(answer.token, "success", duration=0, now=T0 + 60)
    assert BreakerCore.fold(policy, halfway).state == live.state
    assert (live.state.status, live.state.probes_passed) == ("half_open", 1)


def test_pybreaker_state_opened_at_not_reset_during_creation() -> None:
    journals: list[list[BreakerEvent]] = [
        [BreakerOpened(at=T0, until=T0 + 60, reason="r", trips=1)],
        [
            BreakerOpened(at=T0, until=T0 + 60, reason="r", trips=1),
            BreakerHalfOpened(at=T0 + 60, until=T0 + 120),
            BreakerProbeAdmitted(at=T0 + 61, until=T0 + 121),
        ],
    ]
    for events in journals:
        assert BreakerCore.fold(consecutive(3, half_open_probes=2), events).state.opened_at == T0
