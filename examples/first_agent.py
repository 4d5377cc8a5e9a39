"""A first agent: one tool, a scripted model, a durable session (the README's first example)."""

import warnings

import anyio

import tether
from tether.testing import ScriptedModel

# The example is one file, so its actors and tools live in __main__, which no other process
# can import: tether warns of that at spawn. An application keeps them in a module.
warnings.filterwarnings("ignore", category=tether.MainModuleWarning)


@tether.tool(recovery="retry")  # the receiver honors idempotency keys
async def refund(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> str:
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
        result = await session.ask(tether.UserMessage("Please refund order 42"), timeout=30)
        print(result.answer)  # refunded 1500 cents on order 42


anyio.run(main)
