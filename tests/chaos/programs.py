"""Child programs for the crash tests, and the actors they run.

Run as ``python -m tests.chaos.programs <scenario> <args...>`` with the repository root as the
working directory. The tests SIGKILL, SIGSTOP and SIGCONT these processes and then check the
store from the test process.

The actor classes live here, at module level, because the runtime stores each actor's class as
``module:qualname`` and imports it again on recovery, in this process or another one. Under
``python -m`` this file runs as ``__main__``; the guard at the bottom re-imports it under its
real name so that the stored class paths read ``tests.chaos.programs:...``, which the test
process can import too.

Every program logs tether's structlog events as JSON lines on stderr and reports its progress on
stdout, one ``key=value`` line at a time, flushed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable

import anyio
import msgspec
import structlog

import tether
from tether.testing import ScriptedModel

LEASE_TTL = 1.0
POLL = 0.05


def runtime(db: str, **kw: object) -> tether.Runtime:
    opts: dict[str, object] = {"lease_ttl": LEASE_TTL, "poll_interval": POLL, **kw}
    return tether.Runtime(db, **opts)  # type: ignore[arg-type]


def report(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def append_line(path: str, record: dict[str, object]) -> None:
    """Append one JSON line with a single O_APPEND write (atomic for short lines)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def write_atomic(path: str, text: str) -> None:
    """Replace ``path`` by ``text`` so that a SIGKILL leaves the old or the new content."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# -- 1. counter: 1,000 increments under repeated SIGKILL ----------------------------------------


class Increment(tether.Message):
    i: int


class GetCount(tether.Message):
    pass


class Incremented(tether.Event):
    i: int
    seen: int  # the count the handler saw: equals i iff every incarnation folded exactly


class CounterState(msgspec.Struct):
    count: int = 0


class Counter(tether.Actor[CounterState]):
    initial_state = CounterState()

    def apply(self, state: CounterState, event: Incremented) -> CounterState:
        return CounterState(count=state.count + 1)

    async def handle(self, msg: Increment | GetCount) -> int | None:
        match msg:
            case Increment(i=i):
                self.persist(Incremented(i=i, seen=self.state.count))
            case GetCount():
                return self.state.count
        return None


async def counter_program(db: str, progress: str, total: str) -> None:
    """Send Increment(i) for every i after the last acknowledged one, recording each ack.

    A restarted run also sends the last acknowledged message once more, so every restart
    sends at least one message twice, whatever the moment of the kill: the dedup key must
    make that a no-op (I1)."""
    n = int(total)
    try:
        last = int(await anyio.Path(progress).read_text())
    except FileNotFoundError:
        last = -1
    async with runtime(db, snapshot_every=64) as rt:
        ref = await rt.spawn(Counter, "counter")
        report(f"ready from={last + 1}")
        for i in range(max(last, 0), n):
            await ref.tell(Increment(i=i), dedup_key=f"inc-{i}")
            write_atomic(progress, str(i))
        count = await ref.ask(GetCount(), timeout=60)
        report(f"count={count}")


# -- 2. poison: messages that raise, and messages that kill the process -------------------------


class Boom(tether.Message):
    pass


class Kill(tether.Message):
    pass


class Good(tether.Message):
    i: int


class GetDone(tether.Message):
    pass


class DoneEvent(tether.Event):
    i: int


class DoneState(msgspec.Struct):
    done: list[int] = msgspec.field(default_factory=list)


class Victim(tether.Actor[DoneState]):
    initial_state = DoneState()

    def apply(self, state: DoneState, event: DoneEvent) -> DoneState:
        return DoneState(done=[*state.done, event.i])

    async def handle(self, msg: Boom | Kill | Good | GetDone) -> list[int] | None:
        match msg:
            case Boom():
                raise RuntimeError("boom: this message always fails")
            case Kill():
                os.kill(os.getpid(), signal.SIGKILL)
            case Good(i=i):
                self.persist(DoneEvent(i=i))
            case GetDone():
                return self.state.done
        return None


async def poison_kill_program(db: str, max_attempts: str, goods: str) -> None:
    """Queue a process-killing message and ``goods`` good ones behind it, then wait for them."""
    n = int(goods)
    async with runtime(db, max_attempts=int(max_attempts)) as rt:
        ref = await rt.spawn(Victim, "victim")
        report("ready")
        await ref.tell(Kill(), dedup_key="kill")
        for i in range(n):
            await ref.tell(Good(i=i), dedup_key=f"good-{i}")
        done = await ref.ask(GetDone(), timeout=60)
        report(f"done={json.dumps(done)}")


# -- 3. two runtimes racing for one actor -------------------------------------------------------


class Work(tether.Message):
    i: int


class Worked(tether.Event):
    i: int
    pid: int
    start: float
    end: float


class WorkState(msgspec.Struct):
    count: int = 0


class Recorder(tether.Actor[WorkState]):
    """Journals the pid and the wall-clock interval of every message it processes."""

    initial_state = WorkState()

    def apply(self, state: WorkState, event: Worked) -> WorkState:
        return WorkState(count=state.count + 1)

    async def handle(self, msg: Work | GetCount) -> int | None:
        match msg:
            case Work(i=i):
                start = time.time()
                await anyio.sleep(random.uniform(0.002, 0.01))
                self.persist(Worked(i=i, pid=os.getpid(), start=start, end=time.time()))
            case GetCount():
                return self.state.count
        return None


async def race_program(db: str, first: str, last: str, total: str, seed: str) -> None:
    """Send Work(i) for i in [first, last] in bursts with idle gaps (so the actor passivates
    and its lease moves between runtimes), then wait until ``total`` messages are processed."""
    rng = random.Random(int(seed))
    ids = list(range(int(first), int(last) + 1))
    async with runtime(db, passivate_after=0.05) as rt:
        ref = await rt.spawn(Recorder, "shared")
        report("ready")
        while ids:
            burst = ids[: rng.randint(3, 12)]
            ids = ids[len(burst) :]
            for i in burst:
                await ref.tell(Work(i=i), dedup_key=f"work-{i}")
            await anyio.sleep(rng.uniform(0.3, 0.9))
        report("sent")
        with anyio.fail_after(60):
            while (count := await ref.ask(GetCount(), timeout=30)) < int(total):
                await anyio.sleep(0.2)
        report(f"count={count}")


class Slow(tether.Message):
    pass


class SlowDone(tether.Event):
    pid: int
    start: float
    end: float


class SlowState(msgspec.Struct):
    count: int = 0
    pids: list[int] = msgspec.field(default_factory=list)


class Sleeper(tether.Actor[SlowState]):
    """A handler slow enough to be frozen mid-message. ``runs`` is an append-only file that
    records every handler run, committed or not."""

    initial_state = SlowState()

    def __init__(self, runs: str) -> None:
        self.runs = runs

    def apply(self, state: SlowState, event: SlowDone) -> SlowState:
        return SlowState(count=state.count + 1, pids=[*state.pids, event.pid])

    async def handle(self, msg: Slow | GetCount) -> int | None:
        match msg:
            case Slow():
                start = time.time()
                append_line(self.runs, {"pid": os.getpid(), "at": "start", "t": start})
                await anyio.sleep(0.6)
                end = time.time()
                append_line(self.runs, {"pid": os.getpid(), "at": "end", "t": end})
                self.persist(SlowDone(pid=os.getpid(), start=start, end=end))
            case GetCount():
                return self.state.count
        return None


async def stall_program(db: str, runs: str, stop_file: str, role: str) -> None:
    """``owner``: spawn the actor and send it the slow message. ``taker``: join the store,
    ask for the count (answered once the slow message is done, by whoever owns the actor).
    Both stay up until ``stop_file`` exists, then close cleanly."""
    async with runtime(db) as rt:
        ref = await rt.spawn(Sleeper, "sleeper", runs=runs)
        report("ready")
        if role == "owner":
            await ref.tell(Slow(), dedup_key="slow-1")
            report("sent")
        else:
            count = await ref.ask(GetCount(), timeout=30)
            report(f"count={count}")
        with anyio.fail_after(60):
            while not await anyio.Path(stop_file).exists():
                await anyio.sleep(0.05)
    report("closed")


# -- 4. reopen: queued messages resume without a new send ---------------------------------------


class Job(tether.Message):
    i: int


class JobDone(tether.Event):
    i: int


class JobState(msgspec.Struct):
    count: int = 0


class Worker(tether.Actor[JobState]):
    initial_state = JobState()

    def apply(self, state: JobState, event: JobDone) -> JobState:
        return JobState(count=state.count + 1)

    async def handle(self, msg: Job | GetCount) -> int | None:
        match msg:
            case Job(i=i):
                await anyio.sleep(0.05)
                self.persist(JobDone(i=i))
            case GetCount():
                return self.state.count
        return None


async def enqueue_program(db: str, n: str, mode: str) -> None:
    """Queue ``n`` slow jobs, then die (``kill``) or close cleanly (``clean``) at once."""
    async with runtime(db) as rt:
        ref = await rt.spawn(Worker, "worker")
        for i in range(int(n)):
            await ref.tell(Job(i=i), dedup_key=f"job-{i}")
        report("sent")
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
    report("closed")


# -- a session whose step kills its process ----------------------------------------------------


@tether.tool(recovery="retry", breaker=None)
async def crash(order_id: str) -> str:
    """Kills the process calling it (a poisonous step: every delivery dies in it)."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


