"""The cost of the effects ledger (issues #4, #20), beside the floor, LangGraph and DBOS, in one run.

    python benchmarks/bench_effects.py                  # full run: median of 5 runs (+1 warm-up)
    python benchmarks/bench_effects.py --quick          # smoke mode for CI: small sizes, 1 run
    python benchmarks/bench_effects.py --json out.json  # also write the raw per-run samples
    python benchmarks/bench_effects.py --runs 9         # more runs per figure
    python benchmarks/bench_effects.py --charts DIR     # also draw DIR/peers.png

Figures (each a rate, count / seconds: the median of N runs, with min and max; the method of
``benchmarks/run.py``: one warm-up run, then interleaved rounds, every run checks its result):

1. workflows/s of a 3-step workflow:

   * ``1.tether_sessions``: 100 ``Session`` actors on a fresh SQLite file (default
     ``durability="full"``: WAL, ``synchronous=FULL``), spawned and activated before the clock
     starts. Each step (one message) makes 3 effects, ``await self.effect(tool, x=...)`` of the
     trivial async tools ``s1`` (x+1), ``s2`` (x*2), ``s3`` (x-3), then persists one event
     holding the result. One sender task per session tells its steps, then asks the state;
     timed until every ask has returned (every step processed and committed) and each
     session's state is checked (count and sum of the results).
   * ``1.dbos_*``: DBOS Transact, the same 3-step workflow (three ``@DBOS.step()``s in a
     ``@DBOS.workflow()``) on a SQLite system database, as in
     ``anchors/peer-bench/bench_dbos.py``. DBOS is a process-wide singleton, so it runs in a
     child process (one per journal mode, launched once) that the parent drives round by round
     over a pipe. Variants: ``seq`` (started and awaited one after another, as the peer bench),
     ``async100`` (``async def`` workflow and steps, 100 concurrent callers under
     ``asyncio.gather``), ``threads100`` (the sync workflow called from a pool of 100
     threads); each with DBOS's default SQLite setup (``journal_mode=delete``) and with the
     file switched to WAL first (``_wal``). Every workflow's result is checked.
   * ``1.floor_effects``: ``bench_floor.floor_effects``, the least program that keeps the same
     promises (intent committed before each call, receipt, event, on tether's schema).
   * ``1.langgraph_{sync,async}``: LangGraph, a 3-node graph (one node per tool) with its SQLite
     checkpointer (``AsyncSqliteSaver``), one thread per session, 100 sessions at once, with
     ``durability="sync"`` and with LangGraph's default ``"async"`` (``peer_langgraph.py``, in
     a child process). Each thread's stored state is checked after every run.

2. the added latency of one effect: one session, sequential asks, each message making
   ``EFFECTS_PER_STEP`` calls of the same trivial tool:

   * ``2.effect_seq``: through the ledger, ``await self.effect(tool, x=i)`` (intent committed,
     call, receipt committed);
   * ``2.direct_seq``: the bare call ``await tool(x=i)`` in the same handler.

   Derived: microseconds per effect and per bare call (both including their share of the
   step), the added microseconds of one effect (intent + receipt) and the ratio.

Targets (on medians, PASS or MISS, never adjusted): tether sessions >= 50x DBOS (#4), against
the best DBOS figure of the run (whichever variant it is; the table names it); and, from #20,
tether >= 50x LangGraph in each durability mode, tether ahead of the best DBOS, tether >= 0.6x
the floor.

Nothing here asserts anything about wall-clock time: the exit status is 1 only if a scenario
computes a wrong result, raises or hangs. Without DBOS or LangGraph installed (``pip install -e
'.[bench]'``) or if one cannot start, its figures show as skipped and its targets as n/a.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sqlite3
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import structlog

import tether

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run
from children import PipeChild, serve
from run import (  # the house method, shared with run.py
    Bench,
    Figure,
    Sample,
    Scenario,
    figure_rows,
    finish,
    rm_scratch,
    run_meta,
    scratch_dir,
    target_rows,
)

# The runtime's info lines would drown the table.
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

ASK_TIMEOUT = 120.0  # a timeout here means a hang, not a slow run
TARGET = 50.0  # tether sessions >= 50x DBOS workflows/s
CONCURRENCY = 100  # sessions, and concurrent DBOS callers
DBOS_VARIANTS = ("seq", "async100", "threads100")
DBOS_MODES = ("delete", "wal")  # DBOS's default SQLite journal mode, and WAL


@dataclass(frozen=True)
class Sizes:
    runs: int
    sessions: int
    steps: int  # steps (messages) in total, over all sessions
    latency_steps: int  # sequential messages of the one-session latency figures
    dbos_seq: int  # workflows per run, started and awaited one after another
    dbos_concurrent: int  # workflows per run of each concurrent variant
    # graph runs per run of each LangGraph figure, over all sessions (0: no LangGraph). Fewer
    # than tether's steps: at ~100 steps/s a LangGraph run of 2,000 steps takes 20-30 s.
    langgraph_steps: int = 0


FULL = Sizes(
    runs=5,
    sessions=100,
    steps=2_000,
    latency_steps=200,
    dbos_seq=300,
    dbos_concurrent=300,
    langgraph_steps=500,
)
QUICK = Sizes(
    runs=1,
    sessions=100,
    steps=300,
    latency_steps=20,
    dbos_seq=30,
    dbos_concurrent=100,
    langgraph_steps=100,
)
EFFECTS_PER_STEP = 10  # calls per message in the latency figures


# ============================================================================ tether


@tether.tool(recovery="retry")  # DBOS steps are at-least-once: the same semantics
async def s1(x: int) -> int:
    return x + 1


@tether.tool(recovery="retry")  # DBOS steps are at-least-once: the same semantics
async def s2(x: int) -> int:
    return x * 2


@tether.tool(recovery="retry")  # DBOS steps are at-least-once: the same semantics
async def s3(x: int) -> int:
    return x - 3


def workflow(x: int) -> int:
    """What the 3-step workflow computes, to check every run against."""
    return (x + 1) * 2 - 3


class Step(tether.Message):
    x: int


class GetState(tether.Message):
    pass


class Stepped(tether.Event):
    result: int


class SessionState(msgspec.Struct):
    steps: int = 0
    total: int = 0


class Session(tether.Actor[SessionState]):
    """One agent session: each step makes 3 effects and persists one event."""

    initial_state = SessionState()

    def apply(self, state: SessionState, event: Stepped) -> SessionState:
        return SessionState(state.steps + 1, state.total + event.result)

    async def handle(self, msg: Step | GetState) -> tuple[int, int] | None:
        if type(msg) is Step:
            a = await self.effect(s1, x=msg.x)
            b = await self.effect(s2, x=a)
            c = await self.effect(s3, x=b)
            self.persist(Stepped(result=c))
            return None
        return (self.state.steps, self.state.total)


async def tether_sessions(n_sessions: int, steps: int, url: str | None = None) -> Sample:
    """``url``: the (new, empty) store to run on; None: a fresh SQLite file."""
    per = steps // n_sessions
    d = scratch_dir("effects")
    try:
        async with tether.Runtime(url or d / "tether.db") as rt:
            refs: list[tether.ActorRef] = []

            async def spawn(i: int) -> None:
                ref = await rt.spawn(Session, f"session-{i:04d}")
                await ref.ask(GetState(), timeout=ASK_TIMEOUT)  # active and recovered
                refs.append(ref)

            async with anyio.create_task_group() as tg:
                for i in range(n_sessions):
                    tg.start_soon(spawn, i)
            before = _commit_stats(rt)

            expected = (per, sum(workflow(x) for x in range(per)))

            async def sender(ref: tether.ActorRef) -> None:
                tell = ref.tell
                for x in range(per):
                    await tell(Step(x=x))
                got = await ref.ask(GetState(), timeout=ASK_TIMEOUT)
                assert got == expected, (ref.id, got, expected)

            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for ref in refs:
                    tg.start_soon(sender, ref)
            dt = time.perf_counter() - t0
            after = _commit_stats(rt)
            # 3 receipts per step, every one done
            done = await rt.store.find_effects(status="done")
            assert len(done) == 3 * per * n_sessions, len(done)
    finally:
        rm_scratch(d)
    if before and after:
        COMMIT_STATS.append((after[0] - before[0], after[1] - before[1]))
    return {"1.tether_sessions": (per * n_sessions, dt)}


COMMIT_STATS: list[tuple[int, int]] = []  # (group commits, writes) of each sessions run


def _commit_stats(rt: tether.Runtime) -> tuple[int, int] | None:
    try:
        st = rt.stats()
        return int(st["commits"]), int(st["writes"])
    except (AttributeError, KeyError, TypeError):
        return None


class RunEffects(tether.Message):
    base: int
    ledger: bool  # True: through self.effect; False: the bare call


class Loop(tether.Actor[SessionState]):
    """Makes EFFECTS_PER_STEP calls of ``s1`` per message, through the ledger or not."""

    initial_state = SessionState()

    async def handle(self, msg: RunEffects) -> int:
        total = 0
        if msg.ledger:
            for i in range(msg.base, msg.base + EFFECTS_PER_STEP):
                total += await self.effect(s1, x=i)
        else:
            for i in range(msg.base, msg.base + EFFECTS_PER_STEP):
                total += await s1(x=i)
        return total


async def tether_latency(steps: int, ledger: bool) -> Sample:
    key = "2.effect_seq" if ledger else "2.direct_seq"
    d = scratch_dir("effect-latency")
    try:
        async with tether.Runtime(d / "tether.db") as rt:
            ref = await rt.spawn(Loop, "loop")
            await ref.ask(RunEffects(base=-1000, ledger=ledger), timeout=ASK_TIMEOUT)  # warm
            ask = ref.ask
            t0 = time.perf_counter()
            for n in range(steps):
                base = n * EFFECTS_PER_STEP
                got = await ask(RunEffects(base=base, ledger=ledger), timeout=ASK_TIMEOUT)
                want = sum(i + 1 for i in range(base, base + EFFECTS_PER_STEP))
                assert got == want, (got, want)
            dt = time.perf_counter() - t0
            done = await rt.store.find_effects(actor_id="loop", status="done")
            assert len(done) == (steps + 1) * EFFECTS_PER_STEP if ledger else not done
    finally:
        rm_scratch(d)
    return {key: (steps * EFFECTS_PER_STEP, dt)}


# ============================================================================ DBOS (child process)


def dbos_child(mode: str, url: str | None = None) -> None:
    """Launch DBOS on a fresh SQLite system database (or, ``url`` given, on that PostgreSQL
    database: ``bench_pg.py``), then serve one command per round:
    ``{"seq": n, "concurrent": n}`` -> ``{"sample": {figure: [count, seconds], ...}}``."""
    import concurrent.futures

    from dbos import DBOS, DBOSConfig

    d = scratch_dir(f"dbos-{mode}")
    db = d / "dbos_sys.sqlite"
    counter = iter(range(10**9))  # every workflow gets fresh input
    wf: Any = None
    awf: Any = None

    def ready() -> dict[str, Any]:
        nonlocal wf, awf
        if mode == "wal":  # switch the file to WAL before DBOS opens it (as the peer bench)
            c = sqlite3.connect(db)
            c.execute("PRAGMA journal_mode=WAL")
            c.close()
        config: DBOSConfig = {
            "name": "tether-effects-bench",
            "system_database_url": url or f"sqlite:///{db}",
            "log_level": "WARNING",
        }
        DBOS(config=config)
        logging.getLogger("dbos").setLevel(logging.WARNING)

        @DBOS.step()
        def d1(x: int) -> int:
            return x + 1

        @DBOS.step()
        def d2(x: int) -> int:
            return x * 2

        @DBOS.step()
        def d3(x: int) -> int:
            return x - 3

        @DBOS.workflow()
        def wf_(x: int) -> int:
            return d3(d2(d1(x)))

        @DBOS.step()
        async def ad1(x: int) -> int:
            return x + 1

        @DBOS.step()
        async def ad2(x: int) -> int:
            return x * 2

        @DBOS.step()
        async def ad3(x: int) -> int:
            return x - 3

        @DBOS.workflow()
        async def awf_(x: int) -> int:
            return await ad3(await ad2(await ad1(x)))

        wf, awf = wf_, awf_
        DBOS.launch()
        if url is not None:
            return {"ready": True, "journal_mode": "n/a (PostgreSQL)"}
        jm = sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0]
        return {"ready": True, "journal_mode": jm}

    def seq(n: int) -> tuple[int, float]:
        xs = [next(counter) for _ in range(n)]
        t0 = time.perf_counter()
        for x in xs:
            assert wf(x) == workflow(x)
        return n, time.perf_counter() - t0

    def async_concurrent(n: int) -> tuple[int, float]:
        xs = iter([next(counter) for _ in range(n)])

        async def caller() -> None:
            for x in xs:
                assert await awf(x) == workflow(x)

        async def go() -> float:
            t0 = time.perf_counter()
            await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))
            return time.perf_counter() - t0

        return n, asyncio.run(go())

    def threads_concurrent(n: int) -> tuple[int, float]:
        xs = [next(counter) for _ in range(n)]
        with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
            t0 = time.perf_counter()
            got = list(pool.map(wf, xs))
            dt = time.perf_counter() - t0
        assert got == [workflow(x) for x in xs]
        return n, dt

    def handle(cmd: dict[str, Any]) -> dict[str, Any]:
        return {
            "sample": {
                f"1.dbos_seq_{mode}": seq(cmd["seq"]),
                f"1.dbos_async100_{mode}": async_concurrent(cmd["concurrent"]),
                f"1.dbos_threads100_{mode}": threads_concurrent(cmd["concurrent"]),
            }
        }

    try:
        serve(ready, handle)
    finally:
        with contextlib.suppress(Exception):
            DBOS.destroy()
        rm_scratch(d)


class DbosChild(PipeChild):
    """A DBOS child process (one journal mode), driven one round at a time."""

    def __init__(self, mode: str, url: str | None = None) -> None:
        self.mode = mode
        argv = [__file__, "--dbos-child", mode, *(["--dbos-url", url] if url else [])]
        super().__init__(f"DBOS child ({mode})", argv)
        self.journal_mode = str(self.ready["journal_mode"])

    def run(self, sizes: Sizes) -> Sample:
        return self.sample({"seq": sizes.dbos_seq, "concurrent": sizes.dbos_concurrent})


def dbos_figures(mode: str) -> list[tuple[str, str, str]]:
    journal = "DBOS default: journal_mode=delete" if mode == "delete" else "switched to WAL"
    return [
        (f"1.dbos_seq_{mode}", f"DBOS 3-step workflow, sequential, SQLite ({journal})", "wf/s"),
        (
            f"1.dbos_async100_{mode}",
            f"DBOS async workflow, {CONCURRENCY} concurrent (asyncio.gather), {journal}",
            "wf/s",
        ),
        (
            f"1.dbos_threads100_{mode}",
            f"DBOS sync workflow, {CONCURRENCY} threads, {journal}",
            "wf/s",
        ),
    ]


# ============================================================================ the run


def run_all(sizes: Sizes) -> Bench:
    import bench_floor  # it imports this module: not at the top

    b = Bench(sizes)  # type: ignore[arg-type]  # Bench only reads .runs
    scenarios = [
        Scenario(
            [
                (
                    "1.tether_sessions",
                    f"tether, {sizes.sessions} sessions, 3 effects + 1 event per step",
                    "steps/s",
                )
            ],
            lambda: asyncio.run(tether_sessions(sizes.sessions, sizes.steps)),
            {"1.tether_sessions": f"{sizes.steps:,} steps = workflows; SQLite synchronous=FULL"},
        ),
        Scenario(
            [("1.floor_effects", "floor: the same steps, least code (bench_floor.py)", "steps/s")],
            lambda: _renamed(
                asyncio.run(bench_floor.floor_effects(sizes.sessions, sizes.steps)),
                "3.floor_effects",
                "1.floor_effects",
            ),
        ),
        Scenario(
            [("2.effect_seq", "one session, sequential, self.effect(tool)", "effects/s")],
            lambda: asyncio.run(tether_latency(sizes.latency_steps, ledger=True)),
            {"2.effect_seq": f"{EFFECTS_PER_STEP} effects per step, intent + receipt each"},
        ),
        Scenario(
            [("2.direct_seq", "one session, sequential, bare await tool(...)", "calls/s")],
            lambda: asyncio.run(tether_latency(sizes.latency_steps, ledger=False)),
            {"2.direct_seq": f"{EFFECTS_PER_STEP} calls per step, same handler"},
        ),
    ]
    children: list[PipeChild] = []
    try:
        scenarios += _langgraph_scenarios(b, sizes, children)
        scenarios += dbos_scenarios(b, sizes, children)
        b.measure(*scenarios)
    finally:
        for child in children:
            child.close()

    timed = COMMIT_STATS[1:]  # not the warm-up
    sessions = b.figures["1.tether_sessions"]
    if timed and sessions.ok:
        b.extra["sessions_commits_writes_per_run"] = timed
        commits = statistics.median(c for c, _ in timed)
        per = statistics.median(w / c for c, w in timed if c)
        steps = sessions.samples[-1][0]
        sessions.note += (
            f"; {commits:.0f} group commits per run ({commits / steps:.2f} per step), "
            f"{per:.0f} writes per commit"
        )

    eff, direct = b.figures["2.effect_seq"], b.figures["2.direct_seq"]
    if eff.ok and direct.ok:
        us_eff, us_direct = 1e6 / eff.median, 1e6 / direct.median
        b.extra["effect_us"] = us_eff
        b.extra["direct_us"] = us_direct
        b.extra["added_us_per_effect"] = us_eff - us_direct
        b.extra["effect_over_direct"] = us_eff / us_direct
        eff.note += f"; {us_eff:.0f} µs per effect"
        direct.note += f"; {us_direct:.1f} µs per call"
    return b


def _renamed(sample: Sample, old: str, new: str) -> Sample:
    return {new: sample[old]}


def _langgraph_scenarios(b: Bench, sizes: Sizes, children: list[PipeChild]) -> list[Scenario]:
    """LangGraph's two durability modes, from one child process (added to ``children``); or
    skipped figures, saying why."""
    import peer_langgraph as lg

    figs = lg.figures()
    if not sizes.langgraph_steps:
        return []
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError:
        why = "langgraph-checkpoint-sqlite is not installed (pip install -e '.[bench]')"
    else:
        try:
            child = lg.LangGraphChild()
        except Exception as exc:
            why = f"LangGraph cannot start here: {exc}"
        else:
            children.append(child)
            note = f"{sizes.langgraph_steps:,} graph runs; {child.setup}; {child.versions}"
            return [
                Scenario(
                    [fig],
                    lambda d=d: child.run(sizes.sessions, sizes.langgraph_steps, d),  # type: ignore[misc]
                    {fig[0]: note},
                )
                for d, fig in zip(lg.DURABILITIES, figs, strict=True)
            ]
    for key, label, unit in figs:
        b.skip(key, label, unit, why)
    return []


def dbos_scenarios(b: Bench, sizes: Sizes, children: list[PipeChild]) -> list[Scenario]:
    """One DBOS child per journal mode (added to ``children``), each a scenario of its three
    variants; or skipped figures, saying why."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        missing = "dbos is not installed (pip install -e '.[bench]')"
    else:
        missing = ""
    out: list[Scenario] = []
    for mode in DBOS_MODES:
        figs = dbos_figures(mode)
        why = missing
        if not why:
            try:
                child = DbosChild(mode)
            except Exception as exc:
                why = f"DBOS cannot start here: {exc}"
            else:
                children.append(child)
                notes = {key: f"journal_mode={child.journal_mode}" for key, _, _ in figs}
                out.append(Scenario(figs, lambda c=child: c.run(sizes), notes))  # type: ignore[misc]
                continue
        for key, label, unit in figs:
            b.skip(key, label, unit, why)
    return out


