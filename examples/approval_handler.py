"""An approval handler in the agent's own process: small refunds approved, large ones rejected.

Run: python examples/approval_handler.py

The ``refund`` tool has ``requires_approval=True``: every call is held (the session's step is
parked, durably) until a decision arrives. Here the decision comes from a handler attached with
``rt.approvals.attach``: it approves refunds up to $100 and rejects larger ones with a reason.
The reason goes back to the agent as the tool's result, and the agent finds another way: it
offers store credit instead.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import anyio

import tether
from tether.testing import ScriptedModel

# The example is one file, so its actors and tools live in __main__, which no other process
# can import: tether warns of that at spawn. An application keeps them in a module.
warnings.filterwarnings("ignore", category=tether.MainModuleWarning)

DB = "approval-handler.db"
LIMIT_CENTS = 100_00
ORDERS = {"42": 3_000, "43": 45_000}  # order id -> amount in cents


@tether.tool(recovery="retry", requires_approval=True)
async def refund(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> str:
    """Refund an order (held for approval)."""
    return f"refunded ${amount_cents / 100:.2f} on order {order_id}"


@tether.tool(recovery="retry")
async def offer_store_credit(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> str:
    """Give the customer store credit instead of a refund."""
    return f"${amount_cents / 100:.2f} of store credit for order {order_id}"


def next_step(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """Refund the order; if a person rejects that, follow their instruction: store credit."""
    asked = [m.text for m in request.bundle.messages if m.role == "user"][-1]
    order_id = asked.rstrip(".").rsplit(" ", 1)[-1]
    args = {"order_id": order_id, "amount_cents": ORDERS[order_id]}
    calls = request.bundle.tool_results
    if not calls:
        return tether.ToolCall(tool="refund", args=args)
    last = calls[-1]
    if last.tool == "refund" and last.error:
        return tether.ToolCall(tool="offer_store_credit", args=args, thought=last.error)
    if last.tool == "refund":
        return tether.FinalAnswer(text=f"Done: {last.result}.")
    rejected = calls[-2].error
    return tether.FinalAnswer(text=f"{rejected}. So instead: {last.result}.")


class RefundAgent(tether.AgentSession):
    tools = (refund, offer_store_credit)
    model = ScriptedModel(next_step)


async def policy(request: tether.ApprovalRequest) -> tether.Approve | tether.Reject:
    """The handler: called for every held call of this runtime."""
    amount = request.args["amount_cents"]
    print(f"  handler: {request.session_id} wants {request.tool} {request.args}")
    if amount <= LIMIT_CENTS:
        return tether.Approve(by="refund-policy")
    return tether.Reject(
        by="refund-policy",
        reason=f"refunds over ${LIMIT_CENTS // 100} need a manager; offer store credit instead",
    )


def fresh_store() -> None:
    """Start from an empty store on every run."""
    for suffix in ("", "-wal", "-shm"):
        Path(DB + suffix).unlink(missing_ok=True)


async def main() -> None:
    async with tether.Runtime(DB) as rt:
        rt.approvals.attach(policy)
        for session_id, order_id in (("small-refund", "42"), ("large-refund", "43")):
            session = await rt.spawn(RefundAgent, session_id, goal="Refund delivered orders.")
            print(f"{session_id}: Please refund order {order_id}.")
            result = await session.ask(
                tether.UserMessage(f"Please refund order {order_id}."), timeout=30
            )
            answer = result.answer
            print(f"{session_id}: the agent answers: {answer}")
        print("decisions in the store:")
        for record in await rt.store.find_approvals():
            request = await rt.approvals.get(record.request_id)
            last = request.decisions[-1]
            why = f": {last['reason']}" if last.get("reason") else ""
            print(f"  {request.request_id} {request.session_id} {request.status}{why}")
    assert "store credit" in answer, answer


if __name__ == "__main__":
    fresh_store()
    anyio.run(main)
