"""``tether demo``: a durable counter survives a SIGKILL, on the embedded SQLite default.

The demo runs a worker process that sends 200 increments (each with a dedup key) to a counter
actor, kills it with SIGKILL halfway, starts a new worker that sends all 200 again, and shows
that the counter ends at exactly 200: nothing acknowledged was lost, nothing applied twice.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import msgspec
import structlog

import tether

TOTAL = 200


class Increment(tether.Message):
    n: int


class GetCount(tether.Message):
    pass


class Incremented(tether.Event):
    n: int


class CounterState(msgspec.Struct):
    count: int = 0
    last: int = 0


class Counter(tether.Actor[CounterState]):
    initial_state = CounterState()

    def apply(self, state: CounterState, event: Incremented) -> CounterState:
        return CounterState(count=state.count + 1, last=event.n)

    async def handle(self, msg: Increment | GetCount) -> int | None:
        if isinstance(msg, Increment):
            self.persist(Incremented(n=msg.n))
            return None
        return self.state.count


async def _work(db: str, start: int) -> None:
    """Worker process: send increments start..TOTAL, reporting each acknowledged one."""
    async with tether.Runtime(db, lease_ttl=2.0) as rt:
        counter = await rt.spawn(Counter, "counter")
        for i in range(start, TOTAL):
            await counter.tell(Increment(n=i), dedup_key=f"inc-{i}")
            print(f"acked {i}", flush=True)
            await anyio.sleep(0.002)  # a steady stream, so the kill lands mid-way
        print(f"count {await counter.ask(GetCount(), timeout=10)}", flush=True)


async def _count(db: str) -> int:
    async with tether.Runtime(db) as rt:
        count: int = await rt.ref("counter").ask(GetCount(), timeout=10)
        return count


def _worker(db: str, start: int) -> subprocess.Popen[str]:
    code = "import sys, tether.demo as d; d.worker_main(sys.argv[1], int(sys.argv[2]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, db, str(start)], stdout=subprocess.PIPE, text=True
    )


def _quiet() -> None:
    """Keep the demo's output to the story: tether's own logs at warning level and above."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def worker_main(db: str, start: int) -> None:
    _quiet()
    anyio.run(_work, db, start)


def run(db: str = "tether-demo.db") -> int:
    """Run the demo and print what happened. Returns the process exit code."""
    _quiet()
    path = Path(db).resolve()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    print(f"tether demo: a durable counter in {path}\n")

    print(f"1. A worker sends {TOTAL} increments, each stored before it is acknowledged.")
    worker = _worker(str(path), 0)
    assert worker.stdout is not None
    acked = -1
    for line in worker.stdout:
        if line.startswith("acked "):
            acked = int(line.split()[1])
            if acked >= TOTAL // 2:
                break
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    print(
        f"   SIGKILL after increment #{acked} was acknowledged (the process had no chance to clean up)."
    )

    count = anyio.run(_count, str(path))
    print(
        f"2. A new process opens the store: the counter is at {count} — every acknowledged increment is there."
    )
    assert count >= acked + 1, (count, acked)

    print(
        f"3. A new worker re-sends all {TOTAL} increments (same dedup keys) and finishes the job."
    )
    started = time.monotonic()
    worker = _worker(str(path), 0)
    out, _ = worker.communicate(timeout=120)
    final = int(next(line.split()[1] for line in out.splitlines() if line.startswith("count ")))
    with sqlite3.connect(path) as con:
        events = con.execute("SELECT COUNT(*) FROM journal WHERE actor_id = 'counter'").fetchone()[
            0
        ]
    ok = final == TOTAL == events
    print(
        f"   counter = {final}, journal events = {events} "
        f"({'exactly once: nothing lost, nothing applied twice' if ok else 'MISMATCH'}) "
        f"in {time.monotonic() - started:.1f} s"
    )
    print(
        f"\nThe store is {path}; open it with `sqlite3 {path.name}` (tables: actors, mailbox, journal)."
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run(*sys.argv[1:2]))