def best_dbos(b: Bench) -> Figure | None:
    ok = [f for k, f in b.figures.items() if k.startswith("1.dbos_") and f.ok]
    return max(ok, key=lambda f: f.median, default=None)


def evaluate(b: Bench) -> list[dict[str, Any]]:
    best = best_dbos(b)
    best_key = best.key if best is not None else "1.dbos_best"
    targets: list[tuple[str, str, str | None, float | None]] = [
        (f"#4 tether >= {TARGET:g}x DBOS (best of the run: {best_key})", "1.tether_sessions",
         best_key, TARGET),
        ("#20 tether >= 50x LangGraph, durability='sync'", "1.tether_sessions",
         "1.langgraph_sync", 50.0),
        ("#20 tether >= 50x LangGraph, durability='async' (its default)", "1.tether_sessions",
         "1.langgraph_async", 50.0),
        (f"#20 tether ahead of DBOS (best of the run: {best_key})", "1.tether_sessions",
         best_key, 1.0),
        ("#20 3-effect step: tether >= 0.6x the floor", "1.tether_sessions",
         "1.floor_effects", 0.6),
    ]  # fmt: skip
    targets += [
        (
            "(information) tether vs DBOS sequential, as the peer bench",
            "1.tether_sessions",
            key,
            None,
        )
        for key in ("1.dbos_seq_delete", "1.dbos_seq_wal")
        if key != best_key
    ]
    return run.evaluate(b, targets)


