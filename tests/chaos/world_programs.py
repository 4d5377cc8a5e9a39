"""Child programs of the world chaos test (issue #7): the runtime the killer SIGKILLs, the client
that sends work, the person who decides approvals and resolves quarantined effects, and the
agents, actors and tools they all share.

Run from the repository root as ``python -m tests.chaos.world_programs PROGRAM DIR [ARGS]``;
every program reads ``DIR/config.json`` (written by :class:`tests.chaos.world.World`):

* ``setup DIR``: spawns every actor of the workload (``Runtime(serve=False)``) and exits.
* ``runtime DIR INCARNATION ARM``: serves the store until ``DIR/runtime.exit`` appears (or it is
  killed); ``WorldConfig.runtimes`` of them serve it at once, each its own process. Two feeder tasks tell ``Bump`` messages to the counters, each with a dedup key, and
  append every *acknowledged* one (``tell`` returned) to ``DIR/acks-runtime.jsonl`` (fsync'd)
  until ``DIR/feed.stop`` appears. ``ARM``: ``none``, or ``before:N`` / ``after:N``: the store
  SIGKILLs its own process right before (after) applying the N-th batch holding steps or
  effects: a kill in the middle of a group commit, exactly.
* ``client DIR``: ``Runtime(serve=False)``; tells each session its first task, then, until
  ``DIR/feed.stop``, ``Bump`` messages to random counters (and now and then the same message
  again, same dedup key) and more tasks; every acknowledged tell goes to ``DIR/acks-client.jsonl``.
* ``decider DIR``: ``Runtime(serve=False)``, a person at a desk until ``DIR/decider.stop``:
  approves (3 of 4) or rejects the pending approval requests, each after a seeded delay, and
  resolves quarantined effects after looking in the payments service's own file: ``mark_done``
  if the service recorded the charge, ``retry`` if it did not. Every decision it got an OK for
  goes to ``DIR/decisions.jsonl`` (fsync'd).

The workload:

* sessions (:class:`WorldAgent`): each task takes three tool calls decided by a scripted model
  (a function of the step number, so a restarted process continues exactly): ``refund_keyed``
  (``recovery="retry"``, through the payments service that honors keys), ``charge_once``
  (``recovery="quarantine"``, through the one that ignores keys: it is non-idempotent, and its
  ``ident`` names the (session, task) so a double execution shows as two rows), then
  ``big_refund`` (``requires_approval=True``, honoring service) and a final answer.
* counters (:class:`Counter`): persist one ``Bumped(mid)`` per message and forward a
  ``Seen(mid)`` to a sink in the same step (outbox, I2); sinks (:class:`Sink`) persist ``Noted``.

Every tool appends ``{"phase": "call"}`` before it talks to a service and ``{"phase": "return"}``
after, with its pid and key, to ``DIR/calls.jsonl``: the world's record of who called what.

Like ``tests.chaos.programs``, everything lives at module level and the ``__main__`` guard
re-imports this file under its real name, so stored class and tool paths import everywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sys
import time
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

import tether
from tests.chaos.programs import configure_logging, report
from tether.store.records import Batch, BatchResult
from tether.testing import ScriptedModel
from tether.testing.payments import PaymentsClient, refunds

LEASE_TTL = 1.0
POLL = 0.05
# Every delivery attempt cut short by a kill counts (I7): with hundreds of kills, a message in
# flight may see many. The default (5) would dead-letter it by design; the checker counts dead
# letters as lost, so the world runs with a bound no kill schedule reaches.
MAX_ATTEMPTS = 100_000
CALL_TIMEOUT = 30.0  # far above any real call: a timeout would be an ambiguity of its own
RETRY = tether.RetryPolicy(max_attempts=5, initial_delay=0.05, max_delay=0.5)
FEEDERS = 2
REJECT_ONE_IN = 4  # the decider rejects about one request in four

ACK_RUNTIME = "acks-runtime.jsonl"
ACK_CLIENT = "acks-client.jsonl"
DECISIONS = "decisions.jsonl"
CALLS = "calls.jsonl"
COMMIT_KILLS = "commit-kills.jsonl"
FEED_STOP = "feed.stop"
RUNTIME_EXIT = "runtime.exit"
DECIDER_STOP = "decider.stop"


class WorldConfig(msgspec.Struct, kw_only=True):
    """What every program of one world shares (``DIR/config.json``)."""

    db: str  # the tether store's URL (``tether.open_store``): a path is an SQLite file
    keyed_url: str  # the payments service that honors idempotency keys
    keyed_db: str
    loose_url: str  # the one that ignores them
    loose_db: str
    seed: int
    sessions: int
    counters: int
    sinks: int
    tasks: int  # tasks per session, at most
    client_pause: float = 0.02  # seconds between the client's sends
    feeder_pause: float = 0.03  # the runtime feeders'
    decide_delay: float = 0.6  # the decider waits up to this long before deciding a request
    # False: the client sends a session its next task only once the last one ended. True: at
    # any time, so a message may join a running task, even one whose step waits for a person
    # (which trips the determinism bug reported in test_world.py).
    interject: bool = False
    runtimes: int = 1  # runtime processes serving the store at once


def load_config(workdir: str | Path) -> WorldConfig:
    return msgspec.json.decode(Path(workdir, "config.json").read_bytes(), type=WorldConfig)


class _Where:
    """Set by each program from the config: where the tools find the services."""

    keyed_url = ""
    loose_url = ""
    calls = ""


WHERE = _Where()


def _configure(workdir: str, cfg: WorldConfig) -> None:
    WHERE.keyed_url, WHERE.loose_url = cfg.keyed_url, cfg.loose_url
    WHERE.calls = str(Path(workdir, CALLS))


def append_synced(path: str | Path, record: dict[str, Any]) -> None:
    """Append one JSON line with a single O_APPEND write, and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_lines(path: str | Path) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (none if it does not exist; a torn last line is skipped)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


