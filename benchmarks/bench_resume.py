"""Resume at scale (issue #20): 10,000 sessions come back after a SIGKILL, each finishing its task.

    python benchmarks/bench_resume.py                  # full run: median of 3 runs (+1 warm-up)
    python benchmarks/bench_resume.py --quick          # smoke mode for CI: 100 sessions, 1 run
    python benchmarks/bench_resume.py --profile        # also one profiled run: where the time goes
    python benchmarks/bench_resume.py --json out.json  # also write the raw per-run samples
    python benchmarks/bench_resume.py --sessions 2000  # another size

**The world before the crash.** A child process opens a runtime on a fresh file and spawns
``--sessions`` real ``AgentSession``s (a model and a ``lookup`` tool with a breaker, the
default loop policy). Each gets a 100-event journal of real session events: 10 finished tasks,
each a user message, two tool calls and an answer (``TaskStarted``, 3 x ``StepBegun`` /
``ModelDecided``, 2 x ``ToolResult``, ``TaskEnded``), written by one ``Backfill`` message per
session rather than by running 100,000 model steps: the fold, the state and the rows are those
of a session that did the work, and building them takes seconds instead of an hour. Then each
session is asked one more user message, which the child delivers and holds unprocessed (its
handler waits before doing anything); once every session holds one, the parent SIGKILLs the
child. Why real sessions, not actors shaped like them: resuming a session is more than folding
its journal (its loop guard starts on its first tool call, its model's and tool's breakers are
looked up, its step runs through the ledger), and that is the work being measured.

**What is timed.** Each run copies the killed child's file (database and WAL) to a fresh place
and starts a new child process there, which opens a ``Runtime`` on it: from that moment until
every session has processed its held message, i.e. finished the task it asked for (a model
call, a ``lookup`` call, a model call, three steps). Completion is read from the store by a
thread that polls the ``replies`` table every 10 ms on its own connection: a session is done
when the reply to its message (its task's answer) is committed. Reported: the total, sessions
resumed per second, and when sessions finish, as fractions of the total (first, p10, p50, p90,
p99): a resume that lets no session finish before it has activated all of them finishes the
first one late.

**Checked** after every run, on the closed file: each session's journal is the 100 events plus
exactly one new task (number 11, so the fold saw the 10 before it), finished with the expected
answer; one reply per held message, that answer; per session 2 model and 1 ``lookup`` ledger
rows, each done at attempt 1; mailbox and dead letters empty.

Targets (medians, never asserted): >= 2,000 sessions resumed per second; the median session
done by half the total (p50 <= 0.5). ``--profile`` adds one run under cProfile (the event loop's
thread) and with the store's reader and writer threads timed: their busy time (the calls run
on them) and CPU time, against the run's wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import os
import shutil
import signal
import sqlite3
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run
from children import PipeChild, serve, serve_async
from run import Bench, Sample, Scenario, rm_scratch, scratch_dir

import tether
from tether.actors.context import ToolCallRecord
from tether.actors.session import (
    CancelTask,
    Continue,
    ModelDecided,
    SessionEvent,
    StepBegun,
    TaskEnded,
    TaskStarted,
    ToolResult,
)

ASK_TIMEOUT = 3600.0  # the held asks never return: the process is killed first
EVENTS = 100  # journal events per session before the crash: 10 tasks of 10 events
TASKS = EVENTS // 10
POLL = 0.01  # seconds between two looks at the replies table


@dataclass(frozen=True)
class Sizes:
    runs: int
    sessions: int
    concurrency: int  # sessions built at a time


# 3 runs, not 5: on the 2-vCPU VM one run resumes 10,000 sessions in minutes.
FULL = Sizes(runs=3, sessions=10_000, concurrency=200)
QUICK = Sizes(runs=1, sessions=100, concurrency=50)


# ----------------------------------------------------------------------------- the session


@tether.tool(recovery="retry", breaker="database")
async def lookup(order: str) -> str:
    return f"order {order} shipped"


def answer(session_id: str) -> str:
    return f"answer:order {session_id} shipped"


class LookupModel:
    """Calls ``lookup`` for the session's order, then answers with what it returned. Decided
    from the request alone (even decisions: the call; odd: the answer)."""

    async def decide(self, request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
        if request.decisions % 2 == 0:
            return tether.ToolCall(
                tool="lookup", args={"order": request.session_id}, thought="look the order up"
            )
        last = request.bundle.history[-1]
        return tether.FinalAnswer(text=f"answer:{getattr(last, 'result', None)}")


class Backfill(tether.Message):
    """Journal ``EVENTS`` events of finished tasks (the build child's only use of it)."""


class Hold:
    """In the build child only: each session's next ``UserMessage`` waits here, unprocessed,
    until the process is killed; ``arrived`` counts them."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.arrived = 0
        self.all_arrived = asyncio.Event()

    def arrive(self) -> None:
        self.arrived += 1
        if self.arrived == self.expected:
            self.all_arrived.set()


HOLD: Hold | None = None


class ResumeSession(tether.AgentSession):
    tools = (lookup,)
    model = LookupModel()

    async def handle(  # type: ignore[override]
        self, msg: tether.UserMessage | CancelTask | Continue | tether.GetSessionInfo | Backfill
    ) -> str | tether.SessionInfo | None:
        if type(msg) is Backfill:
            for event in backfill(self.id):
                self.persist(event)
            return None
        if HOLD is not None and type(msg) is tether.UserMessage:
            HOLD.arrive()
            await anyio.sleep_forever()  # killed here
        return await super().handle(msg)


def backfill(session_id: str) -> list[SessionEvent]:
    """``TASKS`` finished tasks, 10 events each, as a session writes them: a user message, two
    tool calls, an answer. The texts are of the size a real conversation's are."""
    events: list[SessionEvent] = []
    for task in range(1, TASKS + 1):
        text = f"Task {task} for {session_id}: where are my orders {task}a and {task}b, please?"
        events.append(TaskStarted(task=task, text=text, reply_to=""))
        step = 0
        for order in (f"{task}a", f"{task}b"):
            step += 1
            events.append(StepBegun(task=task, step=step, belief="", frontier="decide"))
            call = tether.ToolCall(
                tool="lookup", args={"order": order}, thought=f"I should look {order} up."
            )
            events.append(ModelDecided(decision=call))
            record = ToolCallRecord(
                tool="lookup", args={"order": order}, result=f"order {order} shipped on day {task}"
            )
            events.append(ToolResult(record=record))
        events.append(StepBegun(task=task, step=step + 1, belief="", frontier="decide"))
        reply = f"Both orders, {task}a and {task}b, have shipped."
        events.append(ModelDecided(decision=tether.FinalAnswer(text=reply)))
        events.append(TaskEnded(task=task, outcome="finished", answer=reply))
    if len(events) != EVENTS:
        raise AssertionError(f"backfill makes {len(events)} events, not {EVENTS}")
    return events


def session_id(i: int) -> str:
    return f"s{i:05d}"


# ----------------------------------------------------------------------------- the world


def build_child(path: str, sessions: int, concurrency: int) -> None:
    """The crashed process: build the sessions, hold one message each, say so, and wait for
    the SIGKILL."""
    global HOLD
    HOLD = Hold(sessions)
    hold = HOLD
    asks: list[asyncio.Task[Any]] = []  # kept referenced until the kill

    async def ready() -> dict[str, Any]:
        rt = tether.Runtime(path)
        await rt.__aenter__()  # never closed: this process is killed
        t0 = time.perf_counter()
        todo = iter(range(sessions))

        async def builder() -> None:
            for i in todo:
                ref = await rt.spawn(ResumeSession, session_id(i), goal="answer about orders")
                await ref.ask(Backfill(), timeout=ASK_TIMEOUT)

        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(builder)
        built = time.perf_counter() - t0
        loop = asyncio.get_running_loop()
        for i in range(sessions):
            message = tether.UserMessage(f"where is {i}?")
            asks.append(loop.create_task(rt.ref(session_id(i)).ask(message, timeout=ASK_TIMEOUT)))
        with anyio.fail_after(600):
            await hold.all_arrived.wait()
        return {"built_seconds": built, "held": hold.arrived}

    async def handle(_cmd: dict[str, Any]) -> dict[str, Any]:
        return {"error": "the build child takes no command: kill it"}

    asyncio.run(serve_async(ready, handle))


def build(dest: Path, sizes: Sizes) -> dict[str, Any]:
    """The world before the crash, in ``dest`` (database and WAL as the SIGKILL left them)."""
    path = dest / "sessions.db"
    t0 = time.perf_counter()
    child = PipeChild(
        "build child",
        [__file__, "--build", str(path), str(sizes.sessions), str(sizes.concurrency)],
        ready_timeout=3600.0,
    )
    try:
        os.kill(child.proc.pid, signal.SIGKILL)
        child.proc.wait()
    finally:
        child.close()
    info = dict(child.ready)
    info["seconds"] = time.perf_counter() - t0
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
        held = c.execute(
            "SELECT count(*), min(attempts), max(attempts) FROM mailbox WHERE type = 'UserMessage'"
        ).fetchone()
    if held[0] != sizes.sessions:
        raise AssertionError(
            f"{held[0]} held messages in the killed child's file, not {sizes.sessions}"
        )
    info["db_mib"] = sum(p.stat().st_size for p in dest.iterdir()) / 2**20
    return info


def copy_world(src: Path) -> Path:
    """A fresh copy of the killed child's files (the shared-memory index is rebuilt on open)."""
    d = scratch_dir("resume-run")
    for p in src.iterdir():
        if not p.name.endswith("-shm"):
            shutil.copy2(p, d / p.name)
    return d / "sessions.db"


# ----------------------------------------------------------------------------- the resume


class ReplyPoller:
    """A thread watching the replies table for the answers to ``held`` (msg id -> session)
    on its own read-only connection: when each one was first seen."""

    def __init__(self, path: Path, held: dict[str, str]) -> None:
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        self.held = held
        self.seen: dict[str, float] = {}
        self.after = self.conn.execute("SELECT coalesce(max(rowid), 0) FROM replies").fetchone()[0]
        self.stop = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="reply-poller", daemon=True)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                rows = self.conn.execute(
                    "SELECT rowid, msg_id FROM replies WHERE rowid > ?", (self.after,)
                ).fetchall()
                now = time.perf_counter()
                for rowid, msg_id in rows:
                    self.after = max(self.after, rowid)
                    if msg_id in self.held and msg_id not in self.seen:
                        self.seen[msg_id] = now
                if len(self.seen) == len(self.held):
                    return
                time.sleep(POLL)
        finally:
            self.done.set()


