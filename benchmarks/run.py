"""Benchmarks of tether's durable actor core, side by side with peers and raw limits.

One command runs everything in one process and prints a markdown table of figures and of
ratios against the targets::

    python benchmarks/run.py                  # full run: median of 5 runs (+1 warm-up) per figure
    python benchmarks/run.py --quick          # smoke mode for CI: small sizes, 1 run (+1 warm-up)
    python benchmarks/run.py --json out.json  # also write the raw per-run samples
    python benchmarks/run.py --profile        # instead: cProfile one run of each tether scenario

Figures (each a rate, count / seconds: the median of N runs, with min and max):

1. in-memory ``ask`` round trips: tether on ``Runtime(":memory:")`` (sequential asks to an
   active actor answering a query), a hand-written asyncio actor (``asyncio.Queue`` + task +
   future reply, as in ``anchors/peer-bench/bench_asyncio_actor.py``), Pykka ``ThreadingActor``.
2. durable throughput: 1,000 actors on a fresh SQLite file (``durability="full"``), each message
   persisting one event; beside it the raw limit: aiosqlite, WAL, ``synchronous=FULL``, 100 rows
   per commit as one ``executemany``.
3. recovery: restart on a file holding a 100,000-event journal of one actor, until its state is
   ready, vs a raw ``execute_fetchall`` + msgspec decode + the same fold.

Scratch databases go to ``benchmarks/_data/`` and are deleted after each run. Nothing here
asserts anything about wall-clock time: a run fails only if a scenario computes a wrong state,
raises, or hangs (asks time out after ``ASK_TIMEOUT``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import logging
import os
import platform
import pstats
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
import structlog

import tether
from tether.runtime.collector import governor

try:
    import pykka
except ImportError:  # pykka is in the optional "bench" extra
    pykka = None

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / "_data"

# The runtime's info lines (runtime_opened / runtime_closed) would drown the table.
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


# ----------------------------------------------------------------------------- sizes


@dataclass(frozen=True)
class Sizes:
    runs: int
    ask_tether: int  # sequential asks per run
    ask_asyncio: int
    ask_pykka: int
    durable_actors: int
    durable_per_actor: int  # messages told to each actor per run
    raw_rows: int  # rows written per run by the raw executemany limit
    recovery_events: int
    burst: int  # events persisted per message while building the recovery journal


FULL = Sizes(
    runs=5,
    ask_tether=30_000,
    ask_asyncio=50_000,
    ask_pykka=10_000,
    durable_actors=1_000,
    durable_per_actor=40,
    raw_rows=100_000,
    recovery_events=100_000,
    burst=1_000,
)
QUICK = Sizes(
    runs=1,
    ask_tether=1_000,
    ask_asyncio=5_000,
    ask_pykka=500,
    durable_actors=100,
    durable_per_actor=5,
    raw_rows=5_000,
    recovery_events=5_000,
    burst=500,
)

ASK_TIMEOUT = 60.0  # a timeout here means a hang, not a slow run


# ----------------------------------------------------------------------------- recording

Sample = dict[str, tuple[int, float]]  # figure key -> (count, seconds), from one run


@dataclass
class Figure:
    key: str
    label: str
    unit: str
    samples: list[tuple[int, float]] = field(default_factory=list)
    note: str = ""
    error: str | None = None
    skipped: bool = False

    @property
    def rates(self) -> list[float]:
        return [n / s for n, s in self.samples]

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.samples)


@dataclass
class Scenario:
    """``fn`` runs the scenario once and returns one sample of each of ``figures``
    (key, label, unit)."""

    figures: list[tuple[str, str, str]]
    fn: Callable[[], Sample]
    notes: dict[str, str] = field(default_factory=dict)


class Bench:
    def __init__(self, sizes: Sizes) -> None:
        self.sizes = sizes
        self.figures: dict[str, Figure] = {}
        self.extra: dict[str, Any] = {}

    def measure(self, *scenarios: Scenario) -> None:
        """Run each scenario once to warm up, then ``runs`` rounds in which every scenario runs
        once, interleaved, so that the figures compared with each other see the same machine
        (this VM is shared, and its speed drifts). Each run of a scenario returns one sample of
        each of its figures. An exception fails that scenario's figures only."""
        live: list[tuple[Scenario, list[Figure]]] = []
        for sc in scenarios:
            figs = [
                Figure(k, label, unit, note=sc.notes.get(k, "")) for k, label, unit in sc.figures
            ]
            for f in figs:
                self.figures[f.key] = f
            live.append((sc, figs))
        for round_ in range(self.sizes.runs + 1):  # round 0 is the warm-up
            for item in list(live):
                sc, figs = item
                gc.collect()
                try:
                    sample = sc.fn()
                except Exception as exc:
                    for f in figs:
                        f.samples.clear()
                        f.error = f"{type(exc).__name__}: {exc}"
                    print(f"{figs[0].key:<26} FAILED: {figs[0].error}", flush=True)
                    traceback.print_exc()
                    live.remove(item)
                    continue
                if round_ > 0:
                    for f in figs:
                        f.samples.append(sample[f.key])
        for _, figs in live:
            for f in figs:
                print(
                    f"{f.key:<26} {fmt(min(f.rates)):>9} {fmt(f.median):>9} "
                    f"{fmt(max(f.rates)):>9}  {f.unit:<10} n={f.samples[-1][0]} runs={len(f.samples)}",
                    flush=True,
                )

    def skip(self, key: str, label: str, unit: str, why: str) -> None:
        self.figures[key] = Figure(key, label, unit, error=why, skipped=True)
        print(f"{key:<26} skipped: {why}", flush=True)


