"""Which PostgreSQL driver for tether's store: psycopg 3 against asyncpg, on tether's real batch.

    python benchmarks/bench_pg_driver.py                 # full run: median of 5 runs
    python benchmarks/bench_pg_driver.py --quick         # smoke mode: small sizes, 1 run
    python benchmarks/bench_pg_driver.py --runs 3 --rounds 100   # what docs/operations.md cites
    python benchmarks/bench_pg_driver.py --dsn postgresql://postgres@127.0.0.1/postgres

The batch is a group commit of N steps, as ``PostgresStore.apply`` writes it: the batch id
row, the actors' rows read ``FOR SHARE`` (the fence check), each step's outbox message
(``unnest`` insert), its journal row (``unnest`` insert), the actors' ``head_seq``, the acks
(one ``DELETE … = ANY``), the batch's result: one transaction. Both drivers run the very same
statements, in a schema of tether's own (made by ``PostgresStore.open``, dropped at the end):

* ``psycopg``: psycopg 3's synchronous API on a thread of its own, one thread hop per batch
  (what ``PostgresStore`` does);
* ``asyncpg``: asyncpg in the event loop, one await per statement;
* ``store``: ``PostgresStore.apply`` itself (the psycopg path plus building the batch, the
  result and its encoding), for scale.

Each figure: step writes per second (N steps per batch, batches one after the other, each
waiting for its commit, as the group committer does), on the same server in the same run. The
server shares this machine's cores: read ratios, not absolutes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
import psycopg

from tether.store.postgres import PostgresStore
from tether.store.postgres.dsn import split_schema, with_schema
from tether.store.records import (
    ActorRecord,
    Batch,
    JournalRow,
    LeaseAcquire,
    NewMessage,
    Spawn,
    StepCommit,
)

NOW = 1_000.0

FENCE = "SELECT actor_id, fence FROM actors WHERE actor_id = ANY($1) ORDER BY actor_id FOR SHARE"
OUTBOX = (
    "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, wants_reply, created_at, "
    "attempts) SELECT v.m, v.a, 'Ping', v.p, $4, FALSE, $5, 0 "
    "FROM unnest($1::text[], $2::text[], $3::bytea[]) AS v(m, a, p)"
)
JOURNAL = (
    "INSERT INTO journal (actor_id, seq, payload) "
    "SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])"
)
HEADS = (
    "UPDATE actors a SET head_seq = GREATEST(a.head_seq, v.seq) "
    "FROM unnest($1::text[], $2::bigint[]) AS v(actor_id, seq) WHERE a.actor_id = v.actor_id"
)
ACKS = "DELETE FROM mailbox WHERE msg_id = ANY($1)"
BATCH = "INSERT INTO batches (batch_id) VALUES ($1)"
RESULT = "UPDATE batches SET result = $1 WHERE batch_id = $2"


def named(sql: str) -> str:
    """The statement with psycopg's placeholders (``$n`` -> ``%(pn)s``)."""
    for n in range(9, 0, -1):
        sql = sql.replace(f"${n}", f"%(p{n})s")
    return sql


