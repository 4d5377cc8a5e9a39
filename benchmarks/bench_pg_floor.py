"""What bounds the 3-effect step on PostgreSQL: the same SQL with the least Python (issue #17).

    python benchmarks/bench_pg_floor.py                 # median of 5 runs (+1 warm-up)
    python benchmarks/bench_pg_floor.py --quick         # smoke mode: small sizes, 1 run
    python benchmarks/bench_pg_floor.py --runs 3 --pg URL --json out.json

One tether run of ``bench_pg.py``'s 3-effect step (100 sessions) is recorded first: every
write transaction of the store, each statement with its parameters, in order. Then, in
interleaved rounds on the same server (``benchmarks/run.py``'s method), beside DBOS's best
variant and tether itself:

* ``pg.floor_sql``: those transactions replayed by a loop of raw psycopg on one connection,
  in pipeline mode as the store sends them (a Sync after each statement whose rows the store
  reads), each a transaction of its own: the same commits, the same statements, no runtime,
  no store. What one writer connection can do with this SQL on this server. The note gives
  the commit latency of a one-row transaction (median, p90) measured beside it.
* ``pg.floor_sql_2conn``: two connections replaying all of them at once, each into a store of
  its own (twice the steps): what the server does with this SQL from two writers committing
  at once (PostgreSQL flushes the WAL of concurrent commits together). An upper bound for
  the store with two writers (``writers=2``), which must also keep each actor's
  writes on one of them, in order (``tether/runtime/lanes.py``), and which split the steps
  into smaller batches.

Each figure is in steps/s: the recorded run's steps over the replay's time. Targets, on
medians (information: what bounds #17's 20x): tether / ``floor_sql`` (what the runtime and the
store's Python cost), ``floor_sql`` / best DBOS (if under 20, this SQL on one writer cannot
reach 20x), ``floor_sql_2conn`` / best DBOS.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_effects
import bench_pg
import run
from children import PipeChild
from run import Bench, Scenario, finish, run_meta, target_rows

from tether.store.postgres import PostgresStore
from tether.store.postgres import writer as pg_writer
from tether.store.postgres.dsn import split_schema

# One recorded transaction: its statements, each (how, sql, params): "one" an execute,
# "rows" an execute whose rows the store read (a Sync in pipeline mode), "many" executemany.
Transaction = list[tuple[str, str, Any]]


@dataclass(frozen=True)
class Sizes:
    runs: int
    sessions: int
    steps: int
    dbos_seq: int
    dbos_concurrent: int


FULL = Sizes(runs=5, sessions=100, steps=2_000, dbos_seq=300, dbos_concurrent=300)
QUICK = Sizes(runs=1, sessions=100, steps=300, dbos_seq=30, dbos_concurrent=100)


class _Recording:
    """A cursor that logs what the store runs through it (``record``)."""

    def __init__(self, cur: Any, log: Transaction) -> None:
        self._cur, self._log = cur, log

    def execute(self, sql: Any, params: Any = None, **kw: Any) -> Any:
        self._log.append(("one", str(sql), params))
        return self._cur.execute(sql, params, **kw)

    def executemany(self, sql: Any, rows: Any, **kw: Any) -> Any:
        rows = list(rows)
        self._log.append(("many", str(sql), rows))
        return self._cur.executemany(sql, rows, **kw)

    def fetchall(self) -> Any:
        _, sql, params = self._log[-1]
        self._log[-1] = ("rows", sql, params)
        return self._cur.fetchall()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


def record(server: str, sizes: Sizes) -> tuple[list[Transaction], int]:
    """One tether run of the 3-effect step; every write transaction of its store, and the
    steps it made."""
    recorded: list[Transaction] = []
    attempt = pg_writer.Writer._attempt

    def recording(self: Any, conn: Any, job: Any) -> Any:
        log: Transaction = []
        recorded.append(log)
        fn = job.fn
        return attempt(self, conn, dataclasses.replace(job, fn=lambda c: fn(_Recording(c, log))))

    pg_writer.Writer._attempt = recording  # type: ignore[method-assign]
    try:
        with bench_pg.database(server, "record") as url:
            sample = asyncio.run(bench_effects.tether_sessions(sizes.sessions, sizes.steps, url))
    finally:
        pg_writer.Writer._attempt = attempt  # type: ignore[method-assign]
    steps, _ = sample["1.tether_sessions"]
    return recorded, steps


async def _made(url: str) -> None:
    store = PostgresStore(url)
    await store.open()  # the schema, as the store makes it
    await store.close()


def _connect(url: str) -> psycopg.Connection[Any]:
    dsn, schema = split_schema(url, None)
    conn = psycopg.connect(dsn, autocommit=True)
    if schema:
        conn.execute(
            psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(schema))
        )
    return conn


def _replay(conn: psycopg.Connection[Any], transactions: list[Transaction]) -> None:
    """Each transaction as the store sends it: pipeline mode, the batch id first, a Sync where
    the store reads rows, the rest and the commit in one go."""
    for statements in transactions:
        batch_id = uuid.uuid4()
        with conn.pipeline(), conn.transaction(), conn.cursor() as cur:
            cur.execute("INSERT INTO batches (batch_id) VALUES (%s)", (batch_id,))
            for how, sql, params in statements:
                if how == "many":
                    cur.executemany(sql, params)
                elif how == "rows":
                    with conn.pipeline():
                        cur.execute(sql, params)
                    cur.fetchall()
                else:
                    cur.execute(sql, params)
            cur.execute("UPDATE batches SET result = %s WHERE batch_id = %s", (b"\x80", batch_id))


def replayed(server: str, recorded: list[Transaction], writers: int) -> float:
    """Seconds for ``writers`` connections, each on a new store of its own, to replay all of
    ``recorded`` at once (no row of one is a row of another: nothing waits on a lock)."""
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(bench_pg.database(server, "floor")) for _ in range(writers)]
        conns = []
        for url in urls:
            asyncio.run(_made(url))
            conns.append(stack.enter_context(_connect(url)))
        threads = [threading.Thread(target=_replay, args=(c, recorded)) for c in conns]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0


def commit_latency(server: str, n: int = 200) -> tuple[float, float]:
    """Median and p90 milliseconds of a one-row transaction's commit on ``server``."""
    with bench_pg.database(server, "commit") as url, _connect(url) as conn:
        conn.execute("CREATE TABLE t (x int)")
        took = []
        for _ in range(n):
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute("INSERT INTO t VALUES (1)")
            took.append(1000 * (time.perf_counter() - t0))
    took.sort()
    return statistics.median(took), took[int(0.9 * len(took))]