def fmt(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.1f}"


def scratch_dir(prefix: str) -> Path:
    DATA_DIR.mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix + "-", dir=DATA_DIR))


def rm_scratch(p: Path) -> None:
    shutil.rmtree(p, ignore_errors=True)


# ============================================================================ 1. in-memory ask


class GetCount(tether.Message):
    pass


class CounterState(msgspec.Struct):
    count: int = 0


class Counter(tether.Actor[CounterState]):
    """Answers a query; persists nothing."""

    initial_state = CounterState()

    async def handle(self, msg: GetCount) -> int:
        return self.state.count


async def tether_ask(n: int) -> Sample:
    async with tether.Runtime(":memory:") as rt:
        ref = await rt.spawn(Counter, "counter")
        await ref.ask(GetCount(), timeout=ASK_TIMEOUT)  # the actor is active and recovered
        await collector_settled()
        ask = ref.ask
        q = GetCount()
        t0 = time.perf_counter()
        for _ in range(n):
            await ask(q, timeout=ASK_TIMEOUT)
        dt = time.perf_counter() - t0
    return {"1.tether_ask": (n, dt)}


_STOP = object()


class AsyncioActor:
    """The hand-written asyncio actor of anchors/peer-bench/bench_asyncio_actor.py."""

    __slots__ = ("inbox", "loop", "state", "task")

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[tuple[Any, asyncio.Future[Any] | None]] = asyncio.Queue()
        self.state = {"count": 0, "total": 0}
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.create_task(self._run())

    def handle(self, msg: int) -> int:
        st = self.state
        st["count"] += 1
        st["total"] += msg
        return st["count"]

    async def _run(self) -> None:
        get = self.inbox.get
        handle = self.handle
        while True:
            msg, fut = await get()
            if msg is _STOP:
                return
            try:
                r = handle(msg)
            except Exception as e:
                if fut is not None:
                    fut.set_exception(e)
                continue
            if fut is not None:
                fut.set_result(r)

    async def ask(self, msg: Any) -> Any:
        fut = self.loop.create_future()
        self.inbox.put_nowait((msg, fut))
        return await fut

    async def stop(self) -> None:
        self.inbox.put_nowait((_STOP, None))
        await self.task


async def asyncio_ask(n: int) -> Sample:
    a = AsyncioActor()
    ask = a.ask
    t0 = time.perf_counter()
    for i in range(n):
        await ask(i)
    dt = time.perf_counter() - t0
    await a.stop()
    assert a.state["count"] == n
    return {"1.asyncio_ask": (n, dt)}


if pykka is not None:

    class PykkaCounter(pykka.ThreadingActor):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def on_receive(self, message: Any) -> Any:
            self.count += 1
            return self.count


def pykka_ask(n: int) -> Sample:
    ref = PykkaCounter.start()
    try:
        ask = ref.ask
        t0 = time.perf_counter()
        for i in range(n):
            ask(i)
        dt = time.perf_counter() - t0
    finally:
        ref.stop()
    return {"1.pykka_ask": (n, dt)}


# ============================================================================ 2. durable throughput


class Deposit(tether.Message):
    amount: int


class GetBalance(tether.Message):
    pass