def params(actors: list[str], round_: int) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements of one batch: every actor acks its message of round ``round_`` and
    sends one of the next round to the next actor."""
    n = len(actors)
    nxt = [actors[(i + 1) % n] for i in range(n)]
    batch_id = uuid.uuid4()
    return [
        (BATCH, (batch_id,)),
        (FENCE, (sorted(actors),)),
        (OUTBOX, ([f"r{round_ + 1}-{a}" for a in actors], nxt, [b"x" * 64] * n, NOW, NOW)),
        (JOURNAL, (actors, [round_ + 1] * n, [b"e" * 64] * n)),
        (HEADS, (actors, [round_ + 1] * n)),
        (ACKS, ([f"r{round_}-{a}" for a in actors],)),
        (RESULT, (b"\x80", batch_id)),
    ]


async def prepare(url: str, n: int, tag: str) -> list[str]:
    """Actors and their first round of mail, through the store itself."""
    store = PostgresStore(url)
    await store.open()
    try:
        actors = [f"{tag}-{i}" for i in range(n)]
        records = [
            ActorRecord(a, "bench:Actor", b"\x80", None, "active", None, 0, None, 0.0, NOW)
            for a in actors
        ]
        await store.apply(Batch(spawns=[Spawn(r) for r in records]))
        await store.register_runtime("bench", "bench", 1, NOW)
        await store.apply(Batch(acquires=[LeaseAcquire(a, "bench", 3600.0) for a in actors]))
        first = [NewMessage(f"r0-{a}", a, "Ping", b"x", NOW, NOW) for a in actors]
        await store.apply(Batch(messages=first))
    finally:
        await store.close()
    return actors


def psycopg_batch(conn: psycopg.Connection[Any], statements: list[tuple[str, Any]]) -> None:
    with conn.transaction(), conn.cursor() as cur:
        for sql, args in statements:
            cur.execute(named(sql), {f"p{i}": v for i, v in enumerate(args, 1)})
            if sql is FENCE:
                cur.fetchall()


def pipelined_batch(conn: psycopg.Connection[Any], statements: list[tuple[str, Any]]) -> None:
    """``psycopg_batch`` in pipeline mode: the statements after the fence check go in one
    round trip."""
    with conn.transaction(), conn.cursor() as cur:
        rest = iter(statements)
        for sql, args in rest:
            cur.execute(named(sql), {f"p{i}": v for i, v in enumerate(args, 1)})
            if sql is FENCE:
                cur.fetchall()
                break
        with conn.pipeline():
            for sql, args in rest:
                cur.execute(named(sql), {f"p{i}": v for i, v in enumerate(args, 1)})


async def run_psycopg(url: str, actors: list[str], rounds: int) -> float:
    return await _run_psycopg(url, actors, rounds, psycopg_batch)


async def run_pipelined(url: str, actors: list[str], rounds: int) -> float:
    return await _run_psycopg(url, actors, rounds, pipelined_batch)


async def _run_psycopg(
    url: str, actors: list[str], rounds: int, batch: Callable[..., None]
) -> float:
    dsn, schema = split_schema(url, None)
    conn = psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}")
    thread = ThreadPoolExecutor(max_workers=1)
    loop = asyncio.get_running_loop()
    try:
        started = time.perf_counter()
        for r in range(rounds):
            await loop.run_in_executor(thread, batch, conn, params(actors, r))
        return rounds * len(actors) / (time.perf_counter() - started)
    finally:
        thread.shutdown()
        conn.close()


async def run_asyncpg(url: str, actors: list[str], rounds: int) -> float:
    dsn, schema = split_schema(url, None)
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema or "public"})
    try:
        started = time.perf_counter()
        for r in range(rounds):
            async with conn.transaction():
                for sql, args in params(actors, r):
                    if sql is FENCE:
                        await conn.fetch(sql, *args)
                    else:
                        await conn.execute(sql, *args)
        return rounds * len(actors) / (time.perf_counter() - started)
    finally:
        await conn.close()


async def run_store(url: str, actors: list[str], rounds: int) -> float:
    store = PostgresStore(url)
    await store.open()
    try:
        fences = {a.actor_id: a.fence for a in await store.list_actors()}
        n = len(actors)
        started = time.perf_counter()
        for r in range(rounds):
            steps = [
                StepCommit(
                    actor_id=a,
                    fence=fences[a],
                    msg_id=f"r{r}-{a}",
                    events=[JournalRow(r + 1, b"e" * 64)],
                    outbox=[
                        NewMessage(
                            f"r{r + 1}-{a}", actors[(i + 1) % n], "Ping", b"x" * 64, NOW, NOW
                        )
                    ],
                )
                for i, a in enumerate(actors)
            ]
            result = await store.apply(Batch(steps=steps))
            assert not result.stale
        return rounds * n / (time.perf_counter() - started)
    finally:
        await store.close()


Runner = Callable[[str, list[str], int], Awaitable[float]]
DRIVERS: dict[str, Runner] = {
    "psycopg": run_psycopg,
    "pipeline": run_pipelined,
    "asyncpg": run_asyncpg,
    "store": run_store,
}


async def measure(
    dsn: str, sizes: list[int], rounds: int, runs: int
) -> dict[tuple[str, int], float]:
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    url = with_schema(dsn, schema)
    figures: dict[tuple[str, int], list[float]] = {}
    try:
        for n in sizes:
            for run in range(runs):
                for name, runner in DRIVERS.items():  # side by side, in turn
                    actors = await prepare(url, n, f"{name}{n}r{run}")
                    figures.setdefault((name, n), []).append(await runner(url, actors, rounds))
    finally:
        plain, _ = split_schema(dsn, None)
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return {key: statistics.median(values) for key, values in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--quick", action="store_true", help="smoke mode: small sizes, 1 run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=200, help="batches per figure")
    args = parser.parse_args()
    sizes, rounds, runs = ([1, 10], 5, 1) if args.quick else ([1, 10, 100], args.rounds, args.runs)
    figures = asyncio.run(measure(args.dsn, sizes, rounds, runs))
    print(f"step writes/s, group commits of N steps, {rounds} batches, median of {runs} run(s)")
    names = list(DRIVERS)
    print(f"{'N':>5} " + " ".join(f"{d:>10}" for d in names) + "  asyncpg/psycopg  /pipeline")
    for n in sizes:
        f = {d: figures[(d, n)] for d in names}
        print(
            f"{n:>5} "
            + " ".join(f"{f[d]:>10,.0f}" for d in names)
            + f"  {f['asyncpg'] / f['psycopg']:>15.2f}  {f['asyncpg'] / f['pipeline']:>9.2f}"
        )


if __name__ == "__main__":
    main()