# -- ids ------------------------------------------------------------------------------------


def session_id(i: int) -> str:
    return f"s{i}"


def counter_id(i: int) -> str:
    return f"c{i}"


def sink_id(i: int) -> str:
    return f"k{i}"


def sink_for(mid: str, sinks: int) -> str:
    return sink_id(int(hashlib.sha256(mid.encode()).hexdigest(), 16) % sinks)


def task_text(sid: str, j: int) -> str:
    return f"{sid}: request {j}"


def keyed_order(sid: str, task: int) -> str:
    return f"{sid}-t{task}-k"


def charge_ident(sid: str, task: int) -> str:
    return f"{sid}-t{task}-q"


def big_order(sid: str, task: int) -> str:
    return f"{sid}-t{task}-a"


# -- the tools ------------------------------------------------------------------------------


async def _pay(tool: str, url: str, order_id: str, cents: int, key: str) -> str:
    pid = os.getpid()
    line = {"tool": tool, "order_id": order_id, "key": key, "pid": pid}
    append_synced(WHERE.calls, {**line, "phase": "call"})
    answer = await PaymentsClient(url, timeout=CALL_TIMEOUT).refund(order_id, cents, key)
    append_synced(WHERE.calls, {**line, "phase": "return", "refund_id": answer["refund_id"]})
    return f"{order_id} {answer['refund_id']}"


