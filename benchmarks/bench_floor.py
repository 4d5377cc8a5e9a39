"""The floor: how fast the least code that keeps tether's promises can go, on this machine.

    python benchmarks/bench_floor.py                  # full run: median of 5 runs (+1 warm-up)
    python benchmarks/bench_floor.py --quick          # smoke mode for CI: small sizes, 1 run
    python benchmarks/bench_floor.py --json out.json  # also write the raw per-run samples
    python benchmarks/bench_floor.py --runs 9         # more runs per figure

Issues #2 and #4 set speed targets that tether misses. Before blaming tether's code, this
script asks what *any* pure-Python design could reach: each ``floor_*`` scenario is the
smallest program that still does what the target's scenario promises, written without any of
tether's machinery, and timed in the same run as tether, its peers and the raw limits.

* ``1.floor_ask``: the hand-written asyncio actor (``asyncio.Queue`` + task + future) plus the
  least an actor message needs: the type check, the msgspec encode at send and decode at
  delivery (a message crosses a store), a mailbox entry added and acknowledged (a dict), a
  message id. No supervision, no telemetry, no attempts.
* ``2.floor_durable``: 1,000 actors x 40 messages, each persisting one event, on tether's own
  schema (the very same rows and indexes, so the SQLite work is identical), WAL,
  ``synchronous=FULL``: ``tell`` waits for a group commit of its mailbox row (I1); each step
  commits its journal row and the mailbox delete in a later group commit (I2). Group commit:
  one task takes everything queued and runs one transaction on one writer thread with
  multi-row statements (tether's store does the same). No fencing, no claims, no dedup, no
  telemetry, no dead letters.
* ``3.floor_effects``: 100 sessions, each step 3 effects of trivial tools, then one event: the
  intent row is committed before each call (I4), the receipt rides with the next commit (as
  tether's ``recovery="retry"`` tools), a key per effect from a hash of (actor, message,
  index, tool, input) (I5). 4 commit rounds per step, like tether's. No guards, no retries, no
  telemetry.

Issue #20 asks tether to come close to the floor: ask >= 0.6x, durable >= 0.7x, the 3-effect
step >= 0.6x; the table gives these ratios first.

Beside them, from the other benchmark scripts and in the same rounds: tether itself, the
hand-written asyncio actor, Pykka, raw ``executemany``, and DBOS's 3-step workflow (its best
WAL variant, see ``bench_effects.py``). The table then says, for each missed target, whether
even the floor meets it: where the floor misses, no rewrite of tether in Python can pass on
this machine, and the honest answer is a different target, a different runtime (a compiled
core, free-threaded CPython) or a different machine.

Every floor scenario runs under the collector settings a tether runtime serves with
(``like_a_runtime``: the same ``tether.GcPolicy``, entered as a runtime enters it, its
actors counted as activations), so that tether's ratios to the floor are not ratios of two
garbage collector settings.

Nothing asserts wall-clock time; every run checks the state it computed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_effects as eff
import run
from children import PipeChild
from run import (
    Bench,
    Deposit,
    Deposited,
    GetBalance,
    GetCount,
    Sample,
    Scenario,
    rm_scratch,
    scratch_dir,
)

from tether import GcPolicy
from tether.runtime.collector import governor
from tether.store.sqlite.schema import SCHEMA as _SCHEMA  # the same rows as tether's

DEFAULT_GC = GcPolicy()  # what a Runtime serves with unless told otherwise


@contextlib.asynccontextmanager
async def like_a_runtime(actors: int, policy: GcPolicy = DEFAULT_GC) -> AsyncIterator[None]:
    """The collector as a tether runtime serving ``actors`` actors under ``policy`` has it:
    the policy entered (its thresholds), each actor counted as an activation, and the freeze
    that follows a batch of them waited for (as ``run.activate_accounts`` waits for tether's
    before its clock); the collector given back at the end. Enter it once the actors exist."""
    governor.enter(policy)
    try:
        for resident in range(1, actors + 1):
            governor.activated(resident)
        await run.collector_settled()
        yield
    finally:
        governor.exit(policy)


@dataclass(frozen=True)
class Sizes:
    runs: int
    ask: int  # sequential asks per run (floor, asyncio, tether)
    ask_pykka: int
    durable_actors: int
    durable_per_actor: int
    raw_rows: int
    sessions: int
    steps: int  # effect steps per run, over all sessions
    dbos_seq: int
    dbos_concurrent: int


FULL = Sizes(
    runs=5,
    ask=30_000,
    ask_pykka=10_000,
    durable_actors=1_000,
    durable_per_actor=40,
    raw_rows=100_000,
    sessions=100,
    steps=2_000,
    dbos_seq=300,
    dbos_concurrent=300,
)
QUICK = Sizes(
    runs=1,
    ask=1_000,
    ask_pykka=500,
    durable_actors=100,
    durable_per_actor=5,
    raw_rows=5_000,
    sessions=100,
    steps=300,
    dbos_seq=30,
    dbos_concurrent=100,
)

SYNCHRONOUS = "FULL"  # the issues' durability level, tether's default
ENCODE = msgspec.msgpack.Encoder().encode
NO_ERRORS = b"\x90"  # msgpack of an empty list, as tether stores an empty history


# ============================================================================ 1. the ask floor


class _FloorAskActor:
    """The asyncio actor of ``run.asyncio_ask`` plus what a message of an actor system must
    do at least: checked type, encoded payload, id, mailbox entry, decode, acknowledgement."""

    accepted = frozenset({GetCount})

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[int, asyncio.Future[Any]] | None] = asyncio.Queue()
        self.mailbox: dict[int, bytes] = {}
        self.decode = msgspec.msgpack.Decoder(GetCount).decode
        self.count = 0
        self.ids = itertools.count()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def ask(self, msg: GetCount) -> int:
        if type(msg) not in self.accepted:
            raise TypeError(f"{type(msg).__name__} is not accepted")
        msg_id = next(self.ids)
        self.mailbox[msg_id] = ENCODE(msg)
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((msg_id, fut))
        return await fut

    async def _run(self) -> None:
        while (item := await self.queue.get()) is not None:
            msg_id, fut = item
            self.decode(self.mailbox[msg_id])  # what the handler would receive
            reply = self.count
            del self.mailbox[msg_id]  # the ack
            fut.set_result(reply)

    async def stop(self) -> None:
        self.queue.put_nowait(None)
        await self.task


async def floor_ask(n: int, gc: GcPolicy = DEFAULT_GC) -> Sample:
    actor = _FloorAskActor()
    msg = GetCount()
    ask = actor.ask
    async with like_a_runtime(1, gc):
        t0 = time.perf_counter()
        for _ in range(n):
            await ask(msg)
        dt = time.perf_counter() - t0
    assert not actor.mailbox
    await actor.stop()
    return {"1.floor_ask": (n, dt)}


# ============================================================================ the floor store


class _FloorStore:
    """tether's schema in one SQLite file (WAL, synchronous=FULL), written by one thread; a
    group committer on the loop: ``submit`` queues rows, one task commits all queued rows in
    one transaction (one thread hop), then releases their futures."""

    def __init__(self, path: Path, schema: str | None = _SCHEMA) -> None:
        self.path = path
        self.schema = schema
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="floor-writer")
        self.conn: sqlite3.Connection | None = None
        self.messages: list[tuple[Any, ...]] = []
        self.journal: list[tuple[Any, ...]] = []
        self.acks: list[tuple[Any, ...]] = []
        self.effects: list[tuple[Any, ...]] = []
        self.waiting: list[asyncio.Future[None]] = []
        self.wake = asyncio.Event()
        self.commits = 0

    async def open(self) -> None:
        self.conn = await asyncio.get_running_loop().run_in_executor(
            self.executor, _connect, self.path, self.schema
        )

    def submit(
        self,
        *,
        messages: Sequence[tuple[Any, ...]] = (),
        journal: Sequence[tuple[Any, ...]] = (),
        acks: Sequence[tuple[Any, ...]] = (),
        effects: Sequence[tuple[Any, ...]] = (),
    ) -> asyncio.Future[None]:
        self.messages.extend(messages)
        self.journal.extend(journal)
        self.acks.extend(acks)
        self.effects.extend(effects)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        self.wake.set()
        return fut

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.waiting:
                taken = (self.messages, self.journal, self.acks, self.effects)
                waiting = self.waiting
                self.messages, self.journal, self.acks, self.effects = [], [], [], []
                self.waiting = []
                await loop.run_in_executor(self.executor, self._transaction, *taken)
                self.commits += 1
                for fut in waiting:
                    fut.set_result(None)

    def _transaction(
        self,
        messages: list[tuple[Any, ...]],
        journal: list[tuple[Any, ...]],
        acks: list[tuple[Any, ...]],
        effects: list[tuple[Any, ...]],
    ) -> None:
        c = self.conn
        assert c is not None
        c.execute("BEGIN IMMEDIATE")
        _rows(
            c,
            "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, wants_reply, "
            "created_at, attempts) VALUES ",
            "(?, ?, ?, ?, ?, ?, ?, ?)",
            messages,
        )
        _rows(c, "INSERT INTO journal (actor_id, seq, payload) VALUES ", "(?, ?, ?)", journal)
        _rows(
            c,
            "INSERT INTO effects (actor_id, msg_id, idx, key, tool, input_hash, args, status, "
            "attempts, result, error, reason, history, created_at, updated_at) VALUES ",
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            effects,
            " ON CONFLICT (msg_id, idx) DO UPDATE SET status = excluded.status, "
            "result = excluded.result, updated_at = excluded.updated_at",
        )
        _rows(c, "DELETE FROM mailbox WHERE msg_id IN (", "?", acks, ")")
        c.execute("COMMIT")

    async def close(self) -> None:
        if self.conn is not None:
            await asyncio.get_running_loop().run_in_executor(self.executor, self.conn.close)
        self.executor.shutdown(wait=True)


def _connect(path: Path, schema: str | None = _SCHEMA) -> sqlite3.Connection:
    """A new file with ``schema`` (tether's by default), WAL, ``synchronous=FULL``; with
    ``schema=None``, an existing file."""
    c = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
    if schema is not None:
        c.executescript(schema)
    return c


# The least schema the effects scenario can write: tether's columns, each table clustered on
# the key it is written by, and no other index. It gives up what tether's indexes serve (a
# message looked up by id, mailboxes scanned by due time, effects listed by actor and by
# status for quarantine and retention): a floor, not a proposal.
LEAN_SCHEMA = """
CREATE TABLE mailbox (
    msg_id TEXT PRIMARY KEY, actor_id TEXT NOT NULL, type TEXT NOT NULL, payload BLOB NOT NULL,
    deliver_at REAL NOT NULL, wants_reply INTEGER NOT NULL, created_at REAL NOT NULL,
    attempts INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE journal (
    actor_id TEXT NOT NULL, seq INTEGER NOT NULL, payload BLOB NOT NULL,
    PRIMARY KEY (actor_id, seq)
) WITHOUT ROWID;
CREATE TABLE effects (
    actor_id TEXT NOT NULL, msg_id TEXT NOT NULL, idx INTEGER NOT NULL, key TEXT NOT NULL,
    tool TEXT NOT NULL, input_hash TEXT NOT NULL, args BLOB NOT NULL, status TEXT NOT NULL,
    attempts INTEGER NOT NULL, result BLOB, error TEXT, reason TEXT, history BLOB,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (msg_id, idx)
) WITHOUT ROWID;
"""


def _rows(
    c: sqlite3.Connection, head: str, row: str, rows: list[tuple[Any, ...]], tail: str = ""
) -> None:
    """Multi-row statements of at most 500 rows (well under the parameter limit)."""
    for start in range(0, len(rows), 500):
        chunk = rows[start : start + 500]
        c.execute(
            head + ", ".join([row] * len(chunk)) + tail,
            [v for r in chunk for v in r],
        )


class _FloorSystem:
    """Actors on the floor store: an inbox per actor, a message id counter."""

    def __init__(self, store: _FloorStore) -> None:
        self.store = store
        self.ids = itertools.count()

    async def tell(
        self, inbox: asyncio.Queue[Any], actor_id: str, msg: Any, reply: Any = None
    ) -> None:
        """I1: returns once the message's mailbox row is committed; then it is delivered."""
        payload = ENCODE(msg)
        msg_id = f"m-{next(self.ids)}"
        now = time.time()
        row = (msg_id, actor_id, type(msg).__name__, payload, now, int(reply is not None), now, 1)
        await self.store.submit(messages=(row,))
        inbox.put_nowait((msg_id, payload, reply))


async def _timed(
    store: _FloorStore,
    actors: Sequence[Any],
    sender: Callable[[Any], Awaitable[None]],
    watch: Any = None,
) -> tuple[float, float]:
    """Run the store's committer and every actor, and one ``sender`` per actor: (start time,
    seconds until every sender is done). Then stop them all and close the store. ``watch``,
    if given, is started right before the clock and stopped right after it."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(store.run())] + [loop.create_task(a.run()) for a in actors]
    try:
        if watch is not None:
            watch.start()
        t0 = time.perf_counter()
        try:
            await asyncio.gather(*(sender(a) for a in actors))
            return t0, time.perf_counter() - t0
        finally:
            if watch is not None:
                watch.stop()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await store.close()


def _count(path: Path, rows: str) -> int:
    """``SELECT count(*) FROM <rows>`` on the floor's file, after the run."""
    check = sqlite3.connect(path)
    try:
        return int(check.execute(f"SELECT count(*) FROM {rows}").fetchone()[0])
    finally:
        check.close()


# ============================================================================ 2. the durable floor


class _FloorAccount:
    """``run.Account`` on the floor: each Deposit persists one event, in one step commit."""

    decode = msgspec.msgpack.Decoder(Deposit | GetBalance).decode

    def __init__(self, actor_id: str, store: _FloorStore, seq: int = 0) -> None:
        self.actor_id = actor_id
        self.store = store
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.seq = seq  # events already in its journal
        self.balance = 0
        self.count = 0

    async def run(self) -> None:
        while (item := await self.inbox.get()) is not None:
            msg_id, payload, reply = item
            msg = self.decode(payload)
            if type(msg) is Deposit:
                event = ENCODE(Deposited(amount=msg.amount))
                await self.store.submit(
                    journal=((self.actor_id, self.seq + 1, event),), acks=((msg_id,),)
                )
                self.seq += 1
                self.balance += msg.amount
                self.count += 1
                answer = None
            else:
                await self.store.submit(acks=((msg_id,),))
                answer = (self.balance, self.count)
            if reply is not None:
                reply.set_result(answer)


async def floor_durable(
    n_actors: int,
    per_actor: int,
    *,
    at: Path | None = None,
    first: int = 0,
    watch: Any = None,
    gc: GcPolicy = DEFAULT_GC,
) -> Sample:
    """The durable scenario on the floor, on a fresh file; or, with ``at``, on a file made by
    ``prefill_accounts`` whose accounts ``first`` .. ``first + n_actors - 1`` have no events
    yet (the rest are passivated sessions: rows in the file, nothing in memory). ``watch``: see
    ``_timed``."""
    d: Path | None = None
    if at is None:
        d = scratch_dir("floor-durable")
        path = d / "floor.db"
    else:
        path = at
    store = _FloorStore(path, _SCHEMA if at is None else None)
    try:
        await store.open()
        journal_before = 0 if at is None else _count(path, "journal")
        system = _FloorSystem(store)
        actors = [_FloorAccount(account_id(first + i), store) for i in range(n_actors)]
        loop = asyncio.get_running_loop()
        told: list[float] = []

        async def sender(a: _FloorAccount) -> None:
            for i in range(per_actor):
                await system.tell(a.inbox, a.actor_id, Deposit(amount=i + 1))
            told.append(time.perf_counter())
            reply: asyncio.Future[tuple[int, int]] = loop.create_future()
            await system.tell(a.inbox, a.actor_id, GetBalance(), reply)
            got = await reply
            assert got == (per_actor * (per_actor + 1) // 2, per_actor), (a.actor_id, got)

        async with like_a_runtime(n_actors, gc):
            t0, dt = await _timed(store, actors, sender, watch)
        journal = _count(path, "journal") - journal_before
        mailbox = _count(path, "mailbox")
        assert (journal, mailbox) == (n_actors * per_actor, 0), (journal, mailbox)
    finally:
        if d is not None:
            rm_scratch(d)
    n = n_actors * per_actor
    return {"2.floor_durable": (n, dt), "2.floor_tell_only": (n, max(told) - t0)}


def account_id(i: int) -> str:
    return f"acct-{i:06d}"


def prefill_accounts(path: Path, n: int) -> None:
    """A new floor file holding ``n`` accounts as tether's file holds spawned actors that
    passivated: one ``actors`` row each, no events."""
    c = _connect(path)
    now = time.time()
    init = ENCODE({})
    rows = [(account_id(i), "run.Account", init, now) for i in range(n)]
    _transaction(
        c, ("INSERT INTO actors (actor_id, class_path, init, created_at) VALUES (?, ?, ?, ?)", rows)
    )
    c.close()


# ============================================================================ 3. the effects floor


async def _s1(x: int) -> int:
    return x + 1


async def _s2(x: int) -> int:
    return x * 2


async def _s3(x: int) -> int:
    return x - 3


_TOOLS = (("s1", _s1), ("s2", _s2), ("s3", _s3))


class _FloorSession:
    """``bench_effects.Session`` on the floor: 3 effects, each an intent committed before the
    call and a receipt riding with the next commit, then one event with the step commit."""

    decode = msgspec.msgpack.Decoder(eff.Step | eff.GetState).decode

    def __init__(self, actor_id: str, store: _FloorStore) -> None:
        self.actor_id = actor_id
        self.store = store
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.seq = 0
        self.steps = 0
        self.total = 0

    def _effect_row(
        self, msg_id: str, idx: int, tool: str, args: bytes, status: str, result: bytes | None
    ) -> tuple[Any, ...]:
        input_hash = hashlib.blake2b(args, digest_size=16).hexdigest()
        key = hashlib.blake2b(
            f"{self.actor_id}\0{msg_id}\0{idx}\0{tool}\0{input_hash}".encode(), digest_size=16
        ).hexdigest()
        now = time.time()
        return (self.actor_id, msg_id, idx, key, tool, input_hash, args, status, 1, result,
                None, None, NO_ERRORS, now, now)  # fmt: skip

    async def run(self) -> None:
        while (item := await self.inbox.get()) is not None:
            msg_id, payload, reply = item
            msg = self.decode(payload)
            if type(msg) is eff.Step:
                x = msg.x
                receipts: tuple[tuple[Any, ...], ...] = ()
                for idx, (name, tool) in enumerate(_TOOLS):
                    args = ENCODE({"x": x})
                    intent = self._effect_row(msg_id, idx, name, args, "started", None)
                    await self.store.submit(effects=(*receipts, intent))  # I4: before the call
                    x = await tool(x)
                    receipts = (self._effect_row(msg_id, idx, name, args, "done", ENCODE(x)),)
                event = ENCODE(eff.Stepped(result=x))
                await self.store.submit(
                    effects=receipts,
                    journal=((self.actor_id, self.seq + 1, event),),
                    acks=((msg_id,),),
                )
                self.seq += 1
                self.steps += 1
                self.total += x
                answer = None
            else:
                await self.store.submit(acks=((msg_id,),))
                answer = (self.steps, self.total)
            if reply is not None:
                reply.set_result(answer)


async def floor_effects(
    n_sessions: int, steps: int, *, lean: bool = False, gc: GcPolicy = DEFAULT_GC
) -> Sample:
    per = steps // n_sessions
    d = scratch_dir("floor-effects")
    store = _FloorStore(d / "floor.db", LEAN_SCHEMA if lean else _SCHEMA)
    try:
        await store.open()
        system = _FloorSystem(store)
        sessions = [_FloorSession(f"session-{i:04d}", store) for i in range(n_sessions)]
        loop = asyncio.get_running_loop()
        expected = (per, sum(eff.workflow(x) for x in range(per)))

        async def sender(s: _FloorSession) -> None:
            for x in range(per):
                await system.tell(s.inbox, s.actor_id, eff.Step(x=x))
            reply: asyncio.Future[tuple[int, int]] = loop.create_future()
            await system.tell(s.inbox, s.actor_id, eff.GetState(), reply)
            got = await reply
            assert got == expected, (s.actor_id, got, expected)

        async with like_a_runtime(n_sessions, gc):
            _, dt = await _timed(store, sessions, sender)
        done = _count(d / "floor.db", "effects WHERE status = 'done'")
        assert done == 3 * per * n_sessions, done
    finally:
        rm_scratch(d)
    return {"3.floor_effects_lean" if lean else "3.floor_effects": (per * n_sessions, dt)}


# ============================================================================ the SQL alone


def _transaction(c: sqlite3.Connection, *statements: tuple[str, list[tuple[Any, ...]]]) -> None:
    c.execute("BEGIN IMMEDIATE")
    for sql, rows in statements:
        if rows:
            c.executemany(sql, rows)
    c.execute("COMMIT")


_INSERT_MESSAGE = (
    "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, wants_reply, created_at, "
    "attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_EVENT = "INSERT INTO journal (actor_id, seq, payload) VALUES (?, ?, ?)"
_DELETE_MESSAGE = "DELETE FROM mailbox WHERE msg_id = ?"
_UPSERT_EFFECT = (
    "INSERT INTO effects (actor_id, msg_id, idx, key, tool, input_hash, args, status, attempts, "
    "result, error, reason, history, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (msg_id, idx) DO UPDATE SET status = excluded.status, "
    "result = excluded.result, updated_at = excluded.updated_at"
)


def raw_message_sql(n_actors: int, per_actor: int) -> Sample:
    """The SQL of the durable scenario and nothing else: one thread, rows prepared before the
    clock starts, ``n_actors`` messages per group commit: their mailbox rows in one
    transaction (the tells), then their journal rows and mailbox deletes in the next (the
    steps). No event loop, no thread hop, no Python between statements."""
    d = scratch_dir("raw-messages")
    try:
        c = _connect(d / "raw.db")
        payload = ENCODE(Deposit(amount=1))
        event = ENCODE(Deposited(amount=1))
        now = time.time()
        rounds = [
            (
                [
                    (f"m-{k}-{a}", f"acct-{a}", "Deposit", payload, now, 0, now, 1)
                    for a in range(n_actors)
                ],
                [(f"acct-{a}", k + 1, event) for a in range(n_actors)],
                [(f"m-{k}-{a}",) for a in range(n_actors)],
            )
            for k in range(per_actor)
        ]
        t0 = time.perf_counter()
        for messages, events, acks in rounds:
            _transaction(c, (_INSERT_MESSAGE, messages))
            _transaction(c, (_INSERT_EVENT, events), (_DELETE_MESSAGE, acks))
        dt = time.perf_counter() - t0
        assert c.execute("SELECT count(*) FROM journal").fetchone()[0] == n_actors * per_actor
        c.close()
    finally:
        rm_scratch(d)
    return {"2.raw_message_sql": (n_actors * per_actor, dt)}


def raw_step_sql(n_sessions: int, steps: int) -> Sample:
    """The SQL of the effects scenario and nothing else: one thread, rows prepared before the
    clock starts. Per round of steps (one per session): the tells' mailbox rows; then 4
    commits as the sessions make them (intent 1; receipt 1 + intent 2; receipt 2 + intent 3;
    receipt 3 + event + mailbox delete), each holding every session's write."""
    per = steps // n_sessions
    d = scratch_dir("raw-steps")
    try:
        c = _connect(d / "raw.db")
        now = time.time()
        args = ENCODE({"x": 1})

        def effect(a: int, msg_id: str, idx: int, status: str) -> tuple[Any, ...]:
            h = hashlib.blake2b(b"%d%s" % (idx, args), digest_size=16).hexdigest()
            result = ENCODE(idx) if status == "done" else None
            return (f"session-{a}", msg_id, idx, f"{msg_id}/{idx}/{h}", f"s{idx + 1}", h, args,
                    status, 1, result, None, None, NO_ERRORS, now, now)  # fmt: skip

        rounds = []
        for k in range(per):
            ids = [f"m-{k}-{a}" for a in range(n_sessions)]
            tells = [(m, f"session-{a}", "Step", args, now, 0, now, 1) for a, m in enumerate(ids)]
            commits = []
            for r in range(4):
                rows = [effect(a, m, r - 1, "done") for a, m in enumerate(ids) if r > 0]
                rows += [effect(a, m, r, "started") for a, m in enumerate(ids) if r < 3]
                commits.append(rows)
            events = [(f"session-{a}", k + 1, args) for a in range(n_sessions)]
            rounds.append((tells, commits, events, [(m,) for m in ids]))
        t0 = time.perf_counter()
        for tells, commits, events, acks in rounds:
            _transaction(c, (_INSERT_MESSAGE, tells))
            for rows in commits[:3]:
                _transaction(c, (_UPSERT_EFFECT, rows))
            _transaction(
                c, (_UPSERT_EFFECT, commits[3]), (_INSERT_EVENT, events), (_DELETE_MESSAGE, acks)
            )
        dt = time.perf_counter() - t0
        done = c.execute("SELECT count(*) FROM effects WHERE status = 'done'").fetchone()[0]
        assert done == 3 * per * n_sessions, done
        c.close()
    finally:
        rm_scratch(d)
    return {"3.raw_step_sql": (per * n_sessions, dt)}


# ============================================================================ the run


# (target, numerator, denominator or None, required): issue #20's ratios of tether to the floor;
# then each missed target of the earlier issues, for tether and, beside it, for the floor and the
# SQL alone.
_WHO = {"tether": "tether", "floor": "floor", "lean": "floor, least schema", "sql": "the SQL alone"}
CLOSE_TO_THE_FLOOR: list[tuple[str, str, str | None, float | None]] = [
    ("#20 in-memory ask: tether >= 0.6x the floor", "1.tether_ask", "1.floor_ask", 0.6),
    ("#20 durable: tether >= 0.7x the floor", "2.tether_durable", "2.floor_durable", 0.7),
    ("#20 3-effect step: tether >= 0.6x the floor", "3.tether_sessions", "3.floor_effects", 0.6),
]
TARGETS: list[tuple[str, str, str | None, float | None]] = [
    *CLOSE_TO_THE_FLOOR,
    *(
        (f"#2 ask >= 0.6x asyncio: {_WHO[w]}", f"1.{w}_ask", "1.asyncio_ask", 0.6)
        for w in ("tether", "floor")
    ),
    *(
        (f"#2 ask >= 8x Pykka: {_WHO[w]}", f"1.{w}_ask", "1.pykka_ask", 8.0)
        for w in ("tether", "floor")
    ),
    *(
        (f"#2 durable >= 40,000 msg/s: {_WHO[w]}", key, None, 40_000.0)
        for w, key in (
            ("tether", "2.tether_durable"),
            ("floor", "2.floor_durable"),
            ("sql", "2.raw_message_sql"),
        )
    ),
    *(
        (f"#2 durable >= 0.3x raw executemany: {_WHO[w]}", key, "2.raw_executemany", 0.3)
        for w, key in (
            ("tether", "2.tether_durable"),
            ("floor", "2.floor_durable"),
            ("sql", "2.raw_message_sql"),
        )
    ),
    *(
        (f"#4 effects >= 50x DBOS, {dbos_label}: {_WHO[w]}", key, dbos, 50.0)
        for dbos, dbos_label in (
            ("3.dbos_best", "best variant"),
            ("3.dbos_default", "default setup"),
        )
        for w, key in (
            ("tether", "3.tether_sessions"),
            ("floor", "3.floor_effects"),
            ("lean", "3.floor_effects_lean"),
            ("sql", "3.raw_step_sql"),
        )
    ),
]


def run_all(sizes: Sizes) -> Bench:
    b = Bench(sizes)  # type: ignore[arg-type]  # Bench only reads .runs
    ask_group(b, sizes)
    durable_group(b, sizes)
    effects_group(b, sizes)
    return b


def ask_group(b: Bench, s: Sizes) -> None:
    """1.*: in-memory asks of the asyncio actor, the floor, tether and Pykka."""
    ask = [
        Scenario(
            [("1.asyncio_ask", "hand-written asyncio actor ask (Queue + future)", "rt/s")],
            lambda: asyncio.run(run.asyncio_ask(s.ask)),
        ),
        Scenario(
            [("1.floor_ask", "floor: asyncio actor + type check, encode/decode, mailbox", "rt/s")],
            lambda: asyncio.run(floor_ask(s.ask)),
        ),
        Scenario(
            [("1.tether_ask", 'tether ask, Runtime(":memory:"), sequential', "rt/s")],
            lambda: asyncio.run(run.tether_ask(s.ask)),
        ),
    ]
    if run.pykka is not None:
        ask.append(
            Scenario(
                [("1.pykka_ask", "Pykka ThreadingActor ask, sequential", "rt/s")],
                lambda: run.pykka_ask(s.ask_pykka),
            )
        )
    b.measure(*ask)
    if run.pykka is None:
        b.skip("1.pykka_ask", "Pykka ThreadingActor ask", "rt/s", "pykka is not installed")


def durable_group(b: Bench, s: Sizes) -> None:
    """2.*: the durable scenario of tether and the floor, its SQL alone, raw executemany."""
    actors, per = s.durable_actors, s.durable_per_actor
    b.measure(
        Scenario(
            [("2.raw_executemany", "raw aiosqlite WAL sync=FULL, executemany(100)", "rows/s")],
            lambda: asyncio.run(run.raw_executemany(s.raw_rows)),
        ),
        Scenario(
            [("2.raw_message_sql", "the SQL alone: same rows and commits, one thread", "msg/s")],
            lambda: raw_message_sql(actors, per),
        ),
        Scenario(
            [
                (
                    "2.floor_durable",
                    f"floor: {actors:,} actors x {per}, 1 event/msg, tether's schema, sync=FULL",
                    "msg/s",
                ),
                ("2.floor_tell_only", "floor: until the last tell returned", "msg/s"),
            ],
            lambda: asyncio.run(floor_durable(actors, per)),
        ),
        Scenario(
            [
                ("2.tether_durable", f"tether durable, {actors:,} actors x {per}", "msg/s"),
                ("2.tether_tell_only", "tether: until the last tell returned", "msg/s"),
            ],
            lambda: asyncio.run(run.tether_durable(actors, per)),
        ),
    )


def effects_group(b: Bench, s: Sizes) -> None:
    """3.*: the 3-effect step of tether, the floor (two schemas), its SQL alone, and DBOS."""
    effects = [
        Scenario(
            [("3.raw_step_sql", "the SQL alone: same rows and commits, one thread", "steps/s")],
            lambda: raw_step_sql(s.sessions, s.steps),
        ),
        Scenario(
            [("3.floor_effects", f"floor: {s.sessions} sessions, 3 effects + 1 event", "steps/s")],
            lambda: asyncio.run(floor_effects(s.sessions, s.steps)),
        ),
        Scenario(
            [("3.floor_effects_lean", "floor on the least schema (no secondary index)", "steps/s")],
            lambda: asyncio.run(floor_effects(s.sessions, s.steps, lean=True)),
        ),
        Scenario(
            [("3.tether_sessions", f"tether: {s.sessions} sessions, same steps", "steps/s")],
            lambda: eff._renamed(
                asyncio.run(eff.tether_sessions(s.sessions, s.steps)),
                "1.tether_sessions",
                "3.tether_sessions",
            ),
        ),
    ]
    dbos_sizes = eff.Sizes(
        runs=s.runs,
        sessions=s.sessions,
        steps=s.steps,
        latency_steps=0,
        dbos_seq=s.dbos_seq,
        dbos_concurrent=s.dbos_concurrent,
    )
    children: list[PipeChild] = []
    try:
        effects += eff.dbos_scenarios(b, dbos_sizes, children)
        b.measure(*effects)
    finally:
        for child in children:
            child.close()
    if not children:
        for key in ("3.dbos_best", "3.dbos_default"):
            b.skip(key, "DBOS 3-step workflow", "wf/s", "no DBOS figure (see above)")
    _add_dbos_best(b, "3.dbos_best", "DBOS best", "1.dbos_")
    _add_dbos_best(b, "3.dbos_default", "DBOS default setup, best", "_delete")


def _add_dbos_best(b: Bench, key: str, label: str, pick: str) -> None:
    """``key``: a copy of the DBOS figure (its key containing ``pick``) with the best median."""
    ok = [f for k, f in b.figures.items() if k.startswith("1.dbos_") and pick in k and f.ok]
    if not ok:
        return
    best = max(ok, key=lambda f: f.median)
    b.figures[key] = run.Figure(
        key, f"{label}: {best.label}", best.unit, list(best.samples), best.key
    )


def evaluate(b: Bench) -> list[dict[str, Any]]:
    return run.evaluate(b, TARGETS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, 1 run: checks that it runs")
    p.add_argument("--json", metavar="PATH", help="also write the raw per-run samples to PATH")
    p.add_argument("--runs", type=int, help="runs per figure (default: 5, or 1 with --quick)")
    args = p.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.runs:
        sizes = Sizes(**{**asdict(sizes), "runs": args.runs})
    meta = run.run_meta(args.quick, sizes.runs, "tether", "msgspec", "anyio", "pykka", "dbos")
    print(
        f"floor benchmarks, {meta['mode']} mode: median of {sizes.runs} run(s) after 1 warm-up. "
        f"Python {meta['python']}, SQLite {meta['sqlite']}, {meta['cpus']} CPUs",
        flush=True,
    )
    t0 = time.perf_counter()
    b = run_all(sizes)
    targets = evaluate(b)
    print()
    print(run.table(b, targets))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return run.finish(b, targets, meta, {"sizes": asdict(sizes)}, args.json)


if __name__ == "__main__":
    sys.exit(main())