class StoreThreads:
    """The store's connection threads, timed: wall time of every call run on them (their busy
    time) and their CPU time. Wraps ``SqliteStore``'s ``Connection.call``, the one way onto them."""

    def __init__(self) -> None:
        from tether.store.sqlite import conn as sqlite_conn

        self.busy: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.threads: dict[str, threading.Thread] = {}
        original = sqlite_conn.Connection.call
        busy, calls, threads = self.busy, self.calls, self.threads

        async def call(conn: Any, fn: Any, *args: Any) -> Any:
            def timed() -> Any:
                me = threading.current_thread()
                name = me.name.rsplit("_", 1)[0]
                threads[name] = me
                t = time.perf_counter()
                try:
                    return fn(*args)
                finally:
                    busy[name] += time.perf_counter() - t
                    calls[name] += 1

            return await original(conn, timed)

        sqlite_conn.Connection.call = call  # type: ignore[method-assign]

    def cpu(self) -> dict[str, float]:
        out = {}
        for name, t in self.threads.items():
            if t.is_alive() and t.ident is not None:
                with contextlib.suppress(OSError):
                    out[name] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        return out


def resume_child(path: str, profile: bool) -> None:
    def ready() -> dict[str, Any]:
        return asyncio.run(resume(Path(path), profile))

    serve(ready, lambda _cmd: {"error": "the resume child takes no command"})


