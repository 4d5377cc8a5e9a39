"""Every figure of issue #20 (performance at scale) in one command, as ratios, with charts.

    python benchmarks/at_scale.py                      # full run (~25-40 min on the 2-vCPU VM)
    python benchmarks/at_scale.py --quick              # smoke mode: small sizes, 1 run each
    python benchmarks/at_scale.py --charts DIR         # also DIR/scaling.png and DIR/peers.png
    python benchmarks/at_scale.py --json out.json      # also every part's raw samples
    python benchmarks/at_scale.py --parts ask,step     # only some parts
    python benchmarks/at_scale.py --gc-no-freeze       # the scaling part's GcPolicy (see --help)

The parts, each with the house method (warm-up, interleaved rounds, medians, every run
checked), each printing its own table as it ends; then one table of the issue's targets:

* ``ask``: in-memory ``ask``, tether beside the floor (``bench_floor.py``'s first group);
* ``scaling``: durable msg/s against the sessions in the runtime, tether beside the floor,
  and 100,000 passivated sessions with 1,000 active (``bench_scaling.py``);
* ``peers``: the 3-effect step of tether, the floor, LangGraph (both durability modes) and
  DBOS (``bench_effects.py``);
* ``step``: the cost of one agent step through the ledger and guards (``bench_step.py``);
* ``resume``: 10,000 sessions resumed after a SIGKILL (``bench_resume.py``).

The parts run one after another, so their figures are compared within a part, never across
two. Nothing asserts anything about time: the exit status is 1 only if a figure failed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_effects
import bench_floor
import bench_resume
import bench_scaling
import bench_step
import run
from run import Bench

PARTS = ("ask", "scaling", "peers", "step", "resume")


def _sized(module: Any, quick: bool, runs: int | None) -> Any:
    """A part's sizes: its script's ``QUICK`` or ``FULL``, with ``--runs`` applied."""
    sizes = module.QUICK if quick else module.FULL
    return replace(sizes, runs=runs) if runs else sizes


class Part:
    """One part's run: its figures, its targets, and its table."""

    def __init__(self, name: str, b: Bench, rows: list[dict[str, Any]], text: str) -> None:
        self.name, self.bench, self.rows, self.text = name, b, rows, text


def ask_part(quick: bool, runs: int | None, _args: argparse.Namespace) -> Part:
    sizes = _sized(bench_floor, quick, runs)
    b = Bench(sizes)  # type: ignore[arg-type]
    bench_floor.ask_group(b, sizes)
    rows = run.evaluate(b, bench_floor.CLOSE_TO_THE_FLOOR[:1])
    return Part("ask", b, rows, run.table(b, rows))


def scaling_part(quick: bool, runs: int | None, args: argparse.Namespace) -> Part:
    sizes = _sized(bench_scaling, quick, runs)
    gc_ = bench_scaling.gc_settings(args)
    b = bench_scaling.run_all(sizes, gc_)
    rows = run.evaluate(b, bench_scaling.targets(sizes))
    part = Part("scaling", b, rows, f"GC in every child: {gc_.describe()}\n\n{run.table(b, rows)}")
    if args.charts_dir is not None:
        bench_scaling.draw(b, sizes, gc_, args.charts_dir, args.meta)
    return part


def peers_part(quick: bool, runs: int | None, args: argparse.Namespace) -> Part:
    sizes = _sized(bench_effects, quick, runs)
    b = bench_effects.run_all(sizes)
    rows = bench_effects.evaluate(b)
    if args.charts_dir is not None:
        bench_effects.draw_peers(b, args.charts_dir, args.meta)
    return Part("peers", b, rows, bench_effects.table(b, rows))


def step_part(quick: bool, runs: int | None, _args: argparse.Namespace) -> Part:
    sizes = _sized(bench_step, quick, runs)
    b = bench_step.run_all(sizes)
    rows = bench_step.evaluate(b)
    return Part("step", b, rows, bench_step.table(b, rows))  # type: ignore[arg-type]


