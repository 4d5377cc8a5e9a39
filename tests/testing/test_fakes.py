"""Bad configuration of the test fakes (fault injector, scripted model, fake clock) is refused
by name when it is given, never accepted half-way or left to fail at the planned call."""

from __future__ import annotations

from typing import Any

import pytest

import tether
from tether.testing import FakeClock, FaultInjector, ScriptedModel


@tether.tool
async def lookup(order_id: str) -> str:
    return order_id


@pytest.mark.parametrize(
    ("calls", "problem"),
    [
        ([1, 0], "call numbers start at 1, got 0"),
        ([2, -3], "got -3"),
        ([True], "got True"),
        (3, "calls must be a list of call numbers, not 3"),
        ("12", "not '12'"),
        (None, "not None"),
    ],
)
def test_bad_call_numbers_are_refused_and_leave_the_plan_as_it_was(
    calls: Any, problem: str
) -> None:
    faults = FaultInjector()
    faults.fail(lookup, calls=[5], error=RuntimeError("planned"))
    with pytest.raises(tether.ConfigError, match=problem):
        faults.fail(lookup, calls=calls, error=RuntimeError("boom"))
    assert faults._plans == {"lookup": {5: ("fail", faults._plans["lookup"][5][1])}}


@pytest.mark.parametrize("error", ["boom", 503, None])
def test_a_fault_that_is_not_an_exception_is_refused_when_planned(error: Any) -> None:
    with pytest.raises(tether.ConfigError, match="error must be an exception"):
        FaultInjector().fail(lookup, calls=[1], error=error)


def test_an_exception_class_is_a_fault_like_an_instance() -> None:
    FaultInjector().fail(lookup, calls=[1], error=TimeoutError)


@pytest.mark.parametrize("seconds", ["1", True, None, float("nan"), -1])
def test_a_delay_that_is_not_a_number_of_seconds_is_refused(seconds: Any) -> None:
    with pytest.raises(tether.ConfigError, match="delay must be >= 0 seconds"):
        FaultInjector().delay(lookup, calls=[1], seconds=seconds)


@pytest.mark.parametrize("script", [None, 5, "final answer"])
def test_a_script_that_is_neither_decisions_nor_a_function_is_refused(script: Any) -> None:
    with pytest.raises(tether.ConfigError, match=r"a script is a list of tether\.ToolCall"):
        ScriptedModel(script)


def test_a_script_may_be_any_iterable_of_decisions() -> None:
    decisions: Any = (d for d in [tether.FinalAnswer(text="done")])
    ScriptedModel(decisions)


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), "1", True])
def test_the_fake_clock_refuses_to_go_back_or_to_nan(seconds: Any) -> None:
    clock = FakeClock(start=100.0)
    with pytest.raises(tether.ConfigError, match="advance takes a finite number of seconds"):
        clock.advance(seconds)
    assert clock.now() == 100.0
    clock.advance(0)
    clock.advance(2.5)
    assert clock.now() == 102.5
