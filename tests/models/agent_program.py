"""The child program of the adapters' crash tests: an agent on a real provider SDK, asked one
task, SIGKILLed at a chosen point of its step, and run again on the same store.

Run as ``python -m tests.models.agent_program PROVIDER DB URL TOOL_LOG KILL`` from the
repository root:

* ``PROVIDER``: ``openai`` or ``anthropic`` (the agent of ``tests.models.agents``);
* ``DB``: the tether store; ``URL``: the local provider server; ``TOOL_LOG``: the file the
  tool appends each run to;
* ``KILL``: where this run dies, exactly (the store SIGKILLs its own process):
  ``before-step``: after the model answered with tool calls and every call ran and has its
  receipt, right before the step's commit; ``between-calls``: after the first call's receipt,
  right before the second call's intent; ``none``: a clean run that finishes the task.

Progress goes to stdout as ``key=value`` lines, tether's logs to stderr as JSON lines.
"""

from __future__ import annotations

import json
import sys

import anyio

import tether
from tests.chaos.effect_programs import die
from tests.chaos.programs import LEASE_TTL, POLL, configure_logging, report
from tests.models.agents import AGENTS, CONFIG, use_anthropic, use_openai
from tether.store.records import Batch, BatchResult

TOOL = "lookup_order"
TASK = "where are orders 42 and 43?"
ASK_TIMEOUT = 30.0
KILL_POINTS = ("before-step", "between-calls", "none")


class KillingStore(tether.SqliteStore):
    """SIGKILLs its own process at one point of the session's step (see the module docstring)."""

    def __init__(self, path: str, *, point: str) -> None:
        super().__init__(path)
        self.point = point
        self.receipt_of: str | None = None  # the step whose tool receipt was committed

    async def apply(self, batch: Batch) -> BatchResult:
        records = [w.record for w in batch.effects if w.record.tool == TOOL]
        if self.point == "before-step" and any(s.msg_id == self.receipt_of for s in batch.steps):
            die(self.point)
        if self.point == "between-calls" and any(
            r.status == "pending" and r.idx == 2 for r in records
        ):
            die(self.point)
        result = await super().apply(batch)
        done = [r.msg_id for r in records if r.status == "done"]
        if done:
            self.receipt_of = done[-1]
        return result


async def program(provider: str, db: str, url: str, tool_log: str, kill: str) -> None:
    if provider not in AGENTS or kill not in KILL_POINTS:
        raise SystemExit(f"bad provider {provider!r} or kill point {kill!r}")
    CONFIG.tool_log = tool_log
    client = (use_openai if provider == "openai" else use_anthropic)(url, timeout=ASK_TIMEOUT)
    store = KillingStore(db, point=kill) if kill != "none" else tether.SqliteStore(db)
    try:
        async with tether.Runtime(db, store=store, lease_ttl=LEASE_TTL, poll_interval=POLL) as rt:
            session = await rt.spawn(AGENTS[provider], "s1", goal="Answer questions about orders")
            report("ready")
            answer = await session.ask(
                tether.UserMessage(TASK), timeout=ASK_TIMEOUT, dedup_key="task-1"
            )
            report(f"answer={json.dumps(answer.answer)}")
            info = await session.ask(tether.GetSessionInfo(), timeout=ASK_TIMEOUT)
            report(f"outcome={info.outcome}")
            report("finished")
    finally:
        await client.close()


def main(argv: list[str]) -> None:
    configure_logging()
    provider, db, url, tool_log, kill = argv
    anyio.run(program, provider, db, url, tool_log, kill)


if __name__ == "__main__":  # the agent classes live in tests.models.agents: importable by path
    main(sys.argv[1:])
