"""Flat scaling (issue #20): durable msg/s against the sessions in the runtime, beside the floor.

    python benchmarks/bench_scaling.py                   # full run: median of 5 runs (+1 warm-up)
    python benchmarks/bench_scaling.py --quick           # smoke mode for CI: small sizes, 1 run
    python benchmarks/bench_scaling.py --charts DIR      # also draw DIR/scaling.png
    python benchmarks/bench_scaling.py --gc-threshold unchanged --gc-no-freeze  # CPython's GC
    python benchmarks/bench_scaling.py --gc-threshold 50000,20,100   # GcPolicy(threshold=...)
    python benchmarks/bench_scaling.py --json out.json   # also write the raw per-run samples

The durable scenario of ``run.py`` (each message a ``Deposit`` persisting one event, default
``durability="full"``; every actor has its own sender task, which tells its deposits and then
asks the balance, checked) with the same total of messages at every size, so only the number of
sessions changes:

* ``1.tether_<N>``: N ``Account`` actors on a fresh file, spawned and activated before the
  clock starts, ``messages / N`` deposits each. With one sender per session (each session has
  its own user), N sessions are N concurrent conversations: a hundred shared senders would
  keep a hundred sessions busy at a time and hide the collapse.
* ``1.floor_<N>``: the floor (``bench_floor.floor_durable``: the least program that keeps the
  same promises, on tether's schema) at the same sizes.
* ``2.tether_passivated``: one runtime (``passivate_after`` short) in which ``passivated``
  sessions were spawned and then passivated; each round a fresh group of ``active`` of them is
  activated before the clock and gets ``messages / active`` deposits each. It shows whether
  passivated sessions cost anything: memory the collector walks, per-actor books, store scans.
* ``2.floor_passivated``: the floor on a file that holds as many accounts (``actors`` rows);
  the floor keeps nothing in memory for an idle account, so this is its 1,000-session figure on
  a bigger file.

Every point runs in its own child process, started once and driven round by round
(``children.py``): a point's heap holds only its own sessions, not the parent's nor another
point's, and the collector policy of the run (``tether.GcPolicy``: the runtime's default, or
``--gc-threshold``, ``--gc-no-freeze``) is applied in every child alike, tether's (its runtimes
serve with it) and the floor's (``bench_floor.like_a_runtime``), and printed with what each
child saw when its clock
started. Each child also reports the time its cyclic collector ran during the timed part
(``gc.callbacks``), per generation: the table's notes give it as a share of the run.

Targets (on medians, never asserted): tether at the largest size >= 0.8x tether at the smallest
(#20: today 0.32-0.39x at 10,000 vs 1,000); tether >= 0.7x the floor at 1,000 sessions. The
floor's own ratios and the passivated point are shown beside them for information.
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
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_floor
import run
from children import PipeChild, serve_async
from run import Bench, Sample, Scenario, rm_scratch, scratch_dir

import tether


@dataclass(frozen=True)
class Sizes:
    runs: int
    points: tuple[int, ...]  # resident sessions of each point of the curve, smallest first
    messages: int  # deposits per run at every point
    passivated: int  # sessions spawned and passivated in the passivated point's runtime
    active: int  # sessions active in each round of the passivated point
    passivate_after: float  # of the passivated point's runtime


FULL = Sizes(
    runs=5,
    points=(1_000, 3_000, 10_000),
    messages=40_000,
    passivated=100_000,
    active=1_000,
    passivate_after=5.0,
)
QUICK = Sizes(
    runs=1, points=(100, 1_000), messages=2_000, passivated=2_000, active=100, passivate_after=1.0
)


# ----------------------------------------------------------------------------- the collector


@dataclass(frozen=True)
class GcSettings:
    """The collector policy of a run (``tether.GcPolicy``), in every child alike: tether's
    runtimes serve with it (``Runtime(gc=...)``) and the floor runs under it
    (``bench_floor.like_a_runtime``). By default the runtime's own default."""

    threshold: tuple[int, int, int] | None = tether.GcPolicy().threshold
    freeze: bool = tether.GcPolicy().freeze

    @property
    def policy(self) -> tether.GcPolicy:
        return tether.GcPolicy(threshold=self.threshold, freeze=self.freeze)

    def argv(self) -> list[str]:
        if self.threshold is None:
            out = ["--gc-threshold", "unchanged"]
        else:
            out = ["--gc-threshold", ",".join(map(str, self.threshold))]
        if not self.freeze:
            out.append("--gc-no-freeze")
        return out

    def describe(self) -> str:
        threshold = "as CPython sets it" if self.threshold is None else f"{self.threshold}"
        return (
            f"tether.GcPolicy: threshold {threshold}, freeze after activations: "
            f"{'yes' if self.freeze else 'no'}"
        )


