"""tether on PostgreSQL (issue #17): the 3-effect step beside DBOS on the same server, and
durable messages/s with 1, 2 and 4 runtime processes sharing one store, in one run.

    python benchmarks/bench_pg.py                  # full run: median of 5 runs (+1 warm-up)
    python benchmarks/bench_pg.py --quick          # smoke mode for CI: small sizes, 1 run
    python benchmarks/bench_pg.py --pg URL         # the server (a postgresql:// URL)
    python benchmarks/bench_pg.py --json out.json  # also write the raw per-run samples

The server: ``--pg``, else ``$TETHER_TEST_PG_DSN``, else
``postgresql://postgres@127.0.0.1:5432/postgres``. Every store is a database this run creates
(``tether_bench_<random>``) and drops at the end; nothing else on the server is touched.

Figures (each a rate, count / seconds: the median of N runs, with min and max; the method of
``benchmarks/run.py``: one warm-up run, then interleaved rounds, every run checks its result):

1. the 3-effect step, 100 sessions (``bench_effects.py``'s scenario, on PostgreSQL):

   * ``pg.tether_sessions``: 100 ``Session`` actors on a new database per run, each step
     three ``self.effect`` calls of trivial tools and one event; one sender per session, timed
     until every ask returned; each session's state and the 3 receipts per step checked.
   * ``pg.dbos_{seq,async100,threads100}``: DBOS Transact's 3-step workflow with its native
     PostgreSQL system database on the same server (``bench_effects.dbos_child``, in a child
     process): sequential, 100 concurrent async callers, 100 threads.

2. durable messages/s with ``P`` = 1, 2, 4 runtime processes sharing one store
   (``pg.msgs_{P}proc``): each process (a child, its runtime open across rounds) serves its
   own actors and tells them its share of the messages; each message persists one event and
   the last ask of each actor checks its count. All processes start at one instant; the rate
   is all messages over the time from that instant until the last process is done. The note
   says where the CPU went: CPU seconds per 1,000 messages in the runtime processes and in
   the PostgreSQL server's processes (read from ``/proc``: the server must run on this
   machine for that figure; it shares its cores with the runtimes).

Targets (on medians, PASS or MISS, never adjusted): tether >= 20x the best DBOS variant;
2 processes >= 1.3x one. Nothing here asserts wall-clock time: the exit status is 1 only if a
scenario computes a wrong result, raises or hangs. Without DBOS (``pip install -e
'.[bench]'``) its figures show as skipped and its target as n/a.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import sys
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec

import tether

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_effects
import run
from children import PipeChild, serve_async
from run import Bench, Figure, Sample, Scenario, finish, run_meta, target_rows

DEFAULT_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
ASK_TIMEOUT = 120.0
TARGET_DBOS = 20.0
TARGET_TWO = 1.3
PROCESSES = (1, 2, 4)


@dataclass(frozen=True)
class Sizes:
    runs: int
    sessions: int
    steps: int  # 3-effect steps per run, over all sessions
    dbos_seq: int
    dbos_concurrent: int
    actors: int  # actors of each runtime process, in the processes figures
    messages: int  # messages per run, over all processes


FULL = Sizes(
    runs=5, sessions=100, steps=2_000, dbos_seq=300, dbos_concurrent=300, actors=50,
    messages=8_000,
)  # fmt: skip
QUICK = Sizes(
    runs=1, sessions=100, steps=300, dbos_seq=30, dbos_concurrent=100, actors=10, messages=400
)  # fmt: skip


# ============================================================================ databases


def server_url(arg: str | None) -> str:
    return arg or os.environ.get("TETHER_TEST_PG_DSN") or DEFAULT_SERVER


def create_database(server: str, what: str) -> str:
    """A new database on ``server``, its URL."""
    import psycopg

    name = f"tether_bench_{what}_{secrets.token_hex(3)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return urllib.parse.urlsplit(server)._replace(path=f"/{name}").geturl()


def drop_database(server: str, url: str) -> None:
    import psycopg

    name = urllib.parse.urlsplit(url).path.lstrip("/")
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def database(server: str, what: str) -> Iterator[str]:
    url = create_database(server, what)
    try:
        yield url
    finally:
        drop_database(server, url)


# ============================================================================ 1. the step


SESSIONS_CPU: list[tuple[float, float | None, float, int]] = []  # (tether, pg, wall, steps)


def tether_sessions(server: str, sizes: Sizes, writers: int | None = None) -> Sample:
    """``writers``: the store's writer connections (None: its default), as the URL's
    ``?writers=N``; a figure of its own, ``pg.tether_sessions_w{N}``, without the CPU note."""
    with database(server, "steps") as url:
        if writers is not None:
            url += ("&" if "?" in url else "?") + f"writers={writers}"
        cpu0, pg0 = _cpu_seconds(), postgres_cpu_seconds()
        sample = asyncio.run(bench_effects.tether_sessions(sizes.sessions, sizes.steps, url))
        cpu1, pg1 = _cpu_seconds(), postgres_cpu_seconds()
    steps, seconds = sample["1.tether_sessions"]
    if writers is not None:
        return {f"pg.tether_sessions_w{writers}": (steps, seconds)}
    pg = None if pg0 is None or pg1 is None else pg1 - pg0
    # the whole run's CPU (spawning the sessions too) against the timed steps' wall time:
    # an upper bound on the CPU per step, enough to tell CPU-bound from waiting
    SESSIONS_CPU.append((cpu1 - cpu0, pg, seconds, steps))
    return {"pg.tether_sessions": (steps, seconds)}


def sessions_cpu_note() -> str:
    timed = SESSIONS_CPU[1:] or SESSIONS_CPU
    steps = sum(n for *_, n in timed)
    tether_ms = 1000 * sum(t for t, *_ in timed) / steps
    note = f"CPU per step, at most: runtime {tether_ms:.2f} ms"
    pgs = [p for _, p, _, _ in timed if p is not None]
    if len(pgs) == len(timed):
        note += f", PostgreSQL {1000 * sum(pgs) / steps:.2f} ms"
    wall_ms = 1000 * sum(w for _, _, w, _ in timed) / steps
    return note + f"; wall {wall_ms:.2f} ms per step"


def dbos_scenarios(
    b: Bench, server: str, sizes: Sizes, children: list[PipeChild], dbs: list[str]
) -> list[Scenario]:
    figs = [
        ("pg.dbos_seq", "DBOS 3-step workflow, sequential, PostgreSQL", "wf/s"),
        ("pg.dbos_async100", "DBOS async workflow, 100 concurrent (asyncio.gather)", "wf/s"),
        ("pg.dbos_threads100", "DBOS sync workflow, 100 threads", "wf/s"),
    ]
    try:
        import dbos  # noqa: F401
    except ImportError:
        why = "dbos is not installed (pip install -e '.[bench]')"
    else:
        url = create_database(server, "dbos")
        dbs.append(url)
        try:
            child = bench_effects.DbosChild("pg", url)
        except Exception as exc:
            why = f"DBOS cannot start here: {exc}"
        else:
            children.append(child)

            def one_round() -> Sample:
                got = child.run(_dbos_sizes(sizes))
                return {f"pg.dbos_{k.split('_')[1]}": v for k, v in got.items()}

            notes = {k: "DBOS's own PostgreSQL system database, same server" for k, _, _ in figs}
            return [Scenario(figs, one_round, notes)]
    for key, label, unit in figs:
        b.skip(key, label, unit, why)
    return []


def _dbos_sizes(sizes: Sizes) -> bench_effects.Sizes:
    return bench_effects.Sizes(
        runs=sizes.runs,
        sessions=sizes.sessions,
        steps=sizes.steps,
        latency_steps=0,
        dbos_seq=sizes.dbos_seq,
        dbos_concurrent=sizes.dbos_concurrent,
    )


# ============================================================================ 2. processes


class Bump(tether.Message):
    n: int


class GetCount(tether.Message):
    pass


class Bumped(tether.Event):
    n: int


class Count(msgspec.Struct):
    count: int = 0


class Counter(tether.Actor[Count]):
    """One event per message: the durable message of ``run.py``'s durable figure."""

    initial_state = Count()

    def apply(self, state: Count, event: Bumped) -> Count:
        return Count(state.count + 1)

    async def handle(self, msg: Bump | GetCount) -> int | None:
        if type(msg) is Bump:
            self.persist(Bumped(n=msg.n))
            return None
        return self.state.count