def table(b: Bench, targets: list[dict[str, Any]]) -> str:
    lines = figure_rows(b)
    if "added_us_per_effect" in b.extra:
        x = b.extra
        lines += [
            "",
            "| added latency of one effect (medians) | µs |",
            "|---|---:|",
            f"| per effect through the ledger (intent + call + receipt) | {x['effect_us']:.0f} |",
            f"| per bare call (same handler, same share of the step) | {x['direct_us']:.1f} |",
            f"| **added by the ledger, per effect** | **{x['added_us_per_effect']:.0f}** |",
            f"| ratio effect / bare call | {x['effect_over_direct']:.0f}x |",
        ]
    return "\n".join([*lines, "", *target_rows(b, targets)])


def draw_peers(b: Bench, out_dir: Path, meta: dict[str, Any]) -> Path | None:
    """``out_dir/peers.png``: the 3-effect step of tether, the floor, LangGraph (both modes)
    and the best DBOS variant of the run, on a log scale; None if tether's figure failed."""
    import charts

    wanted = [
        ("tether", "1.tether_sessions", charts.TETHER),
        ("floor (least code)", "1.floor_effects", charts.FLOOR),
        ("LangGraph, durability='sync'", "1.langgraph_sync", charts.PEER),
        ("LangGraph, durability='async'", "1.langgraph_async", charts.PEER_2),
    ]
    bars = [
        charts.Bar(label, b.figures[key], colour)
        for label, key, colour in wanted
        if key in b.figures and b.figures[key].ok
    ]
    best = best_dbos(b)
    if best is not None:
        bars.append(charts.Bar(f"DBOS, best ({best.key[2:]})", best, charts.PEER_3))
    if not bars or bars[0].label != "tether":
        return None
    sessions = b.sizes.sessions  # type: ignore[attr-defined]
    langgraph = [b.figures[k] for k in ("1.langgraph_sync", "1.langgraph_async") if k in b.figures]
    best_langgraph = max((f.median for f in langgraph if f.ok), default=None)
    return charts.peers_chart(
        bars,
        out_dir / "peers.png",
        title=f"The 3-effect step on {sessions} sessions at once, SQLite (higher is better)",
        subtitle=run.chart_subtitle(meta),
        target=("target: 50x LangGraph", 50 * best_langgraph) if best_langgraph else None,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="tether effects-ledger benchmark, beside the floor, LangGraph and DBOS."
    )
    run.add_house_options(p)
    p.add_argument("--charts", metavar="DIR", help="also draw DIR/peers.png")
    p.add_argument("--dbos-child", metavar="MODE", help=argparse.SUPPRESS)
    p.add_argument("--dbos-url", metavar="URL", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dbos_child:
        dbos_child(args.dbos_child, args.dbos_url)
        return 0
    sizes = run.chosen_sizes(p, args, FULL, QUICK)
    with run.tidy_data_dir():
        return _run(sizes, args.quick, args.json, run.charts_dir(args.charts))


PACKAGES = ("tether", "aiosqlite", "msgspec", "anyio", "dbos", "SQLAlchemy", "langgraph")


def _run(sizes: Sizes, quick: bool, json_path: str | None, charts_dir: Path | None) -> int:
    meta = run_meta(quick, sizes.runs, *PACKAGES, "langgraph-checkpoint-sqlite")
    print(
        f"tether effects benchmark, {meta['mode']} mode: median of {sizes.runs} run(s) after 1 "
        f"warm-up. Python {meta['python']}, SQLite {meta['sqlite']}, {meta['cpus']} CPUs, "
        f"dbos {meta['dbos']}, langgraph {meta['langgraph']}, {meta['platform']}",
        flush=True,
    )
    t0 = time.perf_counter()
    b = run_all(sizes)
    targets = evaluate(b)
    print()
    print(table(b, targets))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    if charts_dir is not None:
        drawn = draw_peers(b, charts_dir, meta)
        print(f"chart: {drawn}" if drawn else "chart: not drawn (tether's figure failed)")
    extra = {"sizes": asdict(sizes), "effects_per_step": EFFECTS_PER_STEP}
    return finish(b, targets, meta, extra, json_path)


if __name__ == "__main__":
    sys.exit(main())