def run_all(server: str, sizes: Sizes) -> Bench:
    print("recording one tether run...", flush=True)
    recorded, steps = record(server, sizes)
    latencies: list[tuple[float, float]] = []
    b = Bench(sizes)  # type: ignore[arg-type]  # Bench only reads .runs
    children: list[PipeChild] = []
    dbs: list[str] = []

    def floor(connections: int, key: str) -> run.Sample:
        if connections == 1:
            latencies.append(commit_latency(server))
        return {key: (steps * connections, replayed(server, recorded, connections))}

    label = f"{len(recorded)} transactions of a {steps:,}-step run"
    scenarios = [
        Scenario(
            [("pg.tether_sessions", "tether, 100 sessions, 3 effects + 1 event per step", "steps/s")],
            lambda: bench_pg.tether_sessions(server, bench_pg.Sizes(
                runs=sizes.runs, sessions=sizes.sessions, steps=sizes.steps, dbos_seq=0,
                dbos_concurrent=0, actors=0, messages=0)),
        ),
        Scenario(
            [("pg.floor_sql", "the same SQL, raw psycopg, one connection", "steps/s")],
            lambda: floor(1, "pg.floor_sql"),
            {"pg.floor_sql": label},
        ),
        Scenario(
            [("pg.floor_sql_2conn", "the same SQL, raw psycopg, two connections", "steps/s")],
            lambda: floor(2, "pg.floor_sql_2conn"),
            {"pg.floor_sql_2conn": label + ", twice: each connection into a store of its own"},
        ),
    ]  # fmt: skip
    dbos_sizes = bench_pg.Sizes(
        runs=sizes.runs, sessions=sizes.sessions, steps=sizes.steps, dbos_seq=sizes.dbos_seq,
        dbos_concurrent=sizes.dbos_concurrent, actors=0, messages=0,
    )  # fmt: skip
    try:
        scenarios += bench_pg.dbos_scenarios(b, server, dbos_sizes, children, dbs)
        b.measure(*scenarios)
    finally:
        for child in children:
            child.close()
        for url in dbs:
            bench_pg.drop_database(server, url)
    fig = b.figures["pg.floor_sql"]
    if fig.ok and latencies:
        med = statistics.median(m for m, _ in latencies)
        p90 = statistics.median(p for _, p in latencies)
        fig.note += f"; a one-row commit here: median {med:.2f} ms, p90 {p90:.2f} ms"
    return b


def evaluate(b: Bench) -> list[dict[str, Any]]:
    best = bench_pg.best_dbos(b)
    best_key = best.key if best is not None else "pg.dbos_best"
    targets: list[tuple[str, str, str | None, float | None]] = [
        ("(information) tether / the same SQL on one connection", "pg.tether_sessions",
         "pg.floor_sql", None),
        (f"(information) the same SQL on one connection / DBOS ({best_key})", "pg.floor_sql",
         best_key, None),
        (f"(information) the same SQL on two connections / DBOS ({best_key})",
         "pg.floor_sql_2conn", best_key, None),
        (f"(information) tether / DBOS ({best_key})", "pg.tether_sessions", best_key, None),
    ]  # fmt: skip
    return run.evaluate(b, targets)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="the 3-effect step's SQL with the least Python")
    run.add_house_options(p)
    p.add_argument("--pg", metavar="URL", help="the PostgreSQL server (postgresql://...)")
    args = p.parse_args(argv)
    sizes = run.chosen_sizes(p, args, FULL, QUICK)
    server = bench_pg.server_url(args.pg)
    meta = run_meta(args.quick, sizes.runs, *bench_pg.PACKAGES)
    meta["server"] = bench_pg._server_version(server)
    print(f"the floor of the 3-effect step on {meta['server']}, {meta['mode']} mode", flush=True)
    t0 = time.perf_counter()
    with run.tidy_data_dir():
        b = run_all(server, sizes)
    targets = evaluate(b)
    print()
    print("\n".join([*run.figure_rows(b), "", *target_rows(b, targets)]))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return finish(b, targets, meta, {"sizes": dataclasses.asdict(sizes)}, args.json)


if __name__ == "__main__":
    sys.exit(main())
