"""Restart latency of a supervised actor, beside a plain ask round trip in the same run.

    python benchmarks/bench_restart.py            # 200 restarts per variant
    python benchmarks/bench_restart.py --quick    # 50 restarts per variant (the minimum)

Setup: a ``Session`` actor whose journal holds 1,000 events (one ``Burst`` message persisting
1,000 ``Added`` events), the only child of a one_for_one supervisor with no backoff, on a fresh
SQLite file at the default durability (``"full"``).

Restart latency is the time from a crash to the next message processed by the restarted actor:
the handler records ``time.perf_counter()`` just before it raises on the first delivery of a
``Flaky`` message, and again when the new instance starts handling the redelivered ``Flaky``
(the failure is transient: the second delivery succeeds). In between: the failed attempt is
recorded durably, the supervisor decides (and journals the restart), the old instance stops,
the new one re-folds the state from the store, starts, and claims the message durably.

Two variants:

* ``refold-1000``: ``snapshot_every`` above the journal length, so every restart reads and folds
  all 1,000 events. This is the figure judged against the target (median <= 5 ms).
* ``snapshot``: the default ``snapshot_every=1000``, so the 1,000th event wrote a snapshot and a
  restart loads it and folds nothing.

Beside each, in the same run and interleaved with the restarts: the plain ``ask`` round trip
(a ``Get`` answered from the state, one commit), and the ``ask`` round trip of a ``Flaky``
message (crash, restart, redelivery, reply). Medians and p90s of per-operation times; nothing
here asserts on wall-clock time. Every reply is checked to carry the full state (1,000).
"""

from __future__ import annotations

import argparse
import gc
import logging
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog

import tether

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE / "_data"
JOURNAL = 1_000
TARGET_MS = 5.0
ASK_TIMEOUT = 60.0  # generous: a timeout here means a hang, not a slow run

# handler_failed is a warning per crash; printing it would measure the terminal, not tether.
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))


# ----------------------------------------------------------------------------- the actors


class Added(tether.Event):
    n: int


class Burst(tether.Message):
    n: int


class Flaky(tether.Message):
    """Fails on its first delivery, succeeds on the redelivery (a transient failure)."""

    token: int


class Get(tether.Message):
    pass


failed: set[int] = set()
crashed_at: dict[int, float] = {}  # token -> perf_counter() just before the raise
resumed_at: dict[int, float] = {}  # token -> perf_counter() when the new instance handles it
starts = 0


class Session(tether.Actor[int]):
    initial_state = 0

    async def on_start(self) -> None:
        global starts
        starts += 1

    def apply(self, state: int, event: Added) -> int:
        return state + event.n

    async def handle(self, msg: Burst | Flaky | Get) -> int:
        match msg:
            case Burst(n=n):
                for _ in range(n):
                    self.persist(Added(n=1))
            case Flaky(token=t):
                if t not in failed:
                    failed.add(t)
                    crashed_at[t] = time.perf_counter()
                    raise RuntimeError(f"transient failure {t}")
                resumed_at[t] = time.perf_counter()
        return self.state


class BenchSup(tether.Supervisor):
    strategy = tether.OneForOne(max_restarts=1_000_000, within=60)  # no backoff
    children = (tether.ChildSpec(Session, "session"),)


# ----------------------------------------------------------------------------- measuring


@dataclass
class Result:
    variant: str
    restart: list[float]  # crash -> next message handled, seconds
    flaky_ask: list[float]  # ask round trip of a message that crashes once
    plain_ask: list[float]  # ask round trip of Get
    snapshot_seq: int | None


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