def _cpu_seconds() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


async def worker(url: str, index: int, actors: int) -> None:
    """A runtime process of the processes figures (``--worker``), driven over a pipe."""
    async with tether.Runtime(url) as rt:
        refs: list[tether.ActorRef] = []
        sent = [0] * actors

        async def ready() -> dict[str, Any]:
            for j in range(actors):
                ref = await rt.spawn(Counter, f"w{index}-{j:03d}")
                await ref.ask(GetCount(), timeout=ASK_TIMEOUT)  # active here
                refs.append(ref)
            return {"ready": True}

        async def one_round(cmd: dict[str, Any]) -> dict[str, Any]:
            per = int(cmd["per_actor"])
            await anyio.sleep(max(0.0, float(cmd["start_at"]) - time.time()))
            cpu0, t0 = _cpu_seconds(), time.time()

            async def sender(j: int) -> None:
                tell = refs[j].tell
                for n in range(per):
                    await tell(Bump(n=n))
                sent[j] += per
                got = await refs[j].ask(GetCount(), timeout=ASK_TIMEOUT)
                if got != sent[j]:
                    raise AssertionError(f"{refs[j].id}: count {got}, sent {sent[j]}")

            async with anyio.create_task_group() as tg:
                for j in range(actors):
                    tg.start_soon(sender, j)
            return {"count": per * actors, "end": time.time(), "start": t0,
                    "cpu": _cpu_seconds() - cpu0}  # fmt: skip

        await serve_async(ready, one_round)


