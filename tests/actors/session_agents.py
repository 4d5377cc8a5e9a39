"""Agents, tools and models for the session tests (module level: the runtime imports them)."""

from __future__ import annotations

from typing import Any

import msgspec

import tether
from tether.actors.context import ChatMessage, ToolCallRecord
from tether.testing import ScriptedModel

LOG: list[tuple[str, Any]] = []


class Order(msgspec.Struct, frozen=True):
    order_id: str
    amount_cents: int
    status: str


ORDERS = {"42": Order("42", 1500, "delivered"), "43": Order("43", 90_000, "delivered")}


@tether.tool(recovery="retry", breaker="database")
async def lookup_order(order_id: str) -> Order:
    """Look an order up by id."""
    LOG.append(("lookup_order", order_id))
    if order_id not in ORDERS:
        raise KeyError(f"no order {order_id}")
    return ORDERS[order_id]


@tether.tool(recovery="retry")
async def refund(order_id: str, amount_cents: int, idempotency_key: str) -> str:
    """Refund an order (the payments service honors the key)."""
    LOG.append(("refund", (order_id, amount_cents, idempotency_key)))
    return f"refunded {amount_cents} on {order_id}"


@tether.tool(recovery="retry", requires_approval=True)
async def big_refund(order_id: str, amount_cents: int, idempotency_key: str) -> str:
    """Refund a large amount: a person must approve."""
    LOG.append(("big_refund", (order_id, amount_cents)))
    return f"refunded {amount_cents} on {order_id} (approved)"


def refund_script(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """A model that looks the order up, refunds it, and reports — decided from what it sees."""
    history = request.bundle.tool_results
    users = [m.text for m in request.bundle.messages if m.role == "user"]
    task = users[-1] if users else ""
    order_id = task.rsplit(" ", 1)[-1]
    if not history or history[-1].tool not in ("lookup_order", "refund", "big_refund"):
        return tether.ToolCall(tool="lookup_order", args={"order_id": order_id}, thought="find it")
    last = history[-1]
    if last.tool == "lookup_order":
        if last.error:
            return tether.FinalAnswer(text=f"I could not find order {order_id}.")
        order = msgspec.json.decode(last.result or "{}")
        tool = "big_refund" if order["amount_cents"] > 10_000 else "refund"
        return tether.ToolCall(
            tool=tool,
            args={"order_id": order_id, "amount_cents": order["amount_cents"]},
            thought=f"order {order_id} is delivered; refund {order['amount_cents']}",
        )
    if last.error:
        return tether.FinalAnswer(text=f"The refund of {order_id} was not made: {last.error}")
    return tether.FinalAnswer(text=f"Done: {last.result}.")


class RefundAgent(tether.AgentSession):
    tools = [lookup_order, refund, big_refund]
    model = ScriptedModel(refund_script)


SCRIPTED = ScriptedModel(
    [
        tether.ToolCall(tool="lookup_order", args={"order_id": 42}),  # wrong type: corrected
        tether.ToolCall(tool="lookup_order", args={"order_id": "42"}),
        tether.FinalAnswer(text="order 42 is delivered"),
    ]
)


class ScriptedAgent(tether.AgentSession):
    tools = [lookup_order, refund]
    model = SCRIPTED


class StubbornAgent(tether.AgentSession):
    """Calls a tool with bad arguments again and again: escalated after one correction."""

    tools = [lookup_order]
    model = ScriptedModel(lambda r: tether.ToolCall(tool="lookup_order", args={"id": "42"}))


class LoopingAgent(tether.AgentSession):
    """Looks the same order up forever: the loop detector steps in."""

    tools = [lookup_order]
    model = ScriptedModel(lambda r: tether.ToolCall(tool="lookup_order", args={"order_id": "42"}))
    loop_policy = tether.LoopPolicy(repeat=3, on_repeat="stop")


class SlowAgent(tether.AgentSession):
    """Never finishes on its own (for cancellation)."""

    tools = [lookup_order]
    max_steps = 1000
    loop_policy = None
    model = ScriptedModel(
        lambda r: tether.ToolCall(tool="lookup_order", args={"order_id": str(r.step % 2 + 42)})
    )


def look_then_answer(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """One lookup per task, then the answer: four history entries a task (the user's message,
    the call's thought, the tool call, the answer)."""
    last = request.bundle.history[-1]
    if isinstance(last, ChatMessage) and last.role == "user":
        order_id = last.text.rsplit(" ", 1)[-1]
        return tether.ToolCall(tool="lookup_order", args={"order_id": order_id}, thought="look")
    assert isinstance(last, ToolCallRecord)
    return tether.FinalAnswer(text=f"found: {last.result}")


class ShortMemoryAgent(tether.AgentSession):
    """Keeps only its five newest history entries."""

    tools = [lookup_order]
    model = ScriptedModel(look_then_answer)
    max_history = 5
    loop_policy = None  # its tasks look the same two orders up, over and over, on purpose


class ForgetfulLoopingAgent(tether.AgentSession):
    """Keeps two history entries, and repeats a lookup until the loop detector resets its
    context: three calls are made, and the history holds only the last one when it resets."""

    tools = [lookup_order]
    max_history = 2
    loop_policy = tether.LoopPolicy(repeat=3, on_repeat="reset")
    model = ScriptedModel(
        [
            tether.ToolCall(tool="lookup_order", args={"order_id": "43"}),
            *[tether.ToolCall(tool="lookup_order", args={"order_id": "42"})] * 3,
            tether.FinalAnswer(text="order 42 is delivered"),
        ]
    )


class ModelessAgent(tether.AgentSession):
    """Sets no model (a base class might): spawning it must be refused."""

    tools = [lookup_order]
