"""``Runtime(gc=...)``: a serving runtime tunes CPython's cyclic collector while it serves and
gives it back as it found it; frozen garbage is collected by the governor's refreshes."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import tether
from tests import sample_actors as s
from tether.runtime import collector

pytestmark = pytest.mark.anyio

DEADLINE = 30.0  # s: polls for the freeze, which comes a moment after an activation


@pytest.fixture(autouse=True)
def process_collector() -> Iterator[None]:
    """Each test starts and ends with the collector as CPython's defaults set it, unfrozen."""
    before = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def fast(path: Path | str, **kw: object) -> tether.Runtime:
    opts: dict[str, object] = {"poll_interval": 0.02, "lease_ttl": 2.0}
    opts.update(kw)
    return tether.Runtime(path, **opts)  # type: ignore[arg-type]


async def frozen_soon() -> int:
    with anyio.fail_after(DEADLINE):
        while (count := gc.get_freeze_count()) == 0:
            await anyio.sleep(0.02)
    return count


async def test_a_serving_runtime_raises_the_thresholds_and_restores_them_on_close(
    tmp_path: Path,
) -> None:
    async with fast(tmp_path / "a.db"):
        assert gc.get_threshold() == (50_000, 20, 100)
    assert gc.get_threshold() == (700, 10, 10)


async def test_activated_actors_are_frozen_and_unfrozen_when_the_runtime_closes(
    tmp_path: Path,
) -> None:
    async with fast(tmp_path / "a.db") as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await frozen_soon()
        # Frozen objects still work as ever: the collector only stops walking them.
        await acct.tell(s.Deposit(amount=5))
        assert await acct.ask(s.GetBalance(), timeout=5) == 5
    assert gc.get_freeze_count() == 0


async def test_gc_policy_unchanged_leaves_the_collector_as_the_process_set_it(
    tmp_path: Path,
) -> None:
    gc.set_threshold(1234, 5, 6)
    async with fast(tmp_path / "a.db", gc=tether.GcPolicy.unchanged()) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        assert await acct.ask(s.GetBalance(), timeout=5) == 0
        await anyio.sleep(collector._FREEZE_DELAY * 5)  # past the moment a freeze would come
        assert gc.get_threshold() == (1234, 5, 6)
        assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == (1234, 5, 6)


async def test_an_administration_runtime_leaves_the_collector_alone(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    async with fast(db):
        pass
    async with fast(db, serve=False):
        assert gc.get_threshold() == (700, 10, 10)


async def test_with_two_runtimes_open_the_later_policy_applies_until_the_last_closes(
    tmp_path: Path,
) -> None:
    first = fast(tmp_path / "a.db", gc=tether.GcPolicy(threshold=(10_000, 10, 10)))
    second = fast(tmp_path / "b.db", gc=tether.GcPolicy(threshold=(20_000, 30, 40)))
    async with first:
        async with second:
            assert gc.get_threshold() == (20_000, 30, 40)
        assert gc.get_threshold() == (10_000, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize(
    "threshold",
    [(0, 10, 10), (700, 10), [700, 10, 10], (700.0, 10, 10), (True, 10, 10), (-1, 10, 10)],
)
def test_a_bad_threshold_is_refused_naming_it(threshold: object) -> None:
    with pytest.raises(tether.ConfigError, match="GcPolicy threshold"):
        tether.GcPolicy(threshold=threshold)  # type: ignore[arg-type]


def test_a_runtime_refuses_a_gc_setting_that_is_not_a_policy(tmp_path: Path) -> None:
    with pytest.raises(tether.ConfigError, match=r"gc must be a tether\.GcPolicy"):
        tether.Runtime(tmp_path / "a.db", gc=(50_000, 20, 100))  # type: ignore[arg-type]


class _Cycle:
    """Garbage only the cyclic collector can free: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


async def test_garbage_frozen_with_the_actors_is_collected_once_enough_actors_were_activated() -> (
    None
):
    governor = collector._Governor()
    policy = tether.GcPolicy()
    governor.enter(policy)
    try:
        cycle = _Cycle()
        gone = weakref.ref(cycle)
        governor.activated(resident=1)
        await frozen_soon()
        del cycle  # garbage now, but frozen: no collection walks it
        gc.collect()
        assert gone() is not None
        for _ in range(collector._MIN_REFRESH):  # a generation of activations later...
            governor.activated(resident=1)
        with anyio.fail_after(DEADLINE):  # ...the next freeze first collects everything
            while gone() is not None:
                await anyio.sleep(0.02)
        assert gc.get_freeze_count() > 0  # and freezes again
    finally:
        governor.exit(policy)
    assert gc.get_freeze_count() == 0