async def resume(path: Path, profile: bool) -> dict[str, Any]:
    """Open a runtime on the killed child's file; time until every held message's reply is
    committed; close; check the file."""
    with contextlib.closing(sqlite3.connect(path)) as c:
        held = dict(c.execute("SELECT msg_id, actor_id FROM mailbox WHERE type = 'UserMessage'"))
    poller = ReplyPoller(path, held)
    threads = StoreThreads() if profile else None
    prof = cProfile.Profile() if profile else None
    cpu0 = time.process_time()
    poller.thread.start()
    t0 = time.perf_counter()
    if prof is not None:
        prof.enable()
    rt = tether.Runtime(path)
    await rt.__aenter__()
    try:
        with anyio.fail_after(1800):
            while not poller.done.is_set():  # noqa: ASYNC110 - the poller is a thread
                await anyio.sleep(POLL)
        total = time.perf_counter() - t0
        if prof is not None:
            prof.disable()
        cpu = time.process_time() - cpu0
        store_cpu = threads.cpu() if threads is not None else {}
    finally:
        poller.stop.set()
        await rt.aclose()
    poller.thread.join()
    poller.conn.close()
    if len(poller.seen) != len(held):
        raise AssertionError(f"only {len(poller.seen)} of {len(held)} sessions finished")
    done = sorted(t - t0 for t in poller.seen.values())
    out: dict[str, Any] = {
        "sessions": len(held),
        "total": total,
        "cpu": cpu,
        "fractions": {name: percentile(done, q) / total for name, q in FRACTIONS},
        "problems": check(path, held),
    }
    if prof is not None and threads is not None:
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            run.print_profile(prof, 25)
        out["profile"] = text.getvalue()
        out["store_threads"] = {
            name: {
                "busy": threads.busy[name],
                "calls": threads.calls[name],
                "cpu": store_cpu.get(name),
            }
            for name in threads.busy
        }
    return out


