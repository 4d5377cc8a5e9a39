"""The collector policy (``tether.GcPolicy``, issue #20): durable throughput and memory, A/B.

    python benchmarks/bench_gc.py                    # full run: 10,000 sessions, median of 3 runs
    python benchmarks/bench_gc.py --quick            # smoke mode for CI: small sizes, 1 run
    python benchmarks/bench_gc.py --sessions 1000    # another size
    python benchmarks/bench_gc.py --json out.json    # also write the raw per-run samples

One process, one SQLite file holding ``sessions`` ``Account`` actors (built before the first
round). Each run opens a fresh runtime on the file with one policy, resumes every account
(``run.activate_accounts``, which also waits for the freeze that follows the activations),
then times ``run.py``'s durable scenario: one sender per session tells its deposits and asks
the balance, ``messages`` in all. The policies run in interleaved rounds (house method), so
every figure sees the same machine; the collector is per process, and each runtime gives it
back as it found it when it closes.

* ``1.unchanged``: ``GcPolicy.unchanged()``, CPython's own collector settings.
* ``1.threshold``: ``GcPolicy(freeze=False)``, the raised thresholds alone.
* ``1.default``: ``GcPolicy()``, what a runtime serves with: thresholds and freezing.

Each figure's note gives the collector's share of the timed part (``gc.callbacks``) and the
peak RSS during it (sampled every 50 ms), medians over the runs. Checked: every ask's count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run
from run import Bench, Deposit, GetBalance, Sample, Scenario, rm_scratch, scratch_dir

import tether


@dataclass(frozen=True)
class Sizes:
    runs: int
    sessions: int
    messages: int  # deposits per run, over all sessions


FULL = Sizes(runs=3, sessions=10_000, messages=40_000)
QUICK = Sizes(runs=1, sessions=200, messages=1_000)

POLICIES = {
    "1.unchanged": ("GcPolicy.unchanged(): CPython's collector", tether.GcPolicy.unchanged()),
    "1.threshold": ("GcPolicy(freeze=False): thresholds only", tether.GcPolicy(freeze=False)),
    "1.default": ("GcPolicy(): thresholds and freezing (the default)", tether.GcPolicy()),
}


def rss_mib() -> float:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Collector:
    """Seconds the cyclic collector ran while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.seconds = 0.0
        self._began = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, _info: dict[str, int]) -> None:
        if self.on:
            if phase == "start":
                self._began = time.perf_counter()
            else:
                self.seconds += time.perf_counter() - self._began


class World:
    def __init__(self, sizes: Sizes) -> None:
        self.sizes = sizes
        self.dir = scratch_dir("gc")
        self.path = self.dir / "tether.db"
        self.ids = [f"acct-{i:06d}" for i in range(sizes.sessions)]
        self.per = sizes.messages // sizes.sessions
        self.rounds_done = 0  # deposits rounds so far: every account has rounds_done * per
        self.collector = Collector()
        self.notes: dict[str, list[tuple[float, float]]] = {k: [] for k in POLICIES}

    async def build(self) -> None:
        async with tether.Runtime(self.path) as rt:
            await run.activate_accounts(rt, self.ids)

    async def round(self, key: str) -> Sample:
        policy = POLICIES[key][1]
        want = (self.rounds_done + 1) * self.per
        async with tether.Runtime(self.path, gc=policy) as rt:
            refs = await run.activate_accounts(rt, self.ids)
            peak = [rss_mib()]

            async def sample_rss() -> None:
                while True:
                    peak[0] = max(peak[0], rss_mib())
                    await anyio.sleep(0.05)

            async def sender(ref: tether.ActorRef) -> None:
                for _ in range(self.per):
                    await ref.tell(Deposit(amount=1))
                got = await ref.ask(GetBalance(), timeout=run.ASK_TIMEOUT)
                if got != (want, want):
                    raise AssertionError(f"{ref.id}: {got}, expected {(want, want)}")

            self.collector.seconds, self.collector.on = 0.0, True
            t0 = time.perf_counter()
            try:
                async with anyio.create_task_group() as outer:
                    outer.start_soon(sample_rss)
                    async with anyio.create_task_group() as tg:
                        for ref in refs:
                            tg.start_soon(sender, ref)
                    dt = time.perf_counter() - t0
                    outer.cancel_scope.cancel()
            finally:
                self.collector.on = False
        self.rounds_done += 1
        self.notes[key].append((self.collector.seconds / dt, peak[0]))
        return {key: (self.per * self.sizes.sessions, dt)}


def run_all(sizes: Sizes) -> Bench:
    b = Bench(sizes)  # type: ignore[arg-type]  # Bench only reads .runs
    world = World(sizes)
    try:
        asyncio.run(world.build())
        b.measure(
            *(
                Scenario(
                    [(key, f"{label}, {sizes.sessions:,} sessions", "msg/s")],
                    lambda key=key: asyncio.run(world.round(key)),  # type: ignore[misc]
                )
                for key, (label, _) in POLICIES.items()
            )
        )
    finally:
        rm_scratch(world.dir)
    for key, seen in world.notes.items():
        f = b.figures[key]
        if f.ok and seen:
            timed = seen[1:]  # not the warm-up
            share = statistics.median(s for s, _ in timed)
            peak = statistics.median(p for _, p in timed)
            f.note = f"GC {100 * share:.0f}% of the run; peak RSS {peak:,.0f} MiB"
    return b


TARGETS: list[tuple[str, str, str | None, float | None]] = [
    ("(information) GcPolicy() / CPython's collector", "1.default", "1.unchanged", None),
    ("(information) thresholds only / CPython's collector", "1.threshold", "1.unchanged", None),
    ("(information) GcPolicy() / thresholds only", "1.default", "1.threshold", None),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    run.add_house_options(p)
    p.add_argument("--sessions", type=int, help="sessions in the runtime (default: 10,000)")
    args = p.parse_args(argv)
    sizes = run.chosen_sizes(p, args, FULL, QUICK)
    if args.sessions:
        sizes = Sizes(sizes.runs, args.sessions, max(sizes.messages, args.sessions))
    meta = run.run_meta(args.quick, sizes.runs, "tether", "msgspec", "anyio")
    run.announce("tether GcPolicy A/B", meta)
    t0 = time.perf_counter()
    with run.tidy_data_dir():
        b = run_all(sizes)
    rows = run.evaluate(b, TARGETS)
    return run.conclude(t0, b, rows, meta, {"sizes": asdict(sizes)}, args.json)


if __name__ == "__main__":
    sys.exit(main())