class GcWatch:
    """The collector's work between ``start`` and ``stop`` (the timed part of a run), the
    settings in force at ``start``, and the objects frozen at ``stop`` (the policy freezes a
    moment after a batch of activations, so possibly after the clock started)."""

    def __init__(self) -> None:
        self.on = False
        self.began = 0.0
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self.seen: dict[str, Any] = {}
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if not self.on:
            return
        if phase == "start":
            self.began = time.perf_counter()
        else:
            gen = info["generation"]
            self.seconds[gen] += time.perf_counter() - self.began
            self.collections[gen] += 1

    def start(self) -> None:
        self.seconds, self.collections = [0.0, 0.0, 0.0], [0, 0, 0]
        self.seen = {
            "threshold": list(gc.get_threshold()),
            "enabled": gc.isenabled(),
            "tracked": len(gc.get_objects()),
        }
        self.on = True

    def stop(self) -> None:
        self.on = False
        self.seen["frozen"] = gc.get_freeze_count()

    def report(self) -> dict[str, Any]:
        return {**self.seen, "seconds": self.seconds, "collections": self.collections}


# ----------------------------------------------------------------------------- the children


def rss_kb() -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class _Point:
    """One point, in its child: ``setup`` once, then ``round`` per command."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.actors: int = args.actors
        self.per_actor: int = args.per_actor
        self.passivated: int = args.passivated
        self.passivate_after: float = args.passivate_after
        self.watch = GcWatch()
        self.gc = gc_settings(args).policy
        self.rounds = 0

    async def setup(self) -> dict[str, Any]:
        return {}

    async def round(self) -> tuple[float, dict[str, Any]]:
        raise NotImplementedError

    async def close(self) -> None:
        return None

    def _next_group(self) -> int:
        """The first session of this round's group (the passivated points): each round takes
        sessions no earlier round touched."""
        first = self.rounds * self.actors
        if first + self.actors > self.passivated:
            raise RuntimeError(f"only {self.passivated:,} passivated sessions for this many rounds")
        self.rounds += 1
        return first


class _TetherPoint(_Point):
    async def round(self) -> tuple[float, dict[str, Any]]:
        d = scratch_dir("scaling")
        try:
            async with tether.Runtime(d / "tether.db", gc=self.gc) as rt:
                ids = [f"acct-{i:06d}" for i in range(self.actors)]
                refs = await run.activate_accounts(rt, ids)
                active = len(rt.cells)
                dt, _ = await run.deposit_round(refs, self.per_actor, self.watch)
                rss = rss_kb()
        finally:
            rm_scratch(d)
        return dt, {"active_at_start": active, "rss_kb": rss}


class _TetherPassivated(_Point):
    """One runtime for the child's life: ``passivated`` sessions spawned, then passivated."""

    rt: tether.Runtime
    dir: Path

    async def setup(self) -> dict[str, Any]:
        self.dir = scratch_dir("scaling-passivated")
        self.rt = tether.Runtime(
            self.dir / "tether.db", passivate_after=self.passivate_after, gc=self.gc
        )
        await self.rt.__aenter__()
        t0 = time.perf_counter()
        await run.activate_accounts(self.rt, [f"acct-{i:06d}" for i in range(self.passivated)])
        built = time.perf_counter() - t0
        await self._passivated()
        return {"build_seconds": built, "rss_kb": rss_kb()}

    async def _passivated(self) -> None:
        """Wait until no session is active (each passivates ``passivate_after`` after its
        last message)."""
        with anyio.fail_after(self.passivate_after * 4 + 60):
            while any(a.startswith("acct-") for a in self.rt.cells):  # noqa: ASYNC110
                await anyio.sleep(0.1)
        gc.collect()

    async def round(self) -> tuple[float, dict[str, Any]]:
        first = self._next_group()
        ids = [f"acct-{i:06d}" for i in range(first, first + self.actors)]
        refs = await run.activate_accounts(self.rt, ids)
        active = len(self.rt.cells)
        dt, _ = await run.deposit_round(refs, self.per_actor, self.watch)
        rss = rss_kb()
        await self._passivated()
        return dt, {"active_at_start": active, "rss_kb": rss}

    async def close(self) -> None:
        await self.rt.aclose()
        rm_scratch(self.dir)


