"""A refund agent survives a SIGKILL mid-refund: the retried call reuses its idempotency key.

Run: python examples/refund_agent.py

The script starts the fake payments service (``tether.testing.payments``: its own process and
SQLite file; it honors idempotency keys), then runs itself as a child process serving a refund
agent session. The service records the first refund and holds its answer for a few seconds;
the script SIGKILLs the child in that window: the money moved, the agent never heard back. A
second child opens the same store: the session resumes at its frontier (its recorded model
decisions are replayed, never asked again), calls the refund again with the same key, and the
service answers from its record. One refund, not two.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import anyio
import msgspec

import tether
from tether.testing import ScriptedModel
from tether.testing.payments import PaymentsClient, PaymentsService, refund_count

# The example is one file, so its actors and tools live in __main__, which no other process
# can import: tether warns of that at spawn. An application keeps them in a module.
warnings.filterwarnings("ignore", category=tether.MainModuleWarning)

DB = "refund-agent.db"
PAYMENTS_DB = "refund-agent-payments.db"


class Order(msgspec.Struct, frozen=True):
    order_id: str
    amount_cents: int
    status: str


class Refund(msgspec.Struct, frozen=True):
    refund_id: str
    order_id: str
    amount_cents: int
    replayed: bool  # True: the service answered from its record of the key


ORDERS = {"42": Order("42", 4_999, "delivered")}
PAYMENTS_URL = os.environ.get("PAYMENTS_URL", "")  # the child gets it from the parent


def say(text: str) -> None:
    print(f"[pid {os.getpid()}] {text}", flush=True)


@tether.tool(recovery="retry", breaker="database")
async def lookup_order(order_id: str) -> Order:
    """Look an order up."""
    return ORDERS[order_id]


@tether.tool(recovery="retry", timeout=15.0)
async def refund(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> Refund:
    """Refund an order. ``recovery="retry"``: the payments service honors the key, so a call
    whose outcome is unknown (the process died during it) is simply made again, same key."""
    say(
        f"refund({order_id}, {amount_cents}) sent to the payments service, key {idempotency_key[:12]}..."
    )
    answer = await PaymentsClient(PAYMENTS_URL, timeout=15.0).refund(
        order_id, amount_cents, idempotency_key
    )
    result = msgspec.convert(answer, Refund)
    say(f"the payments service answers {result.refund_id} (replayed: {result.replayed})")
    return result


def next_step(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """A scripted model: look the order up, refund it, report."""
    calls = request.bundle.tool_results
    if not calls:
        return tether.ToolCall(tool="lookup_order", args={"order_id": "42"})
    last = calls[-1]
    if last.tool == "lookup_order":
        order = msgspec.json.decode(last.result or "{}", type=Order)
        return tether.ToolCall(
            tool="refund", args={"order_id": order.order_id, "amount_cents": order.amount_cents}
        )
    if last.error:
        return tether.FinalAnswer(text=f"The refund failed: {last.error}")
    done = msgspec.json.decode(last.result or "{}", type=Refund)
    return tether.FinalAnswer(text=f"Order 42 is refunded ({done.refund_id}).")


class RefundAgent(tether.AgentSession):
    tools = (lookup_order, refund)
    model = ScriptedModel(next_step)


async def serve_the_session() -> None:
    """The child: open the store, (re)spawn the session, send the customer's request."""
    async with tether.Runtime(DB) as rt:
        session = await rt.spawn(RefundAgent, "refund-desk", goal="Refund delivered orders.")
        say("the session is up; sending the customer's request")
        result = await session.ask(
            tether.UserMessage("Please refund order 42."),
            timeout=30,
            dedup_key="customer-request-42",  # a second child re-sending it starts nothing new
        )
        say(f"the agent answers: {result.answer}")
        for call in result.calls:
            say(f"  it called {call.tool}({call.args}) under key {call.effect_key}")


def start_child(url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PAYMENTS_URL": url}
    return subprocess.Popen([sys.executable, __file__, "child"], env=env)


def main() -> int:
    for path in (DB, PAYMENTS_DB):
        for suffix in ("", "-wal", "-shm"):
            Path(path + suffix).unlink(missing_ok=True)
    with PaymentsService.start(PAYMENTS_DB) as payments:
        payments.set_faults(delay_calls={1: 8.0})  # record refund #1, then answer 8 s later
        say(f"the payments service listens on {payments.url}")
        child = start_child(payments.url)
        deadline = time.monotonic() + 30
        while refund_count(PAYMENTS_DB, "42") == 0:  # wait until the money has moved
            if child.poll() is not None or time.monotonic() > deadline:
                say("the child never reached the refund")
                return 1
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        say(f"SIGKILLed child {child.pid}: the refund is recorded, the agent never heard back")
        child = start_child(payments.url)
        child.wait(timeout=60)
    count = refund_count(PAYMENTS_DB, "42")
    say(f"refunds of order 42 in the payments service's own file: {count}")
    return 0 if count == 1 and child.returncode == 0 else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["child"]:
        anyio.run(serve_the_session)
    else:
        sys.exit(main())