@tether.tool(recovery="retry", timeout=CALL_TIMEOUT, retry=RETRY)
async def refund_keyed(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> str:
    """Refund an order through the service that honors keys: ambiguity is retried."""
    return await _pay("refund_keyed", WHERE.keyed_url, order_id, amount_cents, idempotency_key)


@tether.tool(recovery="quarantine", timeout=CALL_TIMEOUT, retry=RETRY)
async def charge_once(
    ident: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> str:
    """A non-idempotent charge (the service ignores keys): ambiguity is held for a person."""
    return await _pay("charge_once", WHERE.loose_url, ident, amount_cents, idempotency_key)


@tether.tool(recovery="retry", requires_approval=True, timeout=CALL_TIMEOUT, retry=RETRY)
async def big_refund(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> str:
    """A large refund: a person approves it first (the service honors keys)."""
    return await _pay("big_refund", WHERE.keyed_url, order_id, amount_cents, idempotency_key)


def charge_result(ident: str, refund_id: str) -> str:
    """What ``charge_once`` returns, for a person recording a charge found in the service."""
    return f"{ident} {refund_id}"


# -- the agent ------------------------------------------------------------------------------


def world_script(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """Step 1 refunds, step 2 charges, step 3 asks for a big refund, step 4 answers: a function
    of the request (session, task, step), so a restarted process continues where it was."""
    sid, task = request.session_id, request.task
    cents = 100 + task
    if request.step == 1:
        args: dict[str, Any] = {"order_id": keyed_order(sid, task), "amount_cents": cents}
        return tether.ToolCall(tool="refund_keyed", args=args)
    if request.step == 2:
        args = {"ident": charge_ident(sid, task), "amount_cents": cents}
        return tether.ToolCall(tool="charge_once", args=args)
    if request.step == 3:
        args = {"order_id": big_order(sid, task), "amount_cents": 50_000 + task}
        return tether.ToolCall(tool="big_refund", args=args)
    seen = [r.result or r.error or "" for r in request.bundle.tool_results]
    return tether.FinalAnswer(text=f"task {task} done: {len(seen)} tool results")


class WorldAgent(tether.AgentSession):
    tools = [refund_keyed, charge_once, big_refund]
    model = ScriptedModel(world_script)
    context_budget = 10_000_000  # keep every tool result: the answer counts them
    max_steps = 10


# -- the bug the world found (see test_world.py) ----------------------------------------------


@tether.tool(recovery="retry", requires_approval=True)
async def approved_refund(order_id: str, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    """A refund that waits for a person (no service: the test only needs the approval)."""
    return f"refunded {order_id}"


def interjection_script(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    if request.step == 1:
        return tether.ToolCall(tool="approved_refund", args={"order_id": "o-1"})
    return tether.FinalAnswer(text="refunded o-1")


class InterjectedAgent(tether.AgentSession):
    """One approval-gated call, then an answer: a user message joining the task while the call
    waits for its approval changes the replayed step's model request."""

    tools = [approved_refund]
    model = ScriptedModel(interjection_script)


# -- plain actors ---------------------------------------------------------------------------


class Bump(tether.Message):
    mid: str


class Bumped(tether.Event):
    mid: str


class CounterState(msgspec.Struct):
    count: int = 0


class Counter(tether.Actor[CounterState]):
    """One event per message; forwards ``Seen`` to a sink in the same step (I2)."""

    initial_state = CounterState()
    sinks = 1

    def __init__(self, sinks: int) -> None:
        self.sinks = sinks

    def apply(self, state: CounterState, event: Bumped) -> CounterState:
        return CounterState(count=state.count + 1)

    async def handle(self, msg: Bump) -> None:
        self.persist(Bumped(mid=msg.mid))
        await self.ref(sink_for(msg.mid, self.sinks)).tell(Seen(mid=msg.mid, by=self.id))


class Seen(tether.Message):
    mid: str
    by: str


class Noted(tether.Event):
    mid: str
    by: str


class Sink(tether.Actor[CounterState]):
    initial_state = CounterState()

    def apply(self, state: CounterState, event: Noted) -> CounterState:
        return CounterState(count=state.count + 1)

    async def handle(self, msg: Seen) -> None:
        self.persist(Noted(mid=msg.mid, by=msg.by))


# -- the store that dies in a group commit ---------------------------------------------------


class CommitKill:
    """Stands in for a store's ``apply``: SIGKILLs its own process right before (``before``)
    or right after (``after``) applying the ``n``-th batch that holds steps or effect writes.
    Any backend: it wraps the one method every write goes through (the committer calls
    ``store.apply``; no built-in store that waits on I/O declares ``immediate`` writes)."""

    def __init__(
        self, apply: Callable[[Batch], Awaitable[BatchResult]], *, where: str, n: int, log: str
    ) -> None:
        self.inner, self.where, self.n, self.log = apply, where, n, log
        self.seen = 0

    def _die(self, batch: Batch) -> None:
        append_synced(
            self.log,
            {
                "pid": os.getpid(),
                "where": self.where,
                "batch": self.seen,
                "steps": len(batch.steps),
                "effects": len(batch.effects),
                "messages": len(batch.messages),
                "parks": len(batch.parks),
            },
        )
        os.kill(os.getpid(), signal.SIGKILL)

    async def __call__(self, batch: Batch) -> BatchResult:
        counted = bool(batch.steps or batch.effects)
        if counted:
            self.seen += 1
        if counted and self.seen == self.n and self.where == "before":
            self._die(batch)
        result = await self.inner(batch)
        if counted and self.seen == self.n and self.where == "after":
            self._die(batch)
        return result


def arm_commit_kill(store: tether.Store, arm: str, log: str) -> None:
    """``arm``: ``before:N`` or ``after:N`` (see :class:`CommitKill`)."""
    where, _, n = arm.partition(":")
    if where not in ("before", "after") or not n.isdigit():
        raise SystemExit(f"arm is none, before:N or after:N, not {arm!r}")
    if store.immediate is not None:
        raise SystemExit(f"{type(store).__name__} writes without apply: it cannot be armed")
    # An instance attribute shadows the method for this one store (setattr: mypy forbids
    # assigning to a method, which is the point here).
    setattr(store, "apply", CommitKill(store.apply, where=where, n=int(n), log=log))  # noqa: B010


# -- the programs ---------------------------------------------------------------------------


def _runtime(cfg: WorldConfig, **kw: Any) -> tether.Runtime:
    opts: dict[str, Any] = {
        "lease_ttl": LEASE_TTL,
        "poll_interval": POLL,
        "max_attempts": MAX_ATTEMPTS,
        **kw,
    }
    return tether.Runtime(cfg.db, **opts)


async def setup_program(workdir: str) -> None:
    cfg = load_config(workdir)
    _configure(workdir, cfg)
    async with _runtime(cfg, serve=False) as rt:
        for i in range(cfg.sessions):
            await rt.spawn(WorldAgent, session_id(i), goal="refund, charge, ask, answer")
        for i in range(cfg.counters):
            await rt.spawn(Counter, counter_id(i), sinks=cfg.sinks)
        for i in range(cfg.sinks):
            await rt.spawn(Sink, sink_id(i))
    report("setup done")


async def _until(path: Path) -> None:
    while not await anyio.Path(path).exists():
        await anyio.sleep(0.05)


async def runtime_program(workdir: str, incarnation: str, arm: str) -> None:
    cfg = load_config(workdir)
    _configure(workdir, cfg)
    d = Path(workdir)
    store = tether.open_store(cfg.db)
    if arm != "none":
        arm_commit_kill(store, arm, str(d / COMMIT_KILLS))
    rng = random.Random(f"{cfg.seed}/runtime/{incarnation}")
    acks = d / ACK_RUNTIME

    async def feeder(k: int) -> None:
        n = 0
        while not (d / FEED_STOP).exists():
            n += 1
            mid = f"r{incarnation}.{k}.{n}"
            target = counter_id(rng.randrange(cfg.counters))
            await rt.ref(target).tell(Bump(mid=mid), dedup_key=mid)
            append_synced(acks, {"mid": mid, "to": target})
            # The world's feed rate is the same however many runtimes feed it.
            await anyio.sleep(rng.uniform(0, 2 * cfg.feeder_pause * cfg.runtimes))

    async with _runtime(cfg, store=store, passivate_after=None) as rt:
        report(f"ready pid={os.getpid()}")
        async with anyio.create_task_group() as tg:
            for k in range(FEEDERS):
                tg.start_soon(feeder, k)
            await _until(d / RUNTIME_EXIT)
            tg.cancel_scope.cancel()
    report("exited")


class _Sessions:
    """The client's view of its sessions, from their journals: tasks started and ended."""

    def __init__(self, rt: tether.Runtime) -> None:
        from tether.actors.actor import actor_spec
        from tether.actors.session import TaskEnded, TaskStarted

        self.rt = rt
        self.started_type, self.ended_type = TaskStarted, TaskEnded
        types = actor_spec(WorldAgent).event_types
        self.decoder = msgspec.msgpack.Decoder(typing.Union[types])  # noqa: UP007
        self.seq: dict[str, int] = {}
        self.started: dict[str, int] = {}
        self.ended: dict[str, int] = {}

    async def idle(self, sid: str, sent: int) -> bool:
        """Every task sent to ``sid`` has started and ended."""
        rows = await self.rt.store.load_journal(sid, self.seq.get(sid, 0), 10_000)
        for row in rows:
            ev = self.decoder.decode(row.payload)
            if isinstance(ev, self.started_type):
                self.started[sid] = self.started.get(sid, 0) + 1
            elif isinstance(ev, self.ended_type):
                self.ended[sid] = self.ended.get(sid, 0) + 1
        if rows:
            self.seq[sid] = rows[-1].seq
        return self.started.get(sid, 0) == self.ended.get(sid, 0) == sent


async def client_program(workdir: str) -> None:
    cfg = load_config(workdir)
    d = Path(workdir)
    rng = random.Random(f"{cfg.seed}/client")
    acks = d / ACK_CLIENT
    sent_tasks = dict.fromkeys(range(cfg.sessions), 0)
    acked: list[tuple[str, str]] = []
    async with _runtime(cfg, serve=False) as rt:
        sessions = _Sessions(rt)

        async def task(i: int) -> None:
            sid, j = session_id(i), sent_tasks[i]
            text = task_text(sid, j)
            await rt.ref(sid).tell(tether.UserMessage(text), dedup_key=f"task/{sid}/{j}")
            sent_tasks[i] = j + 1
            append_synced(acks, {"kind": "task", "to": sid, "text": text})

        for i in range(cfg.sessions):
            await task(i)
        report("tasks sent")
        n = 0
        while not (d / FEED_STOP).exists():
            roll = rng.random()
            try:
                if roll < 0.04:
                    open_ = [i for i, j in sent_tasks.items() if j < cfg.tasks]
                    if open_:
                        i = rng.choice(open_)
                        if cfg.interject or await sessions.idle(session_id(i), sent_tasks[i]):
                            await task(i)
                elif roll < 0.10 and acked:
                    mid, target = rng.choice(acked)  # the same message again: a no-op
                    await rt.ref(target).tell(Bump(mid=mid), dedup_key=mid)
                    append_synced(acks, {"kind": "bump", "mid": mid, "to": target, "again": True})
                else:
                    n += 1
                    mid = f"c.{n}"
                    target = counter_id(rng.randrange(cfg.counters))
                    await rt.ref(target).tell(Bump(mid=mid), dedup_key=mid)
                    acked.append((mid, target))
                    append_synced(acks, {"kind": "bump", "mid": mid, "to": target})
            except tether.TetherError as exc:  # not acknowledged: nothing to check
                report(f"send failed: {exc!r}")
            await anyio.sleep(rng.uniform(0, 2 * cfg.client_pause))
    report("client done")


async def decider_program(workdir: str) -> None:
    cfg = load_config(workdir)
    d = Path(workdir)
    log = d / DECISIONS
    rng = random.Random(f"{cfg.seed}/decider")
    due: dict[str, float] = {}
    async with _runtime(cfg, serve=False) as rt:
        while not (d / DECIDER_STOP).exists():
            now = time.monotonic()
            for req in await rt.approvals.pending():
                rid = req.request_id
                when = due.setdefault(rid, now + rng.uniform(0, cfg.decide_delay))
                if now < when:
                    continue
                reject = int(hashlib.sha256(rid.encode()).hexdigest(), 16) % REJECT_ONE_IN == 0
                decision: tether.Approve | tether.Reject = (
                    tether.Reject(by="decider", reason="too large today")
                    if reject
                    else tether.Approve(by="decider")
                )
                try:
                    done = await rt.approvals.decide(rid, decision)
                except tether.TetherError as exc:
                    report(f"decide refused {rid}: {exc!r}")
                    continue
                append_synced(
                    log,
                    {
                        "kind": "approval",
                        "request_id": rid,
                        "session": req.session_id,
                        "order_id": req.args.get("order_id"),
                        "decision": "reject" if reject else "approve",
                        "status": done.status,
                    },
                )
            for held in await rt.quarantine.list():
                ident = str(held.args.get("ident", ""))
                # A person checking: the service's own file says whether the charge happened.
                found = [r for r in refunds(cfg.loose_db) if r["order_id"] == ident]
                try:
                    if found:
                        result = charge_result(ident, found[0]["refund_id"])
                        await rt.quarantine.mark_done(held.key, result, by="decider")
                        how = "mark_done"
                    else:
                        await rt.quarantine.retry(held.key, by="decider")
                        how = "retry"
                except tether.TetherError as exc:
                    report(f"resolve refused {held.key}: {exc!r}")
                    continue
                append_synced(
                    log,
                    {
                        "kind": "quarantine",
                        "key": held.key,
                        "session": held.actor_id,
                        "tool": held.tool,
                        "ident": ident,
                        "how": how,
                        "rows": len(found),
                        "reason": held.reason,
                    },
                )
            await anyio.sleep(0.05)
    report("decider done")


PROGRAMS: dict[str, Callable[..., Awaitable[None]]] = {
    "setup": setup_program,
    "runtime": runtime_program,
    "client": client_program,
    "decider": decider_program,
}


def main(argv: list[str]) -> None:
    configure_logging()
    program, *args = argv
    anyio.run(PROGRAMS[program], *args)


if __name__ == "__main__":
    from tests.chaos import world_programs  # the same code, under the name recovery imports

    world_programs.main(sys.argv[1:])
