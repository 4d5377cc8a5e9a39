"""``benchmarks/bench_scaling.py`` at a small size: every point of the curve, tether's and the
floor's, runs in its own process under the same collector policy (``tether.GcPolicy``), which
each reports back as it saw it during its run; the passivated point's runtime really holds its sessions
passivated."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from tests.benchmarks.modules import bench

pytestmark = pytest.mark.slow  # six child processes: ~10-20 s on a 2-core VM

THRESHOLD = (5000, 20, 30)


@pytest.fixture(scope="module")
def scaling() -> ModuleType:
    return bench("bench_scaling")


@pytest.fixture(scope="module")
def measured(scaling: ModuleType) -> Any:
    sizes = scaling.Sizes(
        runs=1, points=(20, 50), messages=100, passivated=60, active=20, passivate_after=0.3
    )
    return scaling.run_all(sizes, scaling.GcSettings(THRESHOLD, freeze=True))


def test_every_point_is_measured_for_tether_and_the_floor(measured: Any) -> None:
    keys = ["1.tether_20", "1.floor_20", "1.tether_50", "1.floor_50"]
    keys += ["2.tether_passivated", "2.floor_passivated"]
    for key in keys:
        figure = measured.figures[key]
        assert figure.ok, (key, figure.error)
        assert [n for n, _ in figure.samples] == [100]


def test_tether_and_the_floor_run_under_the_same_gc_settings(measured: Any) -> None:
    seen = {key: r["rounds"][0]["gc"] for key, r in measured.extra.items()}
    assert len(seen) == 6
    for key, gc_seen in seen.items():
        assert tuple(gc_seen["threshold"]) == THRESHOLD, key
        assert gc_seen["enabled"], key
        assert gc_seen["frozen"] > 0, key  # the policy froze after the activations
        assert "GC " in measured.figures[key].note


def test_the_passivated_point_activates_a_fresh_group_of_passivated_sessions(
    measured: Any,
) -> None:
    tether_point = measured.extra["2.tether_passivated"]
    # Every round (the warm-up, then the timed one) starts once the previous group passivated:
    # only the round's own group is active when its clock starts.
    rounds = [tether_point["warm_up"], *tether_point["rounds"]]
    assert [r["active_at_start"] for r in rounds] == [20, 20]
    assert tether_point["ready"]["build_seconds"] > 0


def test_targets_compare_the_largest_size_with_the_smallest(
    scaling: ModuleType, measured: Any
) -> None:
    sizes = scaling.Sizes(
        runs=1, points=(20, 50), messages=100, passivated=60, active=20, passivate_after=0.3
    )
    rows = bench("run").evaluate(measured, scaling.targets(sizes))
    flat = rows[0]
    assert flat["target"] == "#20 flat: tether at 50 >= 0.8x tether at 20 sessions"
    assert flat["value"] == pytest.approx(
        measured.figures["1.tether_50"].median / measured.figures["1.tether_20"].median
    )
    assert flat["verdict"] in ("PASS", "MISS")