class Deposited(tether.Event):
    amount: int


class Balance(msgspec.Struct):
    balance: int = 0
    count: int = 0


class Account(tether.Actor[Balance]):
    """Every Deposit persists one event."""

    initial_state = Balance()

    def apply(self, state: Balance, event: Deposited) -> Balance:
        return Balance(state.balance + event.amount, state.count + 1)

    async def handle(self, msg: Deposit | GetBalance) -> tuple[int, int] | None:
        if type(msg) is Deposit:
            self.persist(Deposited(amount=msg.amount))
            return None
        return (self.state.balance, self.state.count)


async def tether_durable(n_actors: int, per_actor: int) -> Sample:
    """One sender task per actor tells ``per_actor`` deposits (each ``tell`` returns once the
    message is durably stored), then asks the balance; the ask is queued behind the deposits,
    so when every ask has returned, every deposit has been processed and committed."""
    d = scratch_dir("durable")
    try:
        async with tether.Runtime(d / "tether.db") as rt:
            refs = await activate_accounts(rt, [f"acct-{i:05d}" for i in range(n_actors)])
            before = _commit_stats(rt)
            dt, tell_only = await deposit_round(refs, per_actor)
            after = _commit_stats(rt)
    finally:
        rm_scratch(d)
    if before and after:
        COMMIT_STATS.append((after[0] - before[0], after[1] - before[1]))
    n = n_actors * per_actor
    return {"2.tether_durable": (n, dt), "2.tether_tell_only": (n, tell_only)}


async def collector_settled() -> None:
    """Wait until the freeze a runtime's ``GcPolicy`` makes after a batch of activations (a
    moment after the last one) has happened, so that a clock starts on the steady state."""
    while governor.freeze_pending:  # noqa: ASYNC110 - a loop timer, no event to wait on
        await asyncio.sleep(0.01)


async def activate_accounts(
    rt: tether.Runtime, ids: list[str], concurrency: int = 100
) -> list[tether.ActorRef]:
    """Spawn (or resume) the ``Account`` actors ``ids``, ``concurrency`` at a time, and ask
    each once, so that each is active and recovered before a clock starts (and the collector
    has frozen them, as a runtime's ``GcPolicy`` does after a batch of activations)."""
    refs: dict[str, tether.ActorRef] = {}
    todo = iter(ids)

    async def spawner() -> None:
        for actor_id in todo:
            ref = await rt.spawn(Account, actor_id)
            await ref.ask(GetBalance(), timeout=ASK_TIMEOUT)
            refs[actor_id] = ref

    async with anyio.create_task_group() as tg:
        for _ in range(min(concurrency, len(ids))):
            tg.start_soon(spawner)
    await collector_settled()
    return [refs[i] for i in ids]


async def deposit_round(
    refs: list[tether.ActorRef], per_actor: int, watch: Any = None
) -> tuple[float, float]:
    """The timed part of the durable scenario on actors that have no deposits yet: one sender
    task per actor tells ``per_actor`` deposits, then asks the balance and checks it. Returns
    (seconds until every ask returned, seconds until the last tell returned). ``watch``, if
    given, is started right before the clock and stopped right after it."""
    told: list[float] = []
    want = (per_actor * (per_actor + 1) // 2, per_actor)

    async def sender(ref: tether.ActorRef) -> None:
        tell = ref.tell
        for i in range(per_actor):
            await tell(Deposit(amount=i + 1))
        told.append(time.perf_counter())
        got = await ref.ask(GetBalance(), timeout=ASK_TIMEOUT)
        if got != want:
            raise AssertionError(f"{ref.id}: balance {got}, expected {want}")

    if watch is not None:
        watch.start()
    t0 = time.perf_counter()
    try:
        async with anyio.create_task_group() as tg:
            for ref in refs:
                tg.start_soon(sender, ref)
        dt = time.perf_counter() - t0
    finally:
        if watch is not None:
            watch.stop()
    return dt, max(told) - t0


COMMIT_STATS: list[tuple[int, int]] = []  # (group commits, writes) of each durable run


def _commit_stats(rt: tether.Runtime) -> tuple[int, int] | None:
    """(group commits, writes) so far, if this version of the runtime reports them."""
    try:
        st = rt.stats()
        return int(st["commits"]), int(st["writes"])
    except (AttributeError, KeyError, TypeError):
        return None


JOURNAL_SCHEMA = (
    "CREATE TABLE journal (actor_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "payload BLOB NOT NULL, PRIMARY KEY (actor_id, seq)) WITHOUT ROWID"
)


