"""A session waits for approval; another process decides; the session finishes.

Run: python examples/approval_second_process.py

The held call is stored with the session's parked step, so anything that opens the same store
can decide it. Here the second process is the CLI, run as a subprocess exactly as a person
would type it::

    tether approvals approve REQUEST_ID --by manager@example.com --db approval-second-process.db

The CLI opens the store with ``tether.Runtime(path, serve=False)`` (administration only: no
actor runs in it) and records the decision; the runtime serving the session picks it up and the
approved call runs, once.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import anyio

import tether
from tether.testing import ScriptedModel

# The example is one file, so its actors and tools live in __main__, which no other process
# can import: tether warns of that at spawn. An application keeps them in a module.
warnings.filterwarnings("ignore", category=tether.MainModuleWarning)

DB = "approval-second-process.db"


@tether.tool(recovery="retry", requires_approval=True)
async def wire_refund(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> str:
    """Wire a refund to the customer's bank (held for approval)."""
    return f"wired ${amount_cents / 100:,.2f} for order {order_id}"


def next_step(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    calls = request.bundle.tool_results
    if not calls:
        args = {"order_id": "77", "amount_cents": 250_000}
        return tether.ToolCall(tool="wire_refund", args=args, thought="a large refund: wire it")
    return tether.FinalAnswer(text=f"Done: {calls[-1].result or calls[-1].error}.")


class RefundAgent(tether.AgentSession):
    tools = (wire_refund,)
    model = ScriptedModel(next_step)


def cli(*args: str) -> str:
    """Run ``tether ARGS --db DB`` in a second process, as a person would."""
    argv = [sys.executable, "-m", "tether", *args, "--db", DB]
    print("$ tether " + " ".join([*args, "--db", DB]))
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    print("\n".join("  " + line for line in done.stdout.splitlines()))
    return done.stdout


def fresh_store() -> None:
    """Start from an empty store on every run."""
    for suffix in ("", "-wal", "-shm"):
        Path(DB + suffix).unlink(missing_ok=True)


async def main() -> None:
    answer = ""
    async with tether.Runtime(DB, poll_interval=0.05) as rt:
        session = await rt.spawn(RefundAgent, "refund-desk", goal="Refund order 77 by wire.")

        async def ask() -> None:
            nonlocal answer
            result = await session.ask(tether.UserMessage("Refund order 77, please."), timeout=60)
            answer = result.answer

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            while not (pending := await rt.approvals.pending("refund-desk")):  # noqa: ASYNC110
                await anyio.sleep(0.05)
            request = pending[0]
            print(f"refund-desk waits: {request.tool} {request.args} ({request.reason})")
            # The decision comes from another process; this one only serves the session.
            await anyio.to_thread.run_sync(
                cli, "approvals", "approve", request.request_id, "--by", "manager@example.com"
            )
        print(f"refund-desk answers: {answer}")
        cli("approvals", "list", "--status", "all")
    assert answer.startswith("Done: wired"), answer


if __name__ == "__main__":
    fresh_store()
    anyio.run(main)
