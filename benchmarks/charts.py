"""PNG charts of a benchmark run (matplotlib, from the ``bench`` extra), for ``--charts DIR``.

Each chart is drawn from the run's medians with its min-max range, and says in its subtitle
what was measured, on what, and when: a chart cut out of its run must still say that its
figures are only comparable with each other.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from run import Figure, fmt


@dataclass(frozen=True)
class Bar:
    label: str
    figure: Figure
    colour: str


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise SystemExit("--charts needs matplotlib: pip install -e '.[bench]'") from exc
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


TETHER, FLOOR, PEER, PEER_2, PEER_3 = "#1f6feb", "#8c959f", "#d1242f", "#f08c00", "#6f42c1"


def _spread(figs: Sequence[Figure]) -> tuple[list[float], list[list[float]]]:
    """Medians and matplotlib's asymmetric error bars (min and max) of ``figs``."""
    med = [f.median for f in figs]
    err = [[m - min(f.rates) for m, f in zip(med, figs, strict=True)],
           [max(f.rates) - m for m, f in zip(med, figs, strict=True)]]  # fmt: skip
    return med, err


def _titled(title: str, subtitle: str) -> str:
    return f"{title}\n" + textwrap.fill(subtitle, 110)


def _plain_formatter() -> Any:
    """Tick labels as plain numbers (100, 1 k, 10 k) rather than powers of ten or 16000."""
    from matplotlib.ticker import FuncFormatter

    def label(v: float, _pos: int) -> str:
        return f"{v:g}" if v < 1000 else fmt(v).replace(".0 ", " ")

    return FuncFormatter(label)


def _plain_log_ticks(axis: Any) -> None:
    axis.set_major_formatter(_plain_formatter())


def peers_chart(
    bars: Sequence[Bar],
    path: Path,
    *,
    title: str,
    subtitle: str,
    target: tuple[str, float] | None = None,
) -> Path:
    """Horizontal bars, log scale (the peers are orders of magnitude apart), each labelled
    with its median and its ratio to the first bar; ``target`` (label, value): a dashed line
    where the first bar must reach."""
    plt = _pyplot()
    figs = [b.figure for b in bars]
    med, err = _spread(figs)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.75 * len(bars)), layout="constrained")
    y = list(range(len(bars)))[::-1]
    ax.barh(y, med, xerr=err, color=[b.colour for b in bars], capsize=4, height=0.6)
    ax.set_yticks(y, [b.label for b in bars])
    ax.set_xscale("log")
    top = max(max(f.rates) for f in figs)
    ax.set_xlim(min(med) / 3, max(top, target[1] if target else 0) * 10)
    _plain_log_ticks(ax.xaxis)
    if target is not None:
        label, value = target
        ax.axvline(value, color="black", linestyle="--", linewidth=1)
        ax.text(value, 0.02, f" {label}", transform=ax.get_xaxis_transform(), rotation=90,
                fontsize=8, va="bottom", ha="right")  # fmt: skip
    unit = figs[0].unit
    ax.set_xlabel(f"{unit} (log scale; median of the run, bars: min-max)")
    first = med[0]
    for yi, m, f in zip(y, med, figs, strict=True):
        ratio = "" if m == first else f"   {bars[0].label} = {first / m:,.1f}x this"
        # right of the bar's max, so that the text never crosses its range
        ax.text(max(f.rates) * 1.12, yi, f"{fmt(m)} {unit}{ratio}", va="center", fontsize=9)
    fig.suptitle(_titled(title, subtitle), fontsize=10, x=0.01, ha="left")
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@dataclass(frozen=True)
class Curve:
    label: str
    points: Sequence[tuple[int, Figure]]  # (resident sessions, figure)
    colour: str


def scaling_chart(
    curves: Sequence[Curve],
    extra: Sequence[tuple[str, int, Figure, str]],
    path: Path,
    *,
    title: str,
    subtitle: str,
    target: float,
) -> Path:
    """Left: throughput against resident sessions (log x), one line per curve, each extra
    point (label, x, figure, colour) a lone marker. Right: each point over its curve's
    first point, with the target as a dashed line."""
    plt = _pyplot()
    fig, (ax, rel) = plt.subplots(1, 2, figsize=(12, 5), layout="constrained")
    tops, ratios = [], [target]
    for c in curves:
        xs = [x for x, _ in c.points]
        med, err = _spread([f for _, f in c.points])
        ax.errorbar(xs, med, yerr=err, label=c.label, color=c.colour, marker="o", capsize=4)
        base = med[0]
        rel.plot(xs, [m / base for m in med], label=c.label, color=c.colour, marker="o")
        ratios += [m / base for m in med]
        tops += [max(f.rates) for _, f in c.points]
        for x, m in zip(xs, med, strict=True):  # right of the point: clear of its range bar
            ax.annotate(fmt(m), (x, m), textcoords="offset points", xytext=(7, 3),
                        ha="left", fontsize=8, color=c.colour)  # fmt: skip
    for label, x, f, colour in extra:
        med, err = _spread([f])
        ax.errorbar([x], med, yerr=err, label=label, color=colour, marker="*", markersize=12,
                    linestyle="none", capsize=4)  # fmt: skip
        ax.annotate(fmt(med[0]), (x, med[0]), textcoords="offset points", xytext=(9, 3),
                    ha="left", fontsize=8, color=colour)  # fmt: skip
        tops.append(max(f.rates))
        base = next((c.points[0][1].median for c in curves if c.colour == colour), None)
        if base:
            rel.plot([x], [med[0] / base], color=colour, marker="*", markersize=12,
                     linestyle="none", label=label)  # fmt: skip
            ratios.append(med[0] / base)
    unit = curves[0].points[0][1].unit
    for a in (ax, rel):
        a.set_xscale("log")
        lo, hi = a.get_xlim()
        a.set_xlim(lo, hi * 1.8)  # room for the labels right of the last points
        _plain_log_ticks(a.xaxis)
        a.set_xlabel("sessions in the runtime (log scale)")
        a.grid(which="both", alpha=0.3)
    ax.set_ylabel(f"{unit} (median, bars: min-max)")
    ax.set_ylim(0, max(tops) * 1.15)
    ax.yaxis.set_major_formatter(_plain_formatter())
    ax.legend(fontsize=8)
    rel.axhline(target, color="black", linestyle="--", linewidth=1)
    rel.annotate(f"target {target:g}x", (rel.get_xlim()[0], target), textcoords="offset points",
                 xytext=(4, 4), fontsize=8)  # fmt: skip
    rel.set_ylim(0, max(1.2, max(ratios) * 1.1))
    rel.set_ylabel("throughput / throughput at the smallest size")
    rel.legend(fontsize=8, loc="lower left")
    fig.suptitle(_titled(title, subtitle), fontsize=10, x=0.01, ha="left")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
