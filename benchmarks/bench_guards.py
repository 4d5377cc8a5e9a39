"""Overhead of the guard chain per effect (issue #5), side by side in one run, as a ratio.

Two otherwise identical actors make the same effects through the ledger:

* **guarded**: the tool has a circuit breaker (closed), the actor has a loop policy (no loop
  detected), no approval is needed — every effect passes loop detector -> breaker -> gate;
* **bare**: ``breaker=None`` and no loop policy — the ledger alone.

Two shapes: one session making effects one after another (latency), and 100 sessions at once
(throughput, where group commit shares the disk). Target: guarded costs <= 1.5x bare per effect,
i.e. bare/guarded throughput >= 1/1.5. Medians of interleaved runs; nothing asserts time.

    .venv/bin/python benchmarks/bench_guards.py [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import Bench, Scenario, fmt, rm_scratch, scratch_dir

import tether

Sample = dict[str, tuple[int, float]]
ASK_TIMEOUT = 120.0
EFFECTS_PER_STEP = 10


@dataclass
class Sizes:
    runs: int
    seq_steps: int
    sessions: int
    steps_per_session: int


FULL = Sizes(runs=5, seq_steps=200, sessions=100, steps_per_session=10)
QUICK = Sizes(runs=1, seq_steps=20, sessions=20, steps_per_session=3)


@tether.tool(recovery="retry", breaker="external_api")
async def guarded_tool(x: int) -> int:
    return x + 1


@tether.tool(recovery="retry", breaker=None)
async def bare_tool(x: int) -> int:
    return x + 1


class Run(tether.Message):
    base: int


class Totals(msgspec.Struct):
    total: int = 0


class Bare(tether.Actor[Totals]):
    initial_state = Totals()
    tool = bare_tool

    async def handle(self, msg: Run) -> int:
        total = 0
        for i in range(msg.base, msg.base + EFFECTS_PER_STEP):
            total += await self.effect(type(self).tool, x=i)
        return total


class Guarded(Bare):
    tool = guarded_tool
    loop_policy = tether.LoopPolicy()


def _want(base: int) -> int:
    return sum(i + 1 for i in range(base, base + EFFECTS_PER_STEP))


async def sequential(cls: type[Bare], steps: int, key: str) -> Sample:
    d = scratch_dir("guards-seq")
    try:
        async with tether.Runtime(d / "tether.db") as rt:
            ref = await rt.spawn(cls, "s")
            # Distinct arguments everywhere: the loop detector must see a healthy trajectory.
            await ref.ask(Run(base=-(10**6)), timeout=ASK_TIMEOUT)  # warm: guards created
            t0 = time.perf_counter()
            for n in range(steps):
                got = await ref.ask(Run(base=n * EFFECTS_PER_STEP), timeout=ASK_TIMEOUT)
                assert got == _want(n * EFFECTS_PER_STEP), got
            dt = time.perf_counter() - t0
    finally:
        rm_scratch(d)
    return {key: (steps * EFFECTS_PER_STEP, dt)}


async def concurrent(cls: type[Bare], sessions: int, per: int, key: str) -> Sample:
    d = scratch_dir("guards-par")
    try:
        async with tether.Runtime(d / "tether.db") as rt:
            refs = [await rt.spawn(cls, f"s{i:03d}") for i in range(sessions)]

            async def warm(i: int, ref: tether.ActorRef) -> None:
                await ref.ask(Run(base=-(10**6) - i * 100), timeout=ASK_TIMEOUT)

            async with anyio.create_task_group() as tg:
                for i, ref in enumerate(refs):
                    tg.start_soon(warm, i, ref)

            async def session(i: int, ref: tether.ActorRef) -> None:
                for n in range(per):
                    base = (i * per + n) * EFFECTS_PER_STEP
                    got = await ref.ask(Run(base=base), timeout=ASK_TIMEOUT)
                    assert got == _want(base), got

            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i, ref in enumerate(refs):
                    tg.start_soon(session, i, ref)
            dt = time.perf_counter() - t0
    finally:
        rm_scratch(d)
    return {key: (sessions * per * EFFECTS_PER_STEP, dt)}


TARGETS = [
    ("guarded >= 1/1.5 of bare, one session (overhead <= 1.5x)", "1.guarded_seq", "1.bare_seq"),
    ("guarded >= 1/1.5 of bare, 100 sessions (overhead <= 1.5x)", "2.guarded_par", "2.bare_par"),
]


def run_all(s: Sizes) -> Bench:
    b = Bench(s)  # type: ignore[arg-type]
    b.measure(
        Scenario(
            [("1.guarded_seq", "guarded effects, one session, sequential", "effects/s")],
            lambda: asyncio.run(sequential(Guarded, s.seq_steps, "1.guarded_seq")),
        ),
        Scenario(
            [("1.bare_seq", "unguarded effects, one session, sequential", "effects/s")],
            lambda: asyncio.run(sequential(Bare, s.seq_steps, "1.bare_seq")),
        ),
    )
    b.measure(
        Scenario(
            [("2.guarded_par", f"guarded effects, {s.sessions} sessions", "effects/s")],
            lambda: asyncio.run(
                concurrent(Guarded, s.sessions, s.steps_per_session, "2.guarded_par")
            ),
        ),
        Scenario(
            [("2.bare_par", f"unguarded effects, {s.sessions} sessions", "effects/s")],
            lambda: asyncio.run(concurrent(Bare, s.sessions, s.steps_per_session, "2.bare_par")),
        ),
    )
    return b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, 1 run (CI smoke)")
    p.add_argument("--json", metavar="PATH", help="also write the raw samples as JSON")
    args = p.parse_args(argv)
    b = run_all(QUICK if args.quick else FULL)
    lines = ["", "| # | figure | min | **median** | max | unit |", "|---|---|---:|---:|---:|---|"]
    for f in b.figures.values():
        if f.ok:
            lines.append(
                f"| {f.key} | {f.label} | {fmt(min(f.rates))} | **{fmt(f.median)}** | "
                f"{fmt(max(f.rates))} | {f.unit} |"
            )
        else:
            lines.append(f"| {f.key} | {f.label} | | **FAILED** | | {f.unit} |")
    lines += ["", "| target | overhead (bare / guarded, medians) | required | verdict |"]
    lines.append("|---|---:|---:|---|")
    failed = False
    results = []
    for label, num, den in TARGETS:
        fn, fd = b.figures.get(num), b.figures.get(den)
        if fn is None or fd is None or not (fn.ok and fd.ok):
            lines.append(f"| {label} | n/a | 1.5x | **n/a** |")
            failed = True
            continue
        overhead = fd.median / fn.median
        verdict = "PASS" if overhead <= 1.5 else "MISS"
        results.append({"target": label, "overhead": overhead, "verdict": verdict})
        lines.append(f"| {label} | {overhead:.2f}x | 1.5x | **{verdict}** |")
    print("\n".join(lines))
    if args.json:
        raw = {k: f.samples for k, f in b.figures.items()}
        Path(args.json).write_text(json.dumps({"samples": raw, "targets": results}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
