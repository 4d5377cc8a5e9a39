"""MCP tools through the effects ledger: an agent uses a payments MCP server's tools.

The server (written next to the store, from SERVER below, and started by the runtime over
stdio) is a small MCPServer from the mcp SDK: a read-only balance, an idempotent refund that
honours the idempotency key from the request's ``_meta``, and a destructive account closure.
tether lists its tools, picks each one's recovery from the server's own hints, and makes
every call through the effects ledger; the closure waits for a person's approval first.
Needs the ``mcp`` extra: ``pip install -e '.[mcp]'``.
"""

import contextlib
import sqlite3
import sys
import warnings
from pathlib import Path

import anyio

import tether
import tether.mcp
from tether.testing import ScriptedModel

# One file: the session class lives in __main__ (see examples/first_agent.py).
warnings.filterwarnings("ignore", category=tether.MainModuleWarning)

SERVER = '''
import sqlite3, sys
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("payments")
db = sqlite3.connect(sys.argv[1], isolation_level=None, check_same_thread=False)
db.execute("CREATE TABLE IF NOT EXISTS refunds (key TEXT PRIMARY KEY, order_id TEXT, cents INT)")

@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def balance(order_id: str) -> str:
    """What the customer paid for an order."""
    return f"order {order_id}: 4200 cents paid"

@app.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def refund(order_id: str, amount_cents: int, ctx: Context) -> str:
    """Refund part of an order. The same idempotency key refunds once."""
    key = (ctx.request_context.meta or {}).get("tether/idempotency_key")
    db.execute("INSERT OR IGNORE INTO refunds VALUES (?, ?, ?)", (key, order_id, amount_cents))
    return f"refunded {amount_cents} cents on order {order_id}"

@app.tool(annotations=ToolAnnotations(destructive_hint=True))
def close_account(customer: str) -> str:
    """Close a customer's account for good."""
    return f"account {customer} closed"

app.run()
'''

Path("payments_server.py").write_text(SERVER)
payments = tether.mcp.StdioServer(
    sys.executable, ["payments_server.py", "payments.db"], name="payments"
)
TOOLS = tether.mcp.tools(payments)  # lists the server's tools (starts it, then stops it)

PLAN = [
    ("balance", {"order_id": "42"}),
    ("refund", {"order_id": "42", "amount_cents": 1500}),
    ("close_account", {"customer": "c-7"}),
]


def decide(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    done = request.bundle.tool_results
    if len(done) < len(PLAN):
        tool, args = PLAN[len(done)]
        return tether.ToolCall(tool=tool, args=args)
    return tether.FinalAnswer(text="; ".join(str(r.result or r.error) for r in done))


class PaymentsAgent(tether.AgentSession):
    tools = TOOLS
    model = ScriptedModel(decide)


async def desk(request: tether.ApprovalRequest) -> tether.Approve:
    """The person at the approval desk (here, a handler that says yes)."""
    print(f"held for approval: {request.tool} {request.args} ({request.reason})")
    return tether.Approve(by="alice")


async def main() -> None:
    for t in TOOLS:
        print(f"{t.name}: recovery={t.recovery}, requires_approval={t.requires_approval}")
    async with tether.Runtime("agents.db") as rt:
        session = await rt.spawn(PaymentsAgent, "session-1", goal="Refund order 42")
        rt.approvals.attach(desk)
        result = await session.ask(tether.UserMessage("Refund 15 euros"), timeout=60)
        print(result.answer)
        refund = next(c for c in result.calls if c.tool == "refund")
        tree = "\n".join(node.render() for node in await rt.tree())
    with contextlib.closing(sqlite3.connect("payments.db")) as db:
        [(key,)] = db.execute("SELECT key FROM refunds").fetchall()
    # The server saw the ledger's key: a retry after a crash would refund nothing more.
    print(f"the server's refund key is the ledger's: {key == refund.effect_key}")
    print(tree)


anyio.run(main)