class _FloorPoint(_Point):
    async def round(self) -> tuple[float, dict[str, Any]]:
        sample = await bench_floor.floor_durable(
            self.actors, self.per_actor, watch=self.watch, gc=self.gc
        )
        return sample["2.floor_durable"][1], {"rss_kb": rss_kb()}


class _FloorPassivated(_Point):
    dir: Path

    async def setup(self) -> dict[str, Any]:
        self.dir = scratch_dir("scaling-floor-passivated")
        t0 = time.perf_counter()
        bench_floor.prefill_accounts(self.dir / "floor.db", self.passivated)
        return {"build_seconds": time.perf_counter() - t0, "rss_kb": rss_kb()}

    async def round(self) -> tuple[float, dict[str, Any]]:
        first = self._next_group()
        sample = await bench_floor.floor_durable(
            self.actors,
            self.per_actor,
            at=self.dir / "floor.db",
            first=first,
            watch=self.watch,
            gc=self.gc,
        )
        return sample["2.floor_durable"][1], {"rss_kb": rss_kb()}

    async def close(self) -> None:
        rm_scratch(self.dir)


def child(args: argparse.Namespace) -> None:
    kinds = {
        ("tether", False): _TetherPoint,
        ("tether", True): _TetherPassivated,
        ("floor", False): _FloorPoint,
        ("floor", True): _FloorPassivated,
    }
    point = kinds[(args.child, args.passivated > 0)](args)

    async def handle(_cmd: dict[str, Any]) -> dict[str, Any]:
        dt, extra = await point.round()
        messages = point.actors * point.per_actor
        return {"sample": {"run": [messages, dt]}, "gc": point.watch.report(), **extra}

    async def main() -> None:
        try:
            await serve_async(point.setup, handle)
        finally:
            await point.close()

    asyncio.run(main())


class PointChild(PipeChild):
    """A point of the curve in its own process; ``run`` is one round, as ``key``'s sample.
    What each round said besides its sample (GC, RSS, active sessions) is kept in ``rounds``."""

    def __init__(
        self, key: str, kind: str, actors: int, per_actor: int, sizes: Sizes, gc_: GcSettings
    ) -> None:
        self.key = key
        self.rounds: list[dict[str, Any]] = []
        argv = [
            __file__,
            "--child",
            kind,
            "--actors",
            str(actors),
            "--per-actor",
            str(per_actor),
            *gc_.argv(),
        ]
        if "passivated" in key:
            argv += ["--passivated", str(sizes.passivated)]
            argv += ["--passivate-after", str(sizes.passivate_after)]
        super().__init__(f"{key} child", argv, ready_timeout=1800.0, wait=False)

    def run(self) -> Sample:
        reply = self.request({"run": True})
        self.rounds.append(reply)
        n, dt = reply["sample"]["run"]
        return {self.key: (int(n), float(dt))}


# ----------------------------------------------------------------------------- the run


def passivated_label(sizes: Sizes) -> str:
    return f"{sizes.passivated:,} passivated + {sizes.active:,} active"