def call_crash(request: tether.ModelRequest) -> tether.ToolCall:
    return tether.ToolCall(tool="crash", args={"order_id": "42"})


class CrashingAgent(tether.AgentSession):
    tools = [crash]
    model = ScriptedModel(call_crash)


async def session_kill_program(db: str, max_attempts: str) -> None:
    """Give the session a task (the test asks for it, from its own process, with the same
    dedup key) and wait until the task is over."""
    async with runtime(db, max_attempts=int(max_attempts)) as rt:
        ref = await rt.spawn(CrashingAgent, "s1", goal="crash")
        report("ready")
        await ref.tell(tether.UserMessage("go"), dedup_key="task")
        while (info := await ref.ask(tether.GetSessionInfo(), timeout=30)).status in (
            "idle",
            "working",
        ):
            await anyio.sleep(POLL)
        report(f"status={info.status}")


# -- entry point --------------------------------------------------------------------------------

PROGRAMS: dict[str, Callable[..., Awaitable[None]]] = {
    "counter": counter_program,
    "poison-kill": poison_kill_program,
    "race": race_program,
    "stall": stall_program,
    "enqueue": enqueue_program,
    "session-kill": session_kill_program,
}


def configure_logging() -> None:
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(default=repr),
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def main(argv: list[str]) -> None:
    configure_logging()
    scenario, *args = argv
    anyio.run(PROGRAMS[scenario], *args)


if __name__ == "__main__":
    from tests.chaos import programs  # the same code, under the name recovery imports

    programs.main(sys.argv[1:])