async def raw_executemany(n: int, batch: int = 100, n_actors: int = 16) -> Sample:
    """anchors/peer-bench/bench_sqlite.py 1d: aiosqlite, WAL, synchronous=FULL, one
    ``executemany`` of 100 rows + commit per transaction, ~60 B msgpack payloads."""

    class Ev(msgspec.Struct):
        kind: str
        key: str
        amount: int
        ts: int

    enc = msgspec.msgpack.Encoder().encode
    actors = [f"actor-{i:04d}" for i in range(n_actors)]
    rows = [
        (
            actors[i % n_actors],
            i // n_actors,
            enc(Ev("deposit", f"k{i % 97}", i, 1_700_000_000 + i)),
        )
        for i in range(n)
    ]
    d = scratch_dir("raw")
    path = d / "raw.db"
    try:
        c = sqlite3.connect(path)
        assert c.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        c.execute(JOURNAL_SCHEMA)
        c.commit()
        c.close()
        import aiosqlite  # the bench extra: only the raw baselines need it

        async with aiosqlite.connect(path) as db:
            await db.execute("PRAGMA synchronous=FULL")
            t0 = time.perf_counter()
            for start in range(0, n, batch):
                await db.executemany(
                    "INSERT INTO journal (actor_id, seq, payload) VALUES (?, ?, ?)",
                    rows[start : start + batch],
                )
                await db.commit()
            dt = time.perf_counter() - t0
            got = await db.execute_fetchall("SELECT count(*) FROM journal")
            assert next(iter(got))[0] == n
    finally:
        rm_scratch(d)
    return {"2.raw_executemany": (n, dt)}


# ============================================================================ 3. recovery


class Credited(tether.Event):
    amount: int


class Debited(tether.Event):
    amount: int


class Renamed(tether.Event):
    name: str


class Burst(tether.Message):
    start: int
    n: int


class GetLedger(tether.Message):
    pass


class Ledger(msgspec.Struct):
    balance: int = 0
    events: int = 0
    name: str = ""