def run_all(sizes: Sizes, gc_: GcSettings) -> Bench:
    b = Bench(sizes)  # type: ignore[arg-type]  # Bench only reads .runs
    specs: list[tuple[str, str, str, int, int]] = [  # key, label, kind, actors, per actor
        (f"1.{kind}_{n}", f"{kind}: {n:,} sessions x {sizes.messages // n} msgs", kind, n,
         sizes.messages // n)
        for n in sizes.points
        for kind in ("tether", "floor")
    ]  # fmt: skip
    per = sizes.messages // sizes.active
    for kind in ("tether", "floor"):
        label = f"{kind}: {passivated_label(sizes)}, x {per} msgs"
        specs.append((f"2.{kind}_passivated", label, kind, sizes.active, per))
    started: list[tuple[PointChild, str]] = []
    children: list[PointChild] = []
    try:
        for key, label, kind, actors, per_actor in specs:
            started.append((PointChild(key, kind, actors, per_actor, sizes, gc_), label))
        print(f"{len(started)} child processes setting up, one per point", flush=True)
        scenarios = []
        for child_, label in started:  # all started: their setups overlap
            try:
                child_.wait_ready()
            except Exception as exc:
                b.figures[child_.key] = run.Figure(child_.key, label, "msg/s", error=f"{exc}")
                print(f"{child_.key:<26} FAILED: {exc}", flush=True)
                continue
            children.append(child_)
            scenarios.append(Scenario([(child_.key, label, "msg/s")], child_.run))
        b.measure(*scenarios)
    finally:
        for child_, _ in started:
            child_.close()
    for c in children:
        _annotate(b, c)
    return b


def _annotate(b: Bench, c: PointChild) -> None:
    """The notes of a point: the collector's share of its runs and what it saw, its RSS, its
    sessions active at the start, and its build time."""
    f = b.figures[c.key]
    rounds = c.rounds[1:]  # not the warm-up
    if not f.ok or not rounds:
        return
    runs = [s for _, s in f.samples]
    gc_share = statistics.median(
        sum(r["gc"]["seconds"]) / s for r, s in zip(rounds, runs, strict=True)
    )
    full = statistics.median(r["gc"]["collections"][2] for r in rounds)
    seen = rounds[-1]["gc"]
    frozen = f", {seen['frozen']:,} frozen" if seen["frozen"] else ""
    notes = [
        f"GC {100 * gc_share:.0f}% of the run (full collections: {full:.0f}; threshold "
        f"{tuple(seen['threshold'])}{frozen}; {seen['tracked']:,} objects tracked)",
        f"RSS {statistics.median(r['rss_kb'] for r in rounds) / 1024:,.0f} MiB",
    ]
    if "active_at_start" in rounds[-1]:
        notes.append(f"{min(r['active_at_start'] for r in rounds):,} active at the start")
    if "build_seconds" in c.ready:
        notes.append(f"built in {c.ready['build_seconds']:.0f} s")
    f.note = "; ".join(notes)
    b.extra[c.key] = {"ready": c.ready, "warm_up": c.rounds[0], "rounds": rounds}


def targets(sizes: Sizes) -> list[tuple[str, str, str | None, float | None]]:
    small, large = sizes.points[0], sizes.points[-1]
    out: list[tuple[str, str, str | None, float | None]] = [
        (f"#20 flat: tether at {large:,} >= 0.8x tether at {small:,} sessions",
         f"1.tether_{large}", f"1.tether_{small}", 0.8),
        (f"(information) the floor at {large:,} / at {small:,} sessions",
         f"1.floor_{large}", f"1.floor_{small}", None),
        (f"(information) tether, {passivated_label(sizes)} / {small:,} sessions",
         "2.tether_passivated", f"1.tether_{small}", None),
        (f"(information) the floor, {passivated_label(sizes)} / {small:,} sessions",
         "2.floor_passivated", f"1.floor_{small}", None),
    ]  # fmt: skip
    for n in sizes.points:
        if n == 1_000:
            out.append(("#20 durable: tether >= 0.7x the floor (1,000 sessions)",
                        "1.tether_1000", "1.floor_1000", 0.7))  # fmt: skip
        else:
            out.append((f"(information) tether / the floor at {n:,} sessions",
                        f"1.tether_{n}", f"1.floor_{n}", None))  # fmt: skip
    out.append((f"(information) tether / the floor, {passivated_label(sizes)}",
                "2.tether_passivated", "2.floor_passivated", None))  # fmt: skip
    return out


def draw(b: Bench, sizes: Sizes, gc_: GcSettings, out_dir: Path, meta: dict[str, Any]) -> Path:
    import charts

    def curve(kind: str, label: str, colour: str) -> charts.Curve:
        points = [(n, b.figures[f"1.{kind}_{n}"]) for n in sizes.points]
        return charts.Curve(label, [(n, f) for n, f in points if f.ok], colour)

    curves = [
        c
        for c in (curve("tether", "tether", charts.TETHER), curve("floor", "floor", charts.FLOOR))
        if c.points
    ]
    extra = [
        (f"{kind}: {passivated_label(sizes)}", sizes.passivated + sizes.active, f, colour)
        for kind, colour in (("tether", charts.TETHER), ("floor", charts.FLOOR))
        if (f := b.figures.get(f"2.{kind}_passivated")) is not None and f.ok
    ]
    return charts.scaling_chart(
        curves,
        extra,
        out_dir / "scaling.png",
        title=(
            f"Durable throughput against sessions in the runtime: {sizes.messages:,} messages "
            "per run, one sender per session, sync=FULL (higher is better)"
        ),
        subtitle=f"GC: {gc_.describe()}. {run.chart_subtitle(meta)}",
        target=0.8,
    )


def threshold(arg: str) -> tuple[int, int, int] | None:
    """``--gc-threshold A,B,C`` (as ``gc.set_threshold`` takes them), or ``unchanged``."""
    if arg == "unchanged":
        return None
    try:
        values = tuple(int(v) for v in arg.split(","))
    except ValueError:
        values = ()
    if len(values) != 3 or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"3 integers > 0, like 50000,20,100, or 'unchanged'; not {arg!r}"
        )
    return values  # type: ignore[return-value]


