"""A refund agent for the console's tests, at module level (every process imports it by name):
its ``refund`` tool requires approval and appends a line to the file ``$REFUNDS_LOG`` each time
it really runs — the world's own record of refunds, read by the tests."""

from __future__ import annotations

import os
from typing import Any

import msgspec

import tether
from tests.chaos.programs import append_line
from tether.testing import ScriptedModel

ORDERS = {"42": 1_500, "43": 90_000, "44": 7_250}
GOAL = "Resolve the customer's refund request"


@tether.tool(recovery="retry")
async def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up by id."""
    return {"order_id": order_id, "amount_cents": ORDERS.get(order_id, 0), "status": "delivered"}


@tether.tool(recovery="retry", requires_approval=True)
async def refund(order_id: str, amount_cents: int, idempotency_key: str) -> str:
    """Refund an order to the customer's card.

    Args:
        order_id: the order to refund.
        amount_cents: how much, in cents (at most the order's amount).
    """
    if amount_cents <= 0:
        raise ValueError("amount_cents must be positive")
    log = os.environ.get("REFUNDS_LOG")
    if log:
        append_line(log, {"order_id": order_id, "cents": amount_cents, "key": idempotency_key})
    return f"refunded {amount_cents} cents on order {order_id}"


def _script(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    history = request.bundle.tool_results
    users = [m.text for m in request.bundle.messages if m.role == "user"]
    order_id = (users[-1] if users else "").rsplit(" ", 1)[-1]
    if not history:
        return tether.ToolCall(tool="lookup_order", args={"order_id": order_id}, thought="find it")
    last = history[-1]
    if last.tool == "lookup_order":
        order = msgspec.json.decode(last.result or "{}")
        return tether.ToolCall(
            tool="refund",
            args={"order_id": order_id, "amount_cents": order["amount_cents"]},
            thought=f"order {order_id} was delivered: refund its {order['amount_cents']} cents",
        )
    if last.error:
        return tether.FinalAnswer(text=f"The refund of order {order_id} was not made: {last.error}")
    return tether.FinalAnswer(text=f"Done: {last.result}.")


class RefundAgent(tether.AgentSession):
    tools = [lookup_order, refund]
    model = ScriptedModel(_script)
    approval_policy = tether.ApprovalPolicy(timeout=3600, approvers_needed=1)

    def approval_context(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return {
            **super().approval_context(tool, args),
            "customer": f"order {args.get('order_id')}: asked for a refund by email",
        }


class CarefulRefundAgent(RefundAgent):
    """Refunds that need two people."""

    approval_policy = tether.ApprovalPolicy(timeout=3600, approvers_needed=2)


class HastyRefundAgent(RefundAgent):
    """Refunds whose request expires after 3 s (then rejected): long enough for the runtime
    that held it to close before, on a loaded machine too, so that it stays pending, expired."""

    approval_policy = tether.ApprovalPolicy(timeout=3)