async def run_variant(
    variant: str, snapshot_every: int, restarts: int, warmup: int, asks_per: int
) -> Result:
    global starts
    created = not DATA_DIR.exists()
    DATA_DIR.mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="restart-", dir=DATA_DIR))
    failed.clear()
    crashed_at.clear()
    resumed_at.clear()
    starts = 0
    restart: list[float] = []
    flaky: list[float] = []
    plain: list[float] = []
    token = 0
    try:
        async with tether.Runtime(scratch / "bench.db", snapshot_every=snapshot_every) as rt:
            await rt.spawn(BenchSup, "sup")
            ref = rt.ref("session")
            assert await ref.ask(Burst(n=JOURNAL), timeout=ASK_TIMEOUT) == JOURNAL
            snap = await rt.store.load_snapshot("session")
            journal = await rt.store.load_journal("session", 0, JOURNAL + 1)
            assert len(journal) == JOURNAL, len(journal)
            gc.collect()
            for i in range(warmup + restarts):
                for _ in range(asks_per):
                    t0 = time.perf_counter()
                    value = await ref.ask(Get(), timeout=ASK_TIMEOUT)
                    t1 = time.perf_counter()
                    assert value == JOURNAL, value
                    if i >= warmup:
                        plain.append(t1 - t0)
                token += 1
                t0 = time.perf_counter()
                value = await ref.ask(Flaky(token=token), timeout=ASK_TIMEOUT)
                t1 = time.perf_counter()
                assert value == JOURNAL, value  # the restarted instance re-folded all of it
                if i >= warmup:
                    flaky.append(t1 - t0)
                    restart.append(resumed_at[token] - crashed_at[token])
            assert starts == 1 + warmup + restarts, (starts, warmup, restarts)
            node = next(r for r in await rt.tree() if r.id == "sup").find("session")
            assert node is not None
            assert node.restart_count == warmup + restarts, node
            assert await rt.dead_letters.list() == []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if created and not any(DATA_DIR.iterdir()):
            DATA_DIR.rmdir()  # only if this run made it: another benchmark may be using it
    return Result(variant, restart, flaky, plain, snap.seq if snap else None)


def ms(x: float) -> str:
    return f"{x * 1e3:8.3f}"


def report(r: Result) -> None:
    snap = f"snapshot at seq {r.snapshot_seq}" if r.snapshot_seq else "no snapshot"
    print(f"\n[{r.variant}] journal {JOURNAL} events, {snap}; n={len(r.restart)} restarts")
    print(f"  {'':<36} {'median ms':>9} {'p90 ms':>8} {'min ms':>8} {'max ms':>8}")
    rows = [
        ("restart: crash -> next msg handled", r.restart),
        ("ask of a message that crashes once", r.flaky_ask),
        ("plain ask round trip", r.plain_ask),
    ]
    for label, xs in rows:
        print(
            f"  {label:<36} {ms(statistics.median(xs))} {ms(pct(xs, 0.9))} {ms(min(xs))} {ms(max(xs))}"
        )
    plain = statistics.median(r.plain_ask)
    print(
        f"  ratio restart / plain ask: {statistics.median(r.restart) / plain:.2f}x"
        f"   crash-ask / plain ask: {statistics.median(r.flaky_ask) / plain:.2f}x"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="50 restarts per variant")
    p.add_argument("--restarts", type=int, default=None, help="restarts per variant (>= 50)")
    args = p.parse_args(argv)
    restarts = args.restarts or (50 if args.quick else 200)
    if restarts < 50:
        p.error("--restarts must be at least 50")
    warmup = 5
    asks_per = 2

    print(f"tether restart latency; python {sys.version.split()[0]}; durability=full (default)")
    results = [
        anyio.run(run_variant, "refold-1000", 1_000_000_000, restarts, warmup, asks_per),
        anyio.run(run_variant, "snapshot", 1_000, restarts, warmup, asks_per),
    ]
    for r in results:
        report(r)

    headline = results[0]
    median_ms = statistics.median(headline.restart) * 1e3
    verdict = "PASS" if median_ms <= TARGET_MS else "MISS"
    print(
        f"\n{verdict}: median restart latency {median_ms:.3f} ms (p90 "
        f"{pct(headline.restart, 0.9) * 1e3:.3f} ms) with a {JOURNAL}-event journal re-folded; "
        f"target <= {TARGET_MS:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