def resume_part(quick: bool, runs: int | None, args: argparse.Namespace) -> Part:
    sizes = _sized(bench_resume, quick, runs)
    b, extra = bench_resume.run_all(sizes, args.profile)
    b.extra.update(extra)
    rows = bench_resume.evaluate(b)
    text = bench_resume.table(b, rows)
    if extra["profiled"] is not None:
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            bench_resume.show_profile(extra["profiled"])
        text += shown.getvalue()
    return Part("resume", b, rows, text)


RUNNERS: dict[str, Callable[[bool, int | None, argparse.Namespace], Part]] = {
    "ask": ask_part,
    "scaling": scaling_part,
    "peers": peers_part,
    "step": step_part,
    "resume": resume_part,
}


def summary(parts: list[Part]) -> str:
    """The issue's targets of every part, in one table."""
    lines = [
        "| part | target | measured (medians) | required | verdict |",
        "|---|---|---|---:|---|",
    ]
    for part in parts:
        rows = [r for r in part.rows if str(r["target"]).startswith("#20")]
        lines += [f"| {part.name} {line}" for line in run.target_rows(part.bench, rows)[2:]]
    return "\n".join(lines)


def _parts(arg: str) -> list[str]:
    names = [p.strip() for p in arg.split(",") if p.strip()]
    unknown = [p for p in names if p not in PARTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"parts are a comma-separated list of {', '.join(PARTS)}; not {', '.join(unknown)}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    run.add_house_options(p, runs_help="runs per figure in every part (default: each part's)")
    p.add_argument("--charts", metavar="DIR", help="also draw DIR/scaling.png and DIR/peers.png")
    p.add_argument("--parts", type=_parts, default=list(PARTS), help=",".join(PARTS))
    p.add_argument("--profile", action="store_true", help="resume: also one profiled run")
    bench_scaling.add_gc_options(p)  # the scaling part's
    args = p.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        p.error("--runs must be at least 1")
    args.charts_dir = run.charts_dir(args.charts)
    packages = (*bench_effects.PACKAGES, "langgraph-checkpoint-sqlite", "pykka", "matplotlib")
    args.meta = meta = run.run_meta(args.quick, args.runs or (1 if args.quick else 5), *packages)
    print(
        f"tether at scale (issue #20), {meta['mode']} mode, parts: {', '.join(args.parts)}. "
        f"Python {meta['python']}, SQLite {meta['sqlite']}, {meta['cpus']} CPUs, git "
        f"{meta['git']}",
        flush=True,
    )
    t0 = time.perf_counter()
    parts: list[Part] = []
    with run.tidy_data_dir():
        for name in args.parts:
            print(f"\n## {name}\n", flush=True)
            part = RUNNERS[name](args.quick, args.runs, args)
            print(f"\n{part.text}", flush=True)
            parts.append(part)
    print(f"\n## issue #20: the targets ({time.perf_counter() - t0:.0f} s)\n")
    print(summary(parts))
    if args.charts_dir is not None:
        print(f"\ncharts in {args.charts_dir}")
    merged = Bench(bench_step.QUICK)  # type: ignore[arg-type]  # finish reads .figures, .extra
    rows: list[dict[str, Any]] = []
    for part in parts:
        merged.figures.update(part.bench.figures)
        merged.extra[part.name] = part.bench.extra
        rows += [{**r, "part": part.name} for r in part.rows]
    extra = {"parts": [p.name for p in parts], "sizes": _sizes(args.quick)}
    return run.finish(merged, rows, meta, extra, args.json)


def _sizes(quick: bool) -> dict[str, Any]:
    mods = {"ask": bench_floor, "scaling": bench_scaling, "peers": bench_effects}
    mods |= {"step": bench_step, "resume": bench_resume}
    return {k: asdict(m.QUICK if quick else m.FULL) for k, m in mods.items()}


if __name__ == "__main__":
    sys.exit(main())
