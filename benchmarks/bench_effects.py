"""The cost of the effects ledger (issue #4), side by side with DBOS, in one run.

    python benchmarks/bench_effects.py                  # full run: median of 5 runs (+1 warm-up)
    python benchmarks/bench_effects.py --quick          # smoke mode for CI: small sizes, 1 run
    python benchmarks/bench_effects.py --json out.json  # also write the raw per-run samples
    python benchmarks/bench_effects.py --runs 9         # more runs per figure

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

2. the added latency of one effect: one session, sequential asks, each message making
   ``EFFECTS_PER_STEP`` calls of the same trivial tool:

   * ``2.effect_seq``: through the ledger, ``await self.effect(tool, x=i)`` (intent committed,
     call, receipt committed);
   * ``2.direct_seq``: the bare call ``await tool(x=i)`` in the same handler.

   Derived: microseconds per effect and per bare call (both including their share of the
   step), the added microseconds of one effect (intent + receipt) and the ratio.

Targets (on medians, PASS or MISS, never adjusted): tether sessions >= 50x DBOS, against the
best DBOS figure of the run (whichever variant it is; the table names it).

Nothing here asserts anything about wall-clock time: the exit status is 1 only if a scenario
computes a wrong result, raises or hangs. Without DBOS installed (``pip install -e
'.[bench]'``) or if it cannot start, its figures show as skipped and the target as n/a.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

import anyio
import msgspec
import structlog

import tether

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import (  # the house method, shared with run.py
    DATA_DIR,
    Bench,
    Figure,
    Sample,
    Scenario,
    finish,
    fmt,
    rm_scratch,
    run_meta,
    scratch_dir,
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


FULL = Sizes(
    runs=5, sessions=100, steps=2_000, latency_steps=200, dbos_seq=300, dbos_concurrent=300
)
QUICK = Sizes(runs=1, sessions=100, steps=300, latency_steps=20, dbos_seq=30, dbos_concurrent=100)
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


async def tether_sessions(n_sessions: int, steps: int) -> Sample:
    per = steps // n_sessions
    d = scratch_dir("effects")
    try:
        async with tether.Runtime(d / "tether.db") as rt:
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


def dbos_child(mode: str) -> None:
    """Launch DBOS on a fresh SQLite system database, then serve one command line per round
    from stdin: ``{"seq": n, "concurrent": n}`` -> ``@@{figure: [count, seconds], ...}``."""
    out = sys.stdout
    sys.stdout = sys.stderr  # only our result lines on the pipe
    import concurrent.futures

    from dbos import DBOS, DBOSConfig

    d = scratch_dir(f"dbos-{mode}")
    db = d / "dbos_sys.sqlite"
    try:
        if mode == "wal":  # switch the file to WAL before DBOS opens it (as the peer bench)
            c = sqlite3.connect(db)
            c.execute("PRAGMA journal_mode=WAL")
            c.close()
        config: DBOSConfig = {
            "name": "tether-effects-bench",
            "system_database_url": f"sqlite:///{db}",
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
        def wf(x: int) -> int:
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
        async def awf(x: int) -> int:
            return await ad3(await ad2(await ad1(x)))

        DBOS.launch()
        jm = sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0]
        counter = iter(range(10**9))  # every workflow gets fresh input

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

        print("@@" + json.dumps({"ready": True, "journal_mode": jm}), file=out, flush=True)
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd.get("quit"):
                break
            try:
                sample = {
                    f"1.dbos_seq_{mode}": seq(cmd["seq"]),
                    f"1.dbos_async100_{mode}": async_concurrent(cmd["concurrent"]),
                    f"1.dbos_threads100_{mode}": threads_concurrent(cmd["concurrent"]),
                }
                reply: dict[str, Any] = {"sample": sample}
            except Exception as exc:
                traceback.print_exc()
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            print("@@" + json.dumps(reply), file=out, flush=True)
    finally:
        with contextlib.suppress(Exception):
            DBOS.destroy()
        rm_scratch(d)


class DbosChild:
    """A DBOS child process (one journal mode), driven one round at a time."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.log: IO[str] = tempfile.TemporaryFile("w+")  # noqa: SIM115 -- closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--dbos-child", mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.journal_mode = str(self._read(timeout=120.0)["journal_mode"])

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"DBOS child ({self.mode}) exited: {self.stderr_tail()}")
            if line.startswith("@@"):
                reply: dict[str, Any] = json.loads(line[2:])
                if "error" in reply:
                    raise RuntimeError(reply["error"])
                return reply
        raise TimeoutError(f"DBOS child ({self.mode}) did not answer in {timeout:.0f} s")

    def stderr_tail(self) -> str:
        self.log.seek(0)
        lines = [ln for ln in self.log.read().splitlines() if ln.strip()]
        return " | ".join(lines[-3:])[-600:]

    def run(self, sizes: Sizes) -> Sample:
        assert self.proc.stdin is not None
        self.proc.stdin.write(
            json.dumps({"seq": sizes.dbos_seq, "concurrent": sizes.dbos_concurrent}) + "\n"
        )
        self.proc.stdin.flush()
        sample = self._read(timeout=600.0)["sample"]
        return {k: (int(n), float(s)) for k, (n, s) in sample.items()}

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


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
    b = Bench(sizes)  # type: ignore[arg-type]  # Bench only reads .runs
    children: list[DbosChild] = []
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
    try:
        import dbos  # noqa: F401
    except ImportError:
        dbos_missing = "dbos is not installed (pip install -e '.[bench]')"
    else:
        dbos_missing = ""
    try:
        for mode in DBOS_MODES:
            figs = dbos_figures(mode)
            if dbos_missing:
                for key, label, unit in figs:
                    b.skip(key, label, unit, dbos_missing)
                continue
            try:
                child = DbosChild(mode)
            except Exception as exc:
                why = f"DBOS cannot start here: {exc}"
                for key, label, unit in figs:
                    b.skip(key, label, unit, why)
                continue
            children.append(child)
            notes = {key: f"journal_mode={child.journal_mode}" for key, _, _ in figs}
            scenarios.append(Scenario(figs, lambda c=child: c.run(sizes), notes))  # type: ignore[misc]
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


