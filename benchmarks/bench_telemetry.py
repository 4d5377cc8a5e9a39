"""What tether's instrumentation costs when no OpenTelemetry SDK is installed (issue #6).

The same workloads run in one process, in interleaved rounds, two ways:

* **instrumented**: as shipped — OpenTelemetry API calls (no SDK: no-op), the tracing check,
  structlog context binding per message, the trace context each send looks up;
* **bare**: the same code with every instrument replaced by a plain no-op function, tracing
  reported off, no context binding and no trace context looked up for each send (the
  ``traceparent`` each message carries) — the floor the instrumentation could reach.

The ratio instrumented/bare of throughput is the cost (1.00 = none). Workloads: the in-memory
``ask`` round trip (the most sensitive: ~30 µs per message) and durable sends to 100 actors.

    .venv/bin/python benchmarks/bench_telemetry.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import Bench, Counter, GetCount, Scenario, fmt, rm_scratch, scratch_dir

import tether
from tether import telemetry
from tether.runtime import tracing

Sample = dict[str, tuple[int, float]]


@dataclass
class Sizes:
    runs: int
    asks: int
    actors: int
    per_actor: int


FULL = Sizes(runs=5, asks=20_000, actors=100, per_actor=50)
QUICK = Sizes(runs=1, asks=2_000, actors=20, per_actor=10)


class _Null:
    def add(self, *_: Any, **__: Any) -> None:
        pass

    def record(self, *_: Any, **__: Any) -> None:
        pass


_INSTRUMENTS = [
    name
    for name in dir(telemetry)
    if hasattr(getattr(telemetry, name), "add") or hasattr(getattr(telemetry, name), "record")
]


@contextlib.contextmanager
def bare() -> Iterator[None]:
    """tether with its instrumentation replaced by nothing at all."""
    saved = {name: getattr(telemetry, name) for name in _INSTRUMENTS}
    saved_check = telemetry.tracing_enabled
    saved_bind = structlog.contextvars.bind_contextvars
    saved_outgoing = tracing.outgoing
    try:
        for name in _INSTRUMENTS:
            setattr(telemetry, name, _Null())
        telemetry.tracing_enabled = lambda: False
        structlog.contextvars.bind_contextvars = lambda **_: {}  # type: ignore[assignment]
        tracing.outgoing = lambda *_: None  # no trace context looked up per send
        yield
    finally:
        for name, value in saved.items():
            setattr(telemetry, name, value)
        telemetry.tracing_enabled = saved_check
        structlog.contextvars.bind_contextvars = saved_bind
        tracing.outgoing = saved_outgoing


async def asks(n: int, key: str) -> Sample:
    async with tether.Runtime(":memory:") as rt:
        ref = await rt.spawn(Counter, "counter")
        await ref.ask(GetCount(), timeout=60)
        q = GetCount()
        t0 = time.perf_counter()
        for _ in range(n):
            await ref.ask(q, timeout=60)
        return {key: (n, time.perf_counter() - t0)}


async def durable(actors: int, per: int, key: str) -> Sample:
    from run import Account, Deposit, GetBalance

    d = scratch_dir("telemetry")
    try:
        async with tether.Runtime(d / "tether.db") as rt:
            refs = [await rt.spawn(Account, f"a{i}") for i in range(actors)]

            async def send(ref: tether.ActorRef) -> None:
                for _ in range(per):
                    await ref.tell(Deposit(amount=1))
                assert await ref.ask(GetBalance(), timeout=60) == (per, per)

            t0 = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for ref in refs:
                    tg.start_soon(send, ref)
            return {key: (actors * per, time.perf_counter() - t0)}
    finally:
        rm_scratch(d)


def _bare(fn: Any) -> Any:
    def run() -> Any:
        with bare():
            return fn()

    return run


def run_all(s: Sizes) -> Bench:
    b = Bench(s)  # type: ignore[arg-type]
    b.measure(
        Scenario(
            [("1.ask_instrumented", "in-memory ask, instrumented (no SDK)", "rt/s")],
            lambda: asyncio.run(asks(s.asks, "1.ask_instrumented")),
        ),
        Scenario(
            [("1.ask_bare", "in-memory ask, instrumentation removed", "rt/s")],
            _bare(lambda: asyncio.run(asks(s.asks, "1.ask_bare"))),
        ),
    )
    b.measure(
        Scenario(
            [("2.durable_instrumented", "durable sends, instrumented (no SDK)", "msg/s")],
            lambda: asyncio.run(durable(s.actors, s.per_actor, "2.durable_instrumented")),
        ),
        Scenario(
            [("2.durable_bare", "durable sends, instrumentation removed", "msg/s")],
            _bare(lambda: asyncio.run(durable(s.actors, s.per_actor, "2.durable_bare"))),
        ),
    )
    return b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, 1 run (CI smoke)")
    args = p.parse_args(argv)
    b = run_all(QUICK if args.quick else FULL)
    lines = ["", "| # | figure | min | **median** | max | unit |", "|---|---|---:|---:|---:|---|"]
    for f in b.figures.values():
        if not f.ok:
            lines.append(f"| {f.key} | {f.label} | | **FAILED** | | {f.unit} |")
            continue
        lines.append(
            f"| {f.key} | {f.label} | {fmt(min(f.rates))} | **{fmt(f.median)}** | "
            f"{fmt(max(f.rates))} | {f.unit} |"
        )
    lines += ["", "| workload | instrumented / bare (medians) |", "|---|---:|"]
    failed = False
    for label, num, den in (
        ("in-memory ask", "1.ask_instrumented", "1.ask_bare"),
        ("durable sends", "2.durable_instrumented", "2.durable_bare"),
    ):
        fn, fd = b.figures.get(num), b.figures.get(den)
        if fn is None or fd is None or not (fn.ok and fd.ok):
            failed = True
            lines.append(f"| {label} | n/a |")
        else:
            lines.append(f"| {label} | {fn.median / fd.median:.2f} |")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