def add_gc_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gc-threshold",
        metavar="A,B,C",
        type=threshold,
        default=tether.GcPolicy().threshold,
        help="the GcPolicy threshold of every child (default: the runtime's); 'unchanged': "
        "CPython's own",
    )
    p.add_argument(
        "--gc-no-freeze", action="store_true", help="a GcPolicy that never freezes, in every child"
    )


def gc_settings(args: argparse.Namespace) -> GcSettings:
    return GcSettings(args.gc_threshold, not args.gc_no_freeze)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    run.add_house_options(p)
    p.add_argument("--charts", metavar="DIR", help="also draw DIR/scaling.png")
    add_gc_options(p)
    # the child's side
    p.add_argument("--child", choices=("tether", "floor"), help=argparse.SUPPRESS)
    p.add_argument("--actors", type=int, help=argparse.SUPPRESS)
    p.add_argument("--per-actor", type=int, help=argparse.SUPPRESS)
    p.add_argument("--passivated", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--passivate-after", type=float, default=5.0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return 0
    sizes = run.chosen_sizes(p, args, FULL, QUICK)
    gc_ = gc_settings(args)
    charts_dir = run.charts_dir(args.charts)
    meta = run.run_meta(args.quick, sizes.runs, "tether", "msgspec", "anyio", "matplotlib")
    meta["gc"] = gc_.describe()
    run.announce(f"tether scaling (GC in every child: {gc_.describe()})", meta)
    t0 = time.perf_counter()
    with run.tidy_data_dir():
        b = run_all(sizes, gc_)
    rows = run.evaluate(b, targets(sizes))
    print()
    print(run.table(b, rows))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    if charts_dir is not None:
        print(f"chart: {draw(b, sizes, gc_, charts_dir, meta)}")
    extra = {"sizes": asdict(sizes), "gc": gc_.describe()}
    return run.finish(b, rows, meta, extra, args.json)


if __name__ == "__main__":
    sys.exit(main())