FRACTIONS = (("first", 0.0), ("p10", 0.1), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def percentile(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


_event = msgspec.msgpack.Decoder(SessionEvent).decode
_result = msgspec.msgpack.Decoder(tether.TaskResult).decode  # a session's answer to its ask


def check(path: Path, held: dict[str, str]) -> list[str]:
    """The closed file after a resume (see the module docstring); the problems found."""
    problems: list[str] = []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
        sessions = set(held.values())
        counts = dict(c.execute("SELECT actor_id, count(*) FROM journal GROUP BY actor_id"))
        new: dict[str, list[SessionEvent]] = {}
        for actor_id, payload in c.execute(
            "SELECT actor_id, payload FROM journal WHERE seq > ? ORDER BY actor_id, seq", (EVENTS,)
        ):
            new.setdefault(actor_id, []).append(_event(payload))
        replies = dict(
            c.execute(
                "SELECT msg_id, payload FROM replies WHERE msg_id IN (SELECT value FROM json_each(?))",
                (msgspec.json.encode(list(held)).decode(),),
            )
        )
        ledger = Counter(
            c.execute(
                "SELECT actor_id, tool, status, attempts FROM effects WHERE actor_id GLOB 's[0-9]*'"
            ).fetchall()
        )
        leftover = c.execute("SELECT count(*) FROM mailbox").fetchone()[0]
        dead = c.execute("SELECT count(*) FROM dead_letters").fetchone()[0]
    bad: list[str] = []
    for sid in sorted(sessions):
        events = new.get(sid, [])
        started = [e for e in events if isinstance(e, TaskStarted)]
        ended = [e for e in events if isinstance(e, TaskEnded)]
        ok = (
            counts.get(sid, 0) == EVENTS + len(events)
            and [e.task for e in started] == [TASKS + 1]
            and [(e.task, e.outcome, e.answer) for e in ended]
            == [(TASKS + 1, "finished", answer(sid))]
            and ledger[(sid, "model", "done", 1)] == 2
            and ledger[(sid, "lookup", "done", 1)] == 1
        )
        if not ok:
            bad.append(
                f"{sid}: {counts.get(sid, 0)} events, new {[type(e).__name__ for e in events]}"
            )
    if bad:
        problems += [f"{len(bad)} sessions did not finish one new task as expected", *bad[:3]]
    wrong = [
        m
        for m, sid in held.items()
        if m not in replies or _result(replies[m]).answer != answer(sid)
    ]
    if wrong:
        problems.append(f"{len(wrong)} held messages without their answer, e.g. {wrong[:3]}")
    if sum(ledger.values()) != 3 * len(sessions):
        problems.append(f"{sum(ledger.values())} session ledger rows, expected {3 * len(sessions)}")
    if leftover or dead:
        problems.append(f"mailbox {leftover}, dead letters {dead}: expected 0 and 0")
    return problems


# ----------------------------------------------------------------------------- the run


class ResumeRuns:
    """Each call: a fresh copy of the world, a fresh child that resumes it."""

    def __init__(self, world: Path, profile: bool = False) -> None:
        self.world = world
        self.profile = profile
        self.results: list[dict[str, Any]] = []

    def __call__(self) -> Sample:
        path = copy_world(self.world)
        try:
            argv = [__file__, "--resume", str(path), *(["--profile"] if self.profile else [])]
            child = PipeChild("resume child", argv, ready_timeout=3600.0)
            child.close()
        finally:
            rm_scratch(path.parent)
        res = dict(child.ready)
        if res["problems"]:
            raise AssertionError("; ".join(res["problems"]))
        self.results.append(res)
        return {"1.tether_resume": (res["sessions"], res["total"])}


def run_all(sizes: Sizes, profile: bool) -> tuple[Bench, dict[str, Any]]:
    b = Bench(sizes)  # type: ignore[arg-type]  # Bench only reads .runs
    world = scratch_dir("resume-world")
    try:
        info = build(world, sizes)
        print(
            f"world built: {sizes.sessions:,} sessions x {EVENTS} events, one message held "
            f"each, SIGKILLed; {info['built_seconds']:.0f} s to build, {info['db_mib']:.0f} MiB",
            flush=True,
        )
        runs = ResumeRuns(world)
        label = f"tether resume after SIGKILL, {sizes.sessions:,} sessions x {EVENTS} events"
        b.measure(Scenario([("1.tether_resume", label, "sessions/s")], runs))
        timed = runs.results[1:]  # not the warm-up
        if timed and b.figures["1.tether_resume"].ok:
            cpu = statistics.median(r["cpu"] / r["total"] for r in timed)
            b.figures["1.tether_resume"].note = (
                f"total {statistics.median(r['total'] for r in timed):.2f} s (median); process "
                f"CPU {100 * cpu:.0f}% of one core over it"
            )
            b.extra["fractions"] = {
                name: [r["fractions"][name] for r in timed] for name, _ in FRACTIONS
            }
        profiled = None
        if profile:
            print("\nprofiled run (after the timed ones):", flush=True)
            runs = ResumeRuns(world, profile=True)
            runs()
            profiled = runs.results[0]
    finally:
        rm_scratch(world)
    return b, {"build": info, "profiled": profiled}


TARGETS: list[tuple[str, str, str | None, float | None]] = [
    ("#20 resume >= 2,000 sessions/s", "1.tether_resume", None, 2_000.0),
]


def evaluate(b: Bench) -> list[dict[str, Any]]:
    p50s = b.extra.get("fractions", {}).get("p50")
    p50 = statistics.median(p50s) if p50s else None
    return [
        *run.evaluate(b, TARGETS),
        run.at_most(
            "#20 resume: the median session done by half the total (p50 <= 0.5)",
            p50,
            0.5,
            f"p50 at {p50 or 0:.2f} of the total",
            "<= 0.5",
        ),
    ]


def table(b: Bench, rows: list[dict[str, Any]]) -> str:
    lines = run.figure_rows(b)
    fractions = b.extra.get("fractions")
    if fractions:
        lines += [
            "",
            "| sessions done by (fraction of the total) | min | **median** | max |",
            "|---|---:|---:|---:|",
        ]
        for name, values in fractions.items():
            lo, mid, hi = min(values), statistics.median(values), max(values)
            lines.append(f"| {name} | {lo:.2f} | **{mid:.2f}** | {hi:.2f} |")
    return "\n".join([*lines, "", *run.target_rows(b, rows)])


def show_profile(res: dict[str, Any]) -> None:
    total = res["total"]
    print(
        f"\nresumed {res['sessions']:,} sessions in {total:.2f} s; process CPU {res['cpu']:.2f} s"
    )
    print("\nthe store's threads (calls run on them, wall time; CPU time of the thread):")
    for name, t in sorted(res["store_threads"].items()):
        cpu = "?" if t["cpu"] is None else f"{t['cpu']:.2f} s CPU"
        print(f"  {name:<24} busy {t['busy']:.2f} s = {100 * t['busy'] / total:.0f}% of the run, "
              f"{t['calls']:,} calls, {cpu}")  # fmt: skip
    print("\nthe event loop's thread under cProfile (the store's work shows as waiting):")
    print(res["profile"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    run.add_house_options(p, runs_help="runs (default: 3, or 1 with --quick)")
    p.add_argument("--sessions", type=int, help="sessions in the world (default 10,000)")
    p.add_argument("--profile", action="store_true", help="also one profiled run")
    p.add_argument("--build", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--resume", metavar="PATH", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.build:
        path, sessions, concurrency = args.build
        build_child(path, int(sessions), int(concurrency))
        return 0
    if args.resume:
        resume_child(args.resume, args.profile)
        return 0
    sizes = run.chosen_sizes(p, args, FULL, QUICK)
    if args.sessions is not None:
        if args.sessions < 1:
            p.error("--sessions must be at least 1")
        sizes = replace(sizes, sessions=args.sessions)
    meta = run.run_meta(args.quick, sizes.runs, "tether", "msgspec", "anyio")
    run.announce("tether resume", meta)
    t0 = time.perf_counter()
    with run.tidy_data_dir():
        b, extra = run_all(sizes, args.profile)
    rows = evaluate(b)
    print()
    print(table(b, rows))
    if extra["profiled"] is not None:
        show_profile(extra["profiled"])
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return run.finish(b, rows, meta, {"sizes": asdict(sizes), **extra}, args.json)


if __name__ == "__main__":
    sys.exit(main())