class WorkerChild(PipeChild):
    def __init__(self, url: str, index: int, actors: int) -> None:
        argv = [__file__, "--worker", url, str(index), str(actors)]
        super().__init__(f"runtime process {index}", argv, wait=False)


def postgres_cpu_seconds() -> float | None:
    """CPU seconds used so far by the PostgreSQL servers on this machine: every process named
    ``postgres`` (the postmaster and its live backends), plus what the postmasters' exited
    children used (``cutime``/``cstime``: backends come and go with connections). Every
    server of the machine counts, other users' work on it too; None where /proc cannot
    tell."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    stats: dict[str, tuple[str, list[str]]] = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        stats[pid] = (name, stat.rsplit(")", 1)[1].split())
    total = 0
    for name, fields in stats.values():
        if name != "postgres" and not name.startswith("postgres:"):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
        parent = stats.get(fields[1])
        if parent is None or not parent[0].startswith("postgres"):  # a postmaster
            total += int(fields[13]) + int(fields[14])  # its children's, once they exited
    return total / tick


class Processes:
    """The ``P``-process figure: ``P`` worker children on one new database, launched once,
    each round started at one instant."""

    def __init__(self, server: str, procs: int, sizes: Sizes, dbs: list[str]) -> None:
        self.key = f"pg.msgs_{procs}proc"
        self.procs, self.sizes = procs, sizes
        self.url = create_database(server, f"p{procs}")
        dbs.append(self.url)
        self.children = [WorkerChild(self.url, i, sizes.actors) for i in range(procs)]
        for child in self.children:
            child.wait_ready()
        self.cpu: list[tuple[float, float | None, int]] = []  # (tether, postgres, messages)

    def run_once(self) -> Sample:
        per_actor = max(1, self.sizes.messages // (self.procs * self.sizes.actors))
        start_at = time.time() + 0.5
        pg0 = postgres_cpu_seconds()
        for child in self.children:  # all sent before any answer is read: they run at once
            assert child.proc.stdin is not None
            cmd = {"start_at": start_at, "per_actor": per_actor}
            child.proc.stdin.write(msgspec.json.encode(cmd).decode() + "\n")
            child.proc.stdin.flush()
        answers = [child._read(900.0) for child in self.children]
        pg1 = postgres_cpu_seconds()
        count = sum(int(a["count"]) for a in answers)
        seconds = max(float(a["end"]) for a in answers) - start_at
        pg = None if pg0 is None or pg1 is None else pg1 - pg0
        self.cpu.append((sum(float(a["cpu"]) for a in answers), pg, count))
        return {self.key: (count, seconds)}

    def close(self) -> None:
        for child in self.children:
            child.close()

    def cpu_note(self) -> str:
        timed = self.cpu[1:] or self.cpu  # not the warm-up, when there are others
        msgs = sum(n for _, _, n in timed) / 1000
        tether_s = sum(t for t, _, _ in timed) / msgs
        pgs = [p for _, p, _ in timed if p is not None]
        where = f"CPU per 1k msgs: runtimes {tether_s:.2f} s"
        if len(pgs) == len(timed):
            where += f", PostgreSQL {sum(pgs) / msgs:.2f} s"
        return where


# ============================================================================ the run


def run_all(server: str, sizes: Sizes) -> Bench:
    b = Bench(sizes)  # type: ignore[arg-type]  # Bench only reads .runs
    children: list[PipeChild] = []
    dbs: list[str] = []
    procs: list[Processes] = []
    try:
        scenarios = [
            Scenario(
                [("pg.tether_sessions", f"tether, {sizes.sessions} sessions, 3 effects + 1 "
                  "event per step, PostgreSQL", "steps/s")],
                lambda: tether_sessions(server, sizes),
                {"pg.tether_sessions": f"{sizes.steps:,} steps; a new database per run"},
            ),
            Scenario(
                [("pg.tether_sessions_w2", "the same, the store with two writer connections "
                  "(writers=2)", "steps/s")],
                lambda: tether_sessions(server, sizes, writers=2),
                {"pg.tether_sessions_w2": "A/B of the store's writers (1 by default)"},
            ),
        ]  # fmt: skip
        scenarios += dbos_scenarios(b, server, sizes, children, dbs)
        for n in PROCESSES:
            p = Processes(server, n, sizes, dbs)
            procs.append(p)
            label = f"durable msg/s, {n} runtime process(es) sharing one store"
            note = f"{sizes.actors} actors per process, {sizes.messages:,} messages per run"
            scenarios.append(Scenario([(p.key, label, "msg/s")], p.run_once, {p.key: note}))
        b.measure(*scenarios)
        sessions = b.figures["pg.tether_sessions"]
        if sessions.ok and SESSIONS_CPU:
            sessions.note += "; " + sessions_cpu_note()
        for p in procs:
            fig = b.figures[p.key]
            if fig.ok:
                fig.note += "; " + p.cpu_note()
                b.extra[f"{p.key}_cpu"] = p.cpu
    finally:
        for p in procs:
            p.close()
        for child in children:
            child.close()
        for url in dbs:
            drop_database(server, url)
    return b


def best_dbos(b: Bench) -> Figure | None:
    ok = [f for k, f in b.figures.items() if k.startswith("pg.dbos_") and f.ok]
    return max(ok, key=lambda f: f.median, default=None)


def evaluate(b: Bench) -> list[dict[str, Any]]:
    best = best_dbos(b)
    best_key = best.key if best is not None else "pg.dbos_best"
    targets: list[tuple[str, str, str | None, float | None]] = [
        (f"#17 tether >= {TARGET_DBOS:g}x DBOS on PostgreSQL (best of the run: {best_key})",
         "pg.tether_sessions", best_key, TARGET_DBOS),
        (f"#17 2 runtime processes >= {TARGET_TWO:g}x one", "pg.msgs_2proc", "pg.msgs_1proc",
         TARGET_TWO),
        ("(information) 4 runtime processes vs one", "pg.msgs_4proc", "pg.msgs_1proc", None),
        ("(information) two writer connections vs DBOS", "pg.tether_sessions_w2", best_key, None),
        ("(information) 2 writers vs 1", "pg.tether_sessions_w2", "pg.tether_sessions", None),
    ]  # fmt: skip
    return run.evaluate(b, targets)


PACKAGES = ("tether", "psycopg", "msgspec", "anyio", "dbos", "SQLAlchemy")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="tether on PostgreSQL, beside DBOS; processes.")
    run.add_house_options(p)
    p.add_argument("--pg", metavar="URL", help="the PostgreSQL server (postgresql://...)")
    p.add_argument("--worker", nargs=3, metavar=("URL", "INDEX", "ACTORS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        url, index, actors = args.worker
        asyncio.run(worker(url, int(index), int(actors)))
        return 0
    sizes = run.chosen_sizes(p, args, FULL, QUICK)
    server = server_url(args.pg)
    meta = run_meta(args.quick, sizes.runs, *PACKAGES)
    meta["server"] = _server_version(server)
    print(
        f"tether on PostgreSQL, {meta['mode']} mode: median of {sizes.runs} run(s) after 1 "
        f"warm-up. Python {meta['python']}, {meta['server']}, {meta['cpus']} CPUs, "
        f"dbos {meta['dbos']}, psycopg {meta['psycopg']}, {meta['platform']}",
        flush=True,
    )
    t0 = time.perf_counter()
    with run.tidy_data_dir():
        b = run_all(server, sizes)
    targets = evaluate(b)
    print()
    print("\n".join([*run.figure_rows(b), "", *target_rows(b, targets)]))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return finish(b, targets, meta, {"sizes": asdict(sizes)}, args.json)


def _server_version(server: str) -> str:
    import psycopg

    with psycopg.connect(server) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return f"PostgreSQL {row[0] if row else '?'}"


if __name__ == "__main__":
    sys.exit(main())
