"""Per-step cost (issue #20): an agent step through the ledger and guards vs the same bare calls.

    python benchmarks/bench_step.py                  # full run: median of 5 runs (+1 warm-up)
    python benchmarks/bench_step.py --quick          # smoke mode for CI: small sizes, 1 run
    python benchmarks/bench_step.py --json out.json  # also write the raw per-run samples

One agent step, as a session makes it, in one actor's handler (one message, sequential asks):
a model call, one tool call, one event.

* **ledger**: ``await self.effect(model, request=...)``, then ``await self.effect(lookup,
  order=...)`` with what the model decided, then ``self.persist(...)``. The model tool is
  declared as ``AgentSession`` declares its own (``recovery="retry"``, breaker ``"model"``, no
  loop guard, receipt committed before the step goes on: I6); ``lookup`` has a breaker
  (``"external_api"``) and the actor the default ``LoopPolicy``: every call passes loop
  detector, breaker and gate, none of which finds anything (distinct arguments, healthy tools).
* **bare**: the same handler calling ``await model(request=...)`` and ``await lookup(...)``
  directly; the event is persisted the same way.

On a SQLite file (``durability="full"``: WAL, ``synchronous=FULL``) the cost is wall time per
step (the ledger's commits are on the step's path); in memory (``Runtime(":memory:")``) it is
CPU time per step (``time.process_time``, all threads), since that is what a step costs a
machine that runs many sessions. Every step's reply is checked, and after each ledger run the
ledger holds 2 ``done`` receipts per step.

Targets (medians of interleaved runs, never asserted): on the file, the ledger and guards add
<= 1 ms per step; in memory, they add <= 100 µs of CPU per step.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run
from run import Bench, Sample, Scenario, rm_scratch, scratch_dir

import tether

ASK_TIMEOUT = 120.0


@dataclass(frozen=True)
class Sizes:
    runs: int
    file_steps: int  # sequential steps per run on the file
    memory_steps: int  # sequential steps per run in memory


FULL = Sizes(runs=5, file_steps=300, memory_steps=3_000)
QUICK = Sizes(runs=1, file_steps=30, memory_steps=300)

# What a model sees at each step: a prompt of the size of a short session's context (the
# ledger hashes the input of every call, so its size is part of the cost).
CONTEXT = (
    "You are a support agent. Goal: answer questions about orders. Constraints: never refund "
    "without approval; be brief. History: the user asked where an order is; you looked it up. "
) * 4


class ModelInput(msgspec.Struct, frozen=True):
    session: str
    step: int
    context: str


async def decide(request: ModelInput) -> tether.ToolCall:
    return tether.ToolCall(tool="lookup", args={"order": f"{request.session}-{request.step}"})


# Declared as AgentSession declares its model (tether/actors/session.py, _model_tool).
model = tether.Tool(
    decide,
    name="model",
    recovery="retry",
    breaker="model",
    timeout=120.0,
    description="the session's model",
    loop_guard=False,
    defer_receipt=False,
)


@tether.tool(recovery="retry", breaker="external_api")
async def lookup(order: str) -> str:
    return f"order {order} shipped"


class RunStep(tether.Message):
    n: int
    ledger: bool  # True: both calls through self.effect; False: the bare calls


class Stepped(tether.Event):
    result: str


class Steps(msgspec.Struct):
    steps: int = 0


class AgentStep(tether.Actor[Steps]):
    initial_state = Steps()
    loop_policy = tether.LoopPolicy()  # AgentSession's default

    def apply(self, state: Steps, event: Stepped) -> Steps:
        return Steps(state.steps + 1)

    async def handle(self, msg: RunStep) -> str:
        request = ModelInput(session=self.id, step=msg.n, context=CONTEXT)
        if msg.ledger:
            decision = await self.effect(model, request=request)
            result = await self.effect(lookup, **decision.args)
        else:
            decision = await model(request=request)
            result = await lookup(**decision.args)
        self.persist(Stepped(result=result))
        return str(result)


def expected(actor_id: str, n: int) -> str:
    return f"order {actor_id}-{n} shipped"


async def steps(where: str, n: int, ledger: bool) -> tuple[float, float]:
    """``n`` sequential steps on a fresh runtime (``where``: "file" or "memory"), after one
    warm-up step; (wall seconds, process CPU seconds) of the ``n``."""
    d = scratch_dir("step") if where == "file" else None
    try:
        path = d / "tether.db" if d is not None else ":memory:"
        async with tether.Runtime(path) as rt:
            ref = await rt.spawn(AgentStep, "agent")
            await ref.ask(RunStep(n=-1, ledger=ledger), timeout=ASK_TIMEOUT)  # guards started
            ask = ref.ask
            c0, t0 = time.process_time(), time.perf_counter()
            for i in range(n):
                got = await ask(RunStep(n=i, ledger=ledger), timeout=ASK_TIMEOUT)
                if got != expected("agent", i):
                    raise AssertionError(f"step {i}: {got!r}")
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            done = await rt.store.find_effects(actor_id="agent", status="done")
            want = 2 * (n + 1) if ledger else 0
            if len(done) != want:
                raise AssertionError(f"{len(done)} done receipts, expected {want}")
    finally:
        if d is not None:
            rm_scratch(d)
    return wall, cpu


def file_run(n: int, ledger: bool) -> Sample:
    wall, _ = asyncio.run(steps("file", n, ledger))
    return {f"1.file_{'ledger' if ledger else 'bare'}": (n, wall)}


def memory_run(n: int, ledger: bool) -> Sample:
    name = "ledger" if ledger else "bare"
    wall, cpu = asyncio.run(steps("memory", n, ledger))
    return {f"2.memory_{name}_cpu": (n, cpu), f"2.memory_{name}_wall": (n, wall)}


def run_all(sizes: Sizes) -> Bench:
    b = Bench(sizes)  # type: ignore[arg-type]  # Bench only reads .runs
    f, m = sizes.file_steps, sizes.memory_steps
    b.measure(
        Scenario(
            [("1.file_ledger", "file, sync=FULL: model + tool through ledger and guards", "steps/s")],
            lambda: file_run(f, ledger=True),
        ),
        Scenario(
            [("1.file_bare", "file, sync=FULL: the same handler, bare calls", "steps/s")],
            lambda: file_run(f, ledger=False),
        ),
        Scenario(
            [
                ("2.memory_ledger_cpu", "in memory: ledger and guards, per CPU second", "steps/CPU-s"),
                ("2.memory_ledger_wall", "in memory: ledger and guards, wall", "steps/s"),
            ],
            lambda: memory_run(m, ledger=True),
        ),
        Scenario(
            [
                ("2.memory_bare_cpu", "in memory: bare calls, per CPU second", "steps/CPU-s"),
                ("2.memory_bare_wall", "in memory: bare calls, wall", "steps/s"),
            ],
            lambda: memory_run(m, ledger=False),
        ),
    )  # fmt: skip
    return b


def per_step_us(b: Bench, key: str) -> float | None:
    f = b.figures.get(key)
    return 1e6 / f.median if f is not None and f.ok else None


def costs(b: Bench) -> dict[str, float | None]:
    """µs per step of each variant, and what the ledger and guards add (medians)."""
    out = {
        "file_ledger_us": per_step_us(b, "1.file_ledger"),
        "file_bare_us": per_step_us(b, "1.file_bare"),
        "memory_ledger_cpu_us": per_step_us(b, "2.memory_ledger_cpu"),
        "memory_bare_cpu_us": per_step_us(b, "2.memory_bare_cpu"),
    }
    for where, a, c in (("file", "file_ledger_us", "file_bare_us"),
                        ("memory_cpu", "memory_ledger_cpu_us", "memory_bare_cpu_us")):  # fmt: skip
        x, y = out[a], out[c]
        out[f"{where}_added_us"] = x - y if x is not None and y is not None else None
    return out


def evaluate(b: Bench) -> list[dict[str, object]]:
    c = costs(b)
    file_added, cpu_added = c["file_added_us"], c["memory_cpu_added_us"]
    return [
        run.at_most(
            "#20 per step on a file, durability='full': ledger + guards add <= 1 ms",
            file_added,
            1000.0,
            f"+{(file_added or 0) / 1000:.2f} ms per step",
            "<= +1 ms",
        ),
        run.at_most(
            "#20 per step in memory: ledger + guards add <= 100 µs of CPU",
            cpu_added,
            100.0,
            f"+{cpu_added or 0:.0f} µs CPU per step",
            "<= +100 µs",
        ),
    ]


def table(b: Bench, rows: list[dict[str, object]]) -> str:
    c = costs(b)
    lines = run.figure_rows(b)
    if None not in c.values():
        lines += [
            "",
            "| one agent step (medians) | ledger + guards | bare calls | added |",
            "|---|---:|---:|---:|",
            f"| file, sync=FULL: wall time | {c['file_ledger_us']:.0f} µs | "
            f"{c['file_bare_us']:.0f} µs | **+{c['file_added_us']:.0f} µs** |",
            f"| in memory: CPU time | {c['memory_ledger_cpu_us']:.0f} µs | "
            f"{c['memory_bare_cpu_us']:.0f} µs | **+{c['memory_cpu_added_us']:.0f} µs** |",
        ]
    return "\n".join([*lines, "", *run.target_rows(b, rows)])  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    run.add_house_options(p)
    args = p.parse_args(argv)
    sizes = run.chosen_sizes(p, args, FULL, QUICK)
    meta = run.run_meta(args.quick, sizes.runs, "tether", "msgspec", "anyio")
    run.announce("tether per-step cost", meta)
    t0 = time.perf_counter()
    with run.tidy_data_dir():
        b = run_all(sizes)
    rows = evaluate(b)
    print()
    print(table(b, rows))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    b.extra["costs"] = costs(b)
    return run.finish(b, rows, meta, {"sizes": asdict(sizes)}, args.json)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
