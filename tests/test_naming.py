"""One name per idea across the public API: backoff waits are ``initial_delay`` / ``max_delay``
growing by a ``multiplier`` wherever they appear, the quorum of an approval is
``approvers_needed``; the old keyword names work for one release with a DeprecationWarning."""

from __future__ import annotations

import inspect
import random
from typing import Any

import msgspec
import pytest

import tether


def parameters(cls: type[Any]) -> set[str]:
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        return set(cls.__struct_fields__)
    return {
        name
        for name, p in inspect.signature(cls).parameters.items()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def test_retry_policy_and_backoff_speak_the_same_words() -> None:
    words = {"initial_delay", "max_delay", "multiplier"}
    assert words <= parameters(tether.RetryPolicy)
    assert words <= parameters(tether.Backoff)
    retry = tether.RetryPolicy(initial_delay=0.5, max_delay=4.0, multiplier=3.0)
    backoff = tether.Backoff(initial_delay=0.5, max_delay=4.0, multiplier=3.0)
    # the same ceilings for the same words: attempt n+1 of a retry is restart n of a backoff
    for n in range(5):
        assert retry.delay(n + 1, random.Random(1)) == pytest.approx(
            tether.Backoff(
                initial_delay=0.5, max_delay=4.0, multiplier=3.0, rng=random.Random(1)
            ).delay(n)
        )
    assert backoff.cap(10) == 4.0
    assert tether.BreakerPolicy(open_multiplier=3.0).open_multiplier == 3.0


def test_no_public_class_keeps_a_retired_name() -> None:
    retired = {"initial", "max", "open_growth", "approvers"}
    for name in tether.__all__:
        obj = getattr(tether, name)
        if isinstance(obj, type) and not issubclass(obj, BaseException | tether.Actor):
            try:
                found = parameters(obj) & retired
            except (TypeError, ValueError):  # no signature to read (a Protocol)
                continue
            if obj is tether.Backoff:
                found -= {"initial", "max"}  # the deprecated keyword-only aliases, below
            assert not found, f"tether.{name} still takes {sorted(found)}"


def test_backoffs_old_keyword_names_still_work_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"initial= is deprecated.*use initial_delay="):
        old = tether.Backoff(initial=0.2, max_delay=2.0)
    assert old.initial_delay == 0.2
    with pytest.warns(DeprecationWarning, match=r"max= is deprecated.*use max_delay="):
        assert tether.Backoff(max=5.0).max_delay == 5.0
    with pytest.warns(DeprecationWarning, match=r"\.initial is deprecated"):
        assert old.initial == 0.2
    with pytest.warns(DeprecationWarning, match=r"\.max is deprecated"):
        assert old.max == 2.0
    new = tether.Backoff(initial_delay=0.2, max_delay=2.0)
    assert repr(new) == repr(old)
    with (
        pytest.warns(DeprecationWarning, match="deprecated"),
        pytest.raises(tether.ConfigError, match="initial_delay"),
    ):
        tether.Backoff(initial=3.0, max=1.0)


def test_the_breakers_old_growth_name_still_works_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"open_growth= is deprecated.*open_multiplier="):
        old = tether.BreakerPolicy(open_growth=3.0)  # type: ignore[call-arg]
    assert old == tether.BreakerPolicy(open_multiplier=3.0)
    with pytest.raises(TypeError, match="open_growth= and open_multiplier="):
        tether.BreakerPolicy(open_growth=3.0, open_multiplier=2.0)  # type: ignore[call-arg]


def test_the_approval_policys_old_quorum_name_still_works_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"approvers= is deprecated.*approvers_needed="):
        old = tether.ApprovalPolicy(approvers=2)  # type: ignore[call-arg]
    assert old == tether.ApprovalPolicy(approvers_needed=2)
    with pytest.raises(tether.ConfigError, match="approvers_needed must be an int >= 1"):
        tether.ApprovalPolicy(approvers_needed=0)