def best_dbos(b: Bench) -> Figure | None:
    ok = [f for k, f in b.figures.items() if k.startswith("1.dbos_") and f.ok]
    return max(ok, key=lambda f: f.median, default=None)


def evaluate(b: Bench) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    t = b.figures["1.tether_sessions"]
    best = best_dbos(b)
    row: dict[str, Any] = {
        "target": f"tether sessions >= {TARGET:g}x DBOS (best DBOS figure of the run)",
        "numerator": t.key,
        "denominator": best.key if best is not None else None,
        "required": TARGET,
    }
    if t.ok and best is not None:
        value = t.median / best.median
        row.update(value=value, verdict="PASS" if value >= TARGET else "MISS")
    else:
        row.update(value=None, verdict="n/a")
    out.append(row)
    for key in ("1.dbos_seq_delete", "1.dbos_seq_wal"):
        f = b.figures.get(key)
        if t.ok and f is not None and f.ok and (best is None or key != best.key):
            out.append(
                {
                    "target": "(information) tether sessions vs DBOS sequential, as the peer bench",
                    "numerator": t.key,
                    "denominator": key,
                    "required": None,
                    "value": t.median / f.median,
                    "verdict": "-",
                }
            )
    return out


def table(b: Bench, targets: list[dict[str, Any]]) -> str:
    lines = [
        "| # | figure | min | **median** | max | unit | note |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for f in b.figures.values():
        if not f.ok:
            what = "skipped" if f.skipped else "FAILED"
            lines.append(f"| {f.key} | {f.label} | | **{what}** | | {f.unit} | {f.error} |")
            continue
        lo, mid, hi = fmt(min(f.rates)), fmt(f.median), fmt(max(f.rates))
        lines.append(f"| {f.key} | {f.label} | {lo} | **{mid}** | {hi} | {f.unit} | {f.note} |")
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
    lines += [
        "",
        "| target | measured (medians) | required | verdict |",
        "|---|---|---:|---|",
    ]
    for t in targets:
        if t["value"] is None:
            measured = "n/a"
        else:
            num, den = b.figures[t["numerator"]], b.figures[t["denominator"]]
            measured = f"{t['value']:.1f}x ({fmt(num.median)} / {fmt(den.median)} {den.key})"
        need = f"{t['required']:g}x" if t["required"] is not None else ""
        lines.append(f"| {t['target']} | {measured} | {need} | **{t['verdict']}** |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="tether effects-ledger benchmark, beside DBOS, in one run."
    )
    p.add_argument("--quick", action="store_true", help="small sizes, 1 run: checks that it runs")
    p.add_argument("--json", metavar="PATH", help="also write the raw per-run samples to PATH")
    p.add_argument("--runs", type=int, help="runs per figure (default: 5, or 1 with --quick)")
    p.add_argument("--dbos-child", metavar="MODE", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.dbos_child:
        dbos_child(args.dbos_child)
        return 0
    if args.runs is not None and args.runs < 1:
        p.error("--runs must be at least 1")
    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = replace(sizes, runs=args.runs)
    try:
        return _run(sizes, args.quick, args.json)
    finally:
        with contextlib.suppress(OSError):  # not empty: another benchmark is using it
            DATA_DIR.rmdir()


def _run(sizes: Sizes, quick: bool, json_path: str | None) -> int:
    packages = ("tether", "aiosqlite", "msgspec", "anyio", "dbos", "SQLAlchemy")
    meta = run_meta(quick, sizes.runs, *packages)
    print(
        f"tether effects benchmark, {meta['mode']} mode: median of {sizes.runs} run(s) after 1 "
        f"warm-up. Python {meta['python']}, SQLite {meta['sqlite']}, {meta['cpus']} CPUs, "
        f"dbos {meta['dbos']}, {meta['platform']}",
        flush=True,
    )
    t0 = time.perf_counter()
    b = run_all(sizes)
    targets = evaluate(b)
    print()
    print(table(b, targets))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    extra = {"sizes": asdict(sizes), "effects_per_step": EFFECTS_PER_STEP}
    return finish(b, targets, meta, extra, json_path)


if __name__ == "__main__":
    sys.exit(main())