def ledger_event(i: int) -> Credited | Debited | Renamed:
    r = (i // 7) % 10
    if r == 0:
        return Renamed(name=f"name-{i}")
    return Debited(amount=3) if r < 4 else Credited(amount=7)


class LedgerActor(tether.Actor[Ledger]):
    initial_state = Ledger()

    def apply(self, state: Ledger, event: Credited | Debited | Renamed) -> Ledger:
        # The raw baseline folds through this same method (on an unbound instance).
        if isinstance(event, Credited):
            return Ledger(state.balance + event.amount, state.events + 1, state.name)
        if isinstance(event, Debited):
            return Ledger(state.balance - event.amount, state.events + 1, state.name)
        return Ledger(state.balance, state.events + 1, event.name)

    async def handle(self, msg: Burst | GetLedger) -> Ledger | None:
        if type(msg) is Burst:
            persist = self.persist
            for i in range(msg.start, msg.start + msg.n):
                persist(ledger_event(i))
            return None
        return self.state


LEDGER = "ledger-0"
EMPTY = "ledger-empty"
NO_SNAPSHOTS = 10**9  # snapshot_every: never, so that recovery folds the whole journal
DEFAULT_SNAPSHOTS = 1000  # the Runtime's default snapshot_every


async def build_journal(path: Path, n_events: int, burst: int, snapshot_every: int) -> Ledger:
    async with tether.Runtime(path, snapshot_every=snapshot_every) as rt:
        ref = await rt.spawn(LedgerActor, LEDGER)
        for start in range(0, n_events, burst):
            await ref.tell(Burst(start=start, n=min(burst, n_events - start)))
        state: Ledger = await ref.ask(GetLedger(), timeout=ASK_TIMEOUT)
        empty = await rt.spawn(LedgerActor, EMPTY)
        await empty.ask(GetLedger(), timeout=ASK_TIMEOUT)
    assert state.events == n_events, state
    return state


async def tether_recover(
    path: Path, actor_id: str, n_events: int, expected: Ledger, snapshot_every: int, key: str
) -> Sample:
    """Open a new Runtime on the file and time until the actor's state is ready."""
    t0 = time.perf_counter()
    async with tether.Runtime(path, snapshot_every=snapshot_every) as rt:
        ref = await rt.spawn(LedgerActor, actor_id)
        state = await ref.ask(GetLedger(), timeout=ASK_TIMEOUT)
        dt = time.perf_counter() - t0
    assert state == expected, (state, expected)
    return {key: (n_events, dt)}


_event_decoder = msgspec.msgpack.Decoder(Credited | Debited | Renamed)


async def raw_recover(path: Path, n_events: int, expected: Ledger) -> Sample:
    """anchors/peer-bench/bench_recovery.py's fetchall variant on tether's own journal rows:
    connect + ``execute_fetchall`` of the payload column + msgspec decode + the same fold."""
    decode = _event_decoder.decode
    apply = LedgerActor().apply  # the same fold tether runs
    import aiosqlite  # the bench extra: only the raw baselines need it

    t0 = time.perf_counter()
    async with aiosqlite.connect(path) as db:
        rows = await db.execute_fetchall(
            "SELECT payload FROM journal WHERE actor_id = ? ORDER BY seq", (LEDGER,)
        )
    state = Ledger()
    for (payload,) in rows:
        state = apply(state, decode(payload))
    dt = time.perf_counter() - t0
    assert state == expected, (state, expected)
    return {"3.raw_recovery": (n_events, dt)}


# ============================================================================ driver
# ============================================================================ driver


def run_all(sizes: Sizes) -> Bench:
    b = Bench(sizes)
    s = sizes

    # -- 1. in-memory ask
    ask = [
        Scenario(
            [("1.tether_ask", 'tether ask, Runtime(":memory:"), sequential', "rt/s")],
            lambda: asyncio.run(tether_ask(s.ask_tether)),
        ),
        Scenario(
            [("1.asyncio_ask", "hand-written asyncio actor ask (Queue + future)", "rt/s")],
            lambda: asyncio.run(asyncio_ask(s.ask_asyncio)),
        ),
    ]
    if pykka is not None:
        ask.append(
            Scenario(
                [("1.pykka_ask", "Pykka ThreadingActor ask, sequential", "rt/s")],
                lambda: pykka_ask(s.ask_pykka),
            )
        )
    b.measure(*ask)
    if pykka is None:
        b.skip("1.pykka_ask", "Pykka ThreadingActor ask", "rt/s", "pykka is not installed")

    # -- 2. durable throughput
    COMMIT_STATS.clear()
    b.measure(
        Scenario(
            [
                (
                    "2.tether_durable",
                    f"tether durable, {s.durable_actors:,} actors x {s.durable_per_actor} msgs, "
                    "1 event/msg, sync=FULL: tell -> processed",
                    "msg/s",
                ),
                ("2.tether_tell_only", "same runs, until the last tell returned (stored)", "msg/s"),
            ],
            lambda: asyncio.run(tether_durable(s.durable_actors, s.durable_per_actor)),
        ),
        Scenario(
            [
                (
                    "2.raw_executemany",
                    "raw aiosqlite WAL sync=FULL, executemany(100) + commit",
                    "rows/s",
                )
            ],
            lambda: asyncio.run(raw_executemany(s.raw_rows)),
        ),
    )
    timed_runs = COMMIT_STATS[1:]  # not the warm-up
    if timed_runs and b.figures["2.tether_durable"].ok:
        b.extra["durable_commits_writes_per_run"] = timed_runs
        commits = statistics.median(c for c, _ in timed_runs)
        per = statistics.median(w / c for c, w in timed_runs if c)
        b.figures[
            "2.tether_durable"
        ].note = f"{commits:.0f} group commits per run, {per:.0f} writes per commit"

    # -- 3. recovery
    n = s.recovery_events
    d = scratch_dir("recovery")
    try:
        full_path, snap_path = d / "nosnap.db", d / "snap.db"
        t0 = time.perf_counter()
        expected = asyncio.run(build_journal(full_path, n, s.burst, NO_SNAPSHOTS))
        b.extra["recovery_build_seconds"] = round(time.perf_counter() - t0, 3)
        asyncio.run(build_journal(snap_path, n, s.burst, DEFAULT_SNAPSHOTS))
    except Exception as exc:  # no journal: every recovery figure fails
        traceback.print_exc()
        for key in ("3.tether_recovery", "3.raw_recovery"):
            b.figures[key] = Figure(key, key, "events/s", error=f"building the journal: {exc!r}")
        rm_scratch(d)
        return b
    try:
        b.measure(
            Scenario(
                [
                    (
                        "3.tether_recovery",
                        f"tether restart, fold {n:,} events (no snapshot)",
                        "events/s",
                    )
                ],
                lambda: asyncio.run(
                    tether_recover(
                        full_path, LEDGER, n, expected, NO_SNAPSHOTS, "3.tether_recovery"
                    )
                ),
                {"3.tether_recovery": "new Runtime + spawn + ask, until the state is ready"},
            ),
            Scenario(
                [
                    (
                        "3.raw_recovery",
                        f"raw: fetchall + msgspec decode + same fold, {n:,} events",
                        "events/s",
                    )
                ],
                lambda: asyncio.run(raw_recover(full_path, n, expected)),
                {"3.raw_recovery": "connect + read + decode + fold"},
            ),
            Scenario(
                [
                    (
                        "3.tether_recovery_snap",
                        "tether restart, default snapshot_every=1000",
                        "events/s",
                    )
                ],
                lambda: asyncio.run(
                    tether_recover(
                        snap_path, LEDGER, n, expected, DEFAULT_SNAPSHOTS, "3.tether_recovery_snap"
                    )
                ),
                {"3.tether_recovery_snap": f"loads the snapshot at seq {n:,}, folds 0 events"},
            ),
            Scenario(
                [
                    (
                        "3.tether_restart_empty",
                        "tether restart of an actor with no events",
                        "restarts/s",
                    )
                ],
                lambda: asyncio.run(
                    tether_recover(
                        full_path, EMPTY, 1, Ledger(), NO_SNAPSHOTS, "3.tether_restart_empty"
                    )
                ),
                {"3.tether_restart_empty": "the fixed cost inside 3.tether_recovery"},
            ),
        )
    finally:
        rm_scratch(d)
    return b


# (target, numerator figure, denominator figure or None for an absolute target, required)
TARGETS: list[tuple[str, str, str | None, float | None]] = [
    ("in-memory ask: tether >= 0.6x hand-written asyncio", "1.tether_ask", "1.asyncio_ask", 0.6),
    ("in-memory ask: tether >= 8x Pykka", "1.tether_ask", "1.pykka_ask", 8.0),
    ("durable: tether >= 40,000 msg/s", "2.tether_durable", None, 40_000.0),
    ("durable: tether >= 0.3x raw executemany", "2.tether_durable", "2.raw_executemany", 0.3),
    ("recovery: tether >= 0.5x raw read+decode+fold", "3.tether_recovery", "3.raw_recovery", 0.5),
]


def evaluate(
    b: Bench, targets: list[tuple[str, str, str | None, float | None]] = TARGETS
) -> list[dict[str, Any]]:
    """Each target on the medians; n/a when a figure it needs is missing. A target whose
    ``required`` is None is information: its ratio is shown, with no verdict."""
    out = []
    for label, num, den, need in targets:
        fn = b.figures.get(num)
        fd = b.figures.get(den) if den is not None else None
        row: dict[str, Any] = {"target": label, "numerator": num, "denominator": den}
        row["required"] = need
        if fn is None or not fn.ok or (den is not None and (fd is None or not fd.ok)):
            row.update(value=None, verdict="n/a")
        else:
            value = fn.median / fd.median if fd is not None else fn.median
            verdict = "-" if need is None else "PASS" if value >= need else "MISS"
            row.update(value=value, verdict=verdict)
        out.append(row)
    return out


def at_most(label: str, value: float | None, limit: float, shown: str, need: str) -> dict[str, Any]:
    """A target on a cost (lower is better): PASS if ``value <= limit``. ``shown`` and ``need``
    are how the table prints the measured value and the limit."""
    verdict = "n/a" if value is None else "PASS" if value <= limit else "MISS"
    return {
        "target": label,
        "numerator": None,
        "denominator": None,
        "required": limit,
        "value": value,
        "verdict": verdict,
        "shown": "n/a" if value is None else shown,
        "need": need,
    }


def figure_rows(b: Bench) -> list[str]:
    """The figures as markdown table rows: min, median, max of each."""
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
    return lines


def target_rows(b: Bench, targets: list[dict[str, Any]]) -> list[str]:
    """The targets (from ``evaluate``) as markdown table rows."""
    lines = [
        "| target | measured (medians) | required | verdict |",
        "|---|---|---:|---|",
    ]
    for t in targets:
        den = t["denominator"]
        if "shown" in t:  # at_most
            lines.append(f"| {t['target']} | {t['shown']} | {t['need']} | **{t['verdict']}** |")
            continue
        if t["value"] is None:
            measured = "n/a"
        elif den is None:
            measured = f"{fmt(t['value'])} {b.figures[t['numerator']].unit}"
        else:
            num_med = fmt(b.figures[t["numerator"]].median)
            measured = f"{t['value']:.2f}x ({num_med} / {fmt(b.figures[den].median)})"
        if t["required"] is None:
            need = ""
        else:
            need = fmt(t["required"]) if den is None else f"{t['required']:g}x"
        lines.append(f"| {t['target']} | {measured} | {need} | **{t['verdict']}** |")
    return lines


def table(b: Bench, targets: list[dict[str, Any]]) -> str:
    return "\n".join([*figure_rows(b), "", *target_rows(b, targets)])


# ----------------------------------------------------------------------------- profiling


def profile_all(sizes: Sizes, top: int) -> None:
    """One run of each tether scenario under cProfile (main thread only: the SQLite work on the
    store's connection threads shows up as time the loop spends waiting in select)."""

    def show(title: str, fn: Callable[[], object]) -> None:
        fn()  # warm-up
        prof = cProfile.Profile()
        prof.enable()
        fn()
        prof.disable()
        print(f"\n## {title}\n")
        print_profile(prof, top)

    show("1. tether ask", lambda: asyncio.run(tether_ask(sizes.ask_tether)))
    show(
        "2. tether durable",
        lambda: asyncio.run(tether_durable(sizes.durable_actors, sizes.durable_per_actor)),
    )
    d = scratch_dir("profile")
    try:
        path = d / "journal.db"
        expected = asyncio.run(
            build_journal(path, sizes.recovery_events, sizes.burst, NO_SNAPSHOTS)
        )
        show(
            "3. tether recovery",
            lambda: asyncio.run(
                tether_recover(path, LEDGER, sizes.recovery_events, expected, NO_SNAPSHOTS, "x")
            ),
        )
    finally:
        rm_scratch(d)


def print_profile(prof: cProfile.Profile, top: int) -> None:
    """The ``top`` functions by own time and by cumulative time, in % of the profiled time."""
    st = pstats.Stats(prof)
    total = st.total_tt
    rows = []
    for (path, line, func), (_, calls, own, cum, _) in st.stats.items():
        for marker in ("site-packages/", "/work/main/", "python3.11/"):
            path = path.split(marker)[-1]
        rows.append((own, cum, calls, f"{func} ({path}:{line})"))
    print(f"profiled: {total:.3f} s of main-thread time")
    for title, key in (("own time", 0), ("cumulative time", 1)):
        print(f"\nby {title}:   own%   cum%    calls  function")
        for own, cum, calls, name in sorted(rows, key=lambda r: -r[key])[:top]:
            print(f"{'':14}{100 * own / total:6.1f} {100 * cum / total:6.1f} {calls:8d}  {name}")


# ----------------------------------------------------------------------------- main


def versions(*dists: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in dists:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def git_revision() -> str | None:
    """The checked-out commit, with "+dirty" if tether/ has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "tether"], cwd=HERE.parent, capture_output=True
        ).stdout.strip()
    except OSError:
        return None
    return (head + ("+dirty" if dirty else "")) or None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="tether benchmarks: figures, peers, raw limits and targets in one run."
    )
    p.add_argument("--quick", action="store_true", help="small sizes, 1 run: checks that it runs")
    p.add_argument("--json", metavar="PATH", help="also write the raw per-run samples to PATH")
    p.add_argument("--runs", type=int, help="runs per figure (default: 5, or 1 with --quick)")
    p.add_argument(
        "--profile", action="store_true", help="cProfile one run of each tether scenario instead"
    )
    args = p.parse_args(argv)
    if args.runs is not None and args.runs < 1:
        p.error("--runs must be at least 1")
    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = replace(sizes, runs=args.runs)
    try:
        if args.profile:
            profile_all(sizes, top=25)
            return 0
        return _run(sizes, args.quick, args.json)
    finally:
        with contextlib.suppress(OSError):  # not empty: another benchmark is using it
            DATA_DIR.rmdir()


def _run(sizes: Sizes, quick: bool, json_path: str | None) -> int:
    meta = run_meta(quick, sizes.runs, "tether", "aiosqlite", "msgspec", "anyio", "pykka")
    print(
        f"tether benchmarks, {meta['mode']} mode: median of {sizes.runs} run(s) after 1 warm-up. "
        f"Python {meta['python']}, SQLite {meta['sqlite']}, {meta['cpus']} CPUs, "
        f"{meta['platform']}",
        flush=True,
    )
    t0 = time.perf_counter()
    b = run_all(sizes)
    targets = evaluate(b)
    print()
    print(table(b, targets))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return finish(b, targets, meta, {"sizes": asdict(sizes)}, json_path)


def run_meta(quick: bool, runs: int, *packages: str) -> dict[str, Any]:
    """What a result was measured on: machine, versions, mode, commit."""
    return {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "mode": "quick" if quick else "full",
        "runs": runs,
        "git": git_revision(),
        **versions(*packages),
    }


S = TypeVar("S")


def add_house_options(p: argparse.ArgumentParser, *, runs_help: str | None = None) -> None:
    """``--quick``, ``--json PATH`` and ``--runs N``, as every benchmark script takes them."""
    p.add_argument("--quick", action="store_true", help="small sizes, 1 run: checks that it runs")
    p.add_argument("--json", metavar="PATH", help="also write the raw per-run samples to PATH")
    p.add_argument(
        "--runs", type=int, help=runs_help or "runs per figure (default: 5, or 1 with --quick)"
    )


def chosen_sizes(p: argparse.ArgumentParser, args: argparse.Namespace, full: S, quick: S) -> S:
    """``quick`` or ``full`` (dataclasses with a ``runs`` field), with ``--runs`` applied."""
    if args.runs is not None and args.runs < 1:
        p.error("--runs must be at least 1")
    sizes = quick if args.quick else full
    return replace(sizes, runs=args.runs) if args.runs else sizes  # type: ignore[type-var]


def announce(title: str, meta: dict[str, Any]) -> None:
    """The first line of a run: what, how many runs, on what."""
    print(
        f"{title}, {meta['mode']} mode: median of {meta['runs']} run(s) after 1 warm-up. "
        f"Python {meta['python']}, SQLite {meta['sqlite']}, {meta['cpus']} CPUs",
        flush=True,
    )


@contextlib.contextmanager
def tidy_data_dir() -> Iterator[None]:
    """Remove ``benchmarks/_data/`` at the end, unless another benchmark is using it."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # not empty: another benchmark is using it
            DATA_DIR.rmdir()


def chart_subtitle(meta: dict[str, Any]) -> str:
    """What a chart was measured on, for its subtitle."""
    return (
        f"{meta['mode']} run, median of {meta['runs']} run(s), {meta['time']}, git {meta['git']}; "
        f"Python {meta['python']}, SQLite {meta['sqlite']}, {meta['cpus']} CPUs. "
        "Compare only figures of the same run."
    )


def charts_dir(arg: str | None) -> Path | None:
    """The ``--charts DIR`` folder, created; None without the option."""
    if arg is None:
        return None
    path = Path(arg)
    path.mkdir(parents=True, exist_ok=True)
    return path


def conclude(started: float, b: Bench, rows: list[dict[str, Any]], *finish_args: Any) -> int:
    """The end of a run: its table, its duration since ``started``, then
    ``finish(b, rows, *finish_args)``."""
    print()
    print(table(b, rows))
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return finish(b, rows, *finish_args)


def finish(
    b: Bench,
    targets: list[dict[str, Any]],
    meta: dict[str, Any],
    extra: dict[str, Any],
    json_path: str | None,
) -> int:
    """Write every raw sample to ``json_path`` (if given); exit status 1 if a figure failed."""
    if json_path:
        raw = {
            "meta": meta,
            **extra,
            "figures": [
                {
                    "key": f.key,
                    "label": f.label,
                    "unit": f.unit,
                    "samples": [{"count": n, "seconds": s} for n, s in f.samples],
                    "min": min(f.rates) if f.ok else None,
                    "median": f.median if f.ok else None,
                    "max": max(f.rates) if f.ok else None,
                    "note": f.note,
                    "error": f.error,
                    "skipped": f.skipped,
                }
                for f in b.figures.values()
            ],
            "targets": targets,
            "extra": b.extra,
        }
        Path(json_path).write_text(json.dumps(raw, indent=2) + "\n")
        print(f"raw results: {json_path}")
    failed = [f.key for f in b.figures.values() if f.error is not None and not f.skipped]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
