"""The child program of the MCP crash tests: an agent whose one task calls one tool of the
test server (``tests/mcp/server.py``, over stdio), SIGKILLed between the server's work and
the receipt of that work, then run again on the same store.

Run as ``python -m tests.mcp.agent_program TOOL DB SERVER KILL`` from the repository root:

* ``TOOL``: ``lookup_order`` (read-only), ``charge`` (idempotent, honours the key) or
  ``delete_order`` (destructive: held for approval first, which this program gives);
* ``DB``: the tether store; ``SERVER``: the server's own SQLite file (the runtime starts the
  server over stdio) or the URL of a server the test runs (streamable HTTP);
* ``KILL``: ``before-receipt`` (the store SIGKILLs its own process right before the batch
  holding the call's receipt is applied: the server did the work, tether did not record it),
  ``after-receipt`` (right after that batch: the receipt is durable, the task is not done)
  or ``none`` (a run that goes on to the end: the task finishes, or its effect is held).

Progress goes to stdout as ``key=value`` lines, tether's logs to stderr as JSON lines.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

import tether
import tether.mcp
from tests.chaos.effect_programs import die
from tests.chaos.programs import LEASE_TTL, POLL, configure_logging, report
from tests.mcp import agents, world
from tether.store.records import Batch, BatchResult

ARGS: dict[str, dict[str, Any]] = {
    "lookup_order": {"order_id": "42"},
    "charge": {"order_id": "42", "amount_cents": 1500},
    "delete_order": {"order_id": "42"},
}
TIMEOUT = 60.0
KILL_POINTS = ("before-receipt", "after-receipt")


class KillingStore(tether.SqliteStore):
    """SIGKILLs its own process right before (``before-receipt``) or right after
    (``after-receipt``) the batch holding the receipt of ``tool``'s call is committed."""

    def __init__(self, path: str, *, tool: str, point: str) -> None:
        super().__init__(path)
        self.tool = tool
        self.point = point

    async def apply(self, batch: Batch) -> BatchResult:
        receipt = any(
            w.record.tool == self.tool and w.record.status == "done" for w in batch.effects
        )
        if receipt and self.point == "before-receipt":
            die(self.point)
        result = await super().apply(batch)
        if receipt and self.point == "after-receipt":
            die(self.point)
        return result


async def approve_all(rt: tether.Runtime) -> None:
    """The person who approves every held call (the destructive tool's), as it comes."""
    while True:
        for request in await rt.approvals.pending():
            await rt.approvals.decide(request.request_id, tether.Approve(by="test"))
            report(f"approved={request.tool}")
        await anyio.sleep(POLL)


async def held(rt: tether.Runtime) -> None:
    """Report the session's quarantined effect, once there is one, and end the run."""
    while not (found := await rt.quarantine.list("s1")):
        await anyio.sleep(POLL)
    report(f"quarantined={json.dumps([found[0].tool, found[0].key, found[0].reason])}")


async def program(tool: str, db: str, where: str, kill: str) -> None:
    if tool not in ARGS or kill not in (*KILL_POINTS, "none"):
        raise SystemExit(f"bad tool {tool!r} or kill point {kill!r}")
    server: tether.mcp.McpServer = (
        tether.mcp.HttpServer(where, wait_connected=world.DEADLINE)
        if where.startswith("http://")
        else world.stdio_server(Path(where))
    )
    tools = await tether.mcp.load_tools(server)
    cls = agents.session_class("CrashAgent", tools)
    store = KillingStore(db, tool=tool, point=kill) if kill != "none" else tether.SqliteStore(db)
    async with tether.Runtime(db, store=store, lease_ttl=LEASE_TTL, poll_interval=POLL) as rt:
        session = await rt.spawn(cls, "s1", goal="look after orders")
        report("ready")
        async with anyio.create_task_group() as tg:
            tg.start_soon(approve_all, rt)

            async def watch_quarantine() -> None:
                await held(rt)
                tg.cancel_scope.cancel()

            tg.start_soon(watch_quarantine)
            task = agents.plan((tool, ARGS[tool]))
            result = await session.ask(task, timeout=TIMEOUT, dedup_key="task-1")
            report(
                f"calls={json.dumps([[c.tool, c.result, c.error, c.effect_key] for c in result.calls])}"
            )
            report(f"outcome={result.outcome}")
            tg.cancel_scope.cancel()
    report("finished")


def main(argv: list[str]) -> None:
    configure_logging()
    tool, db, where, kill = argv
    anyio.run(program, tool, db, where, kill)


if __name__ == "__main__":  # the session class lives in tests.mcp.agents: importable by path
    main(sys.argv[1:])
