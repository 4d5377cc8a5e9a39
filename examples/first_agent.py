"""A first agent: one tool, a scripted model, a durable session (the README's first example)."""

import anyio

import tether
from tether.testing import ScriptedModel


@tether.tool(recovery="retry")  # the receiver honors idempotency keys
async def refund(order_id: str, amount_cents: int, idempotency_key: str) -> str:
    return f"refunded {amount_cents} cents on order {order_id}"


def decide(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    done = [r for r in request.bundle.tool_results if r.tool == "refund"]
    if done:
        return tether.FinalAnswer(text=done[-1].result or "")
    return tether.ToolCall(tool="refund", args={"order_id": "42", "amount_cents": 1500})


class RefundAgent(tether.AgentSession):
    tools = (refund,)
    model = ScriptedModel(decide)  # any object with `async decide(request)`


async def main() -> None:
    async with tether.Runtime("agents.db") as rt:
        session = await rt.spawn(RefundAgent, "session-1", goal="Refund order 42")
        print(await session.ask(tether.UserMessage("Please refund order 42"), timeout=30))


anyio.run(main)
