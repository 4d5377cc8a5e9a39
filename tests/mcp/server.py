"""A real MCP server (the mcp SDK's ``MCPServer``) for the tests, run in a subprocess over
stdio (``python -m tests.mcp.server stdio DB``) or streamable HTTP on 127.0.0.1
(``python -m tests.mcp.server http DB PORT``). Its tools count their calls in its own SQLite
file ``DB`` (table ``calls``: one row per call, with the server's pid, the ``_meta`` key and
the key argument it received), so tests check the world, not tether's word:

* ``lookup_order`` (``readOnlyHint``): reads, changes nothing;
* ``charge`` (``idempotentHint``): honours the idempotency key from the request's ``_meta``:
  the work (a row in ``charges``) is done once per key, a repeat answers from that row;
* ``delete_order`` (``destructiveHint``): deletes, every call does the work again;
* ``fail_order``: answers with ``isError``;
* ``flaky_lookup`` (``readOnlyHint``): on its first call ever, the server SIGKILLs itself in
  the middle of the call (a server dying mid-task); later calls answer.

While a file ``DB.down`` exists, the server exits as it starts (a server that cannot start).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

KEY_META = "tether/idempotency_key"
app = MCPServer("tether-test-orders")
DB = ""


def _db() -> sqlite3.Connection:
    conn = sqlite3.connect(DB, timeout=30, isolation_level=None)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS calls (tool TEXT, pid INTEGER, meta_key TEXT, arg_key TEXT,"
        " order_id TEXT)"
    )
    conn.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, receipt TEXT)")
    return conn


def _record(tool: str, ctx: Context, order_id: str, arg_key: str | None = None) -> str | None:
    meta: Any = ctx.request_context.meta or {}
    key = meta.get(KEY_META) if isinstance(meta, dict) else None
    with _db() as conn:
        conn.execute(
            "INSERT INTO calls VALUES (?, ?, ?, ?, ?)", (tool, os.getpid(), key, arg_key, order_id)
        )
    return key


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup_order(order_id: str, ctx: Context) -> str:
    """Look up an order's status."""
    _record("lookup_order", ctx, order_id)
    return f"order {order_id}: shipped"


@app.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def charge(order_id: str, amount_cents: int, ctx: Context, idempotency_key: str = "") -> str:
    """Charge an order; the same key charges once."""
    key = _record("charge", ctx, order_id, idempotency_key)
    if not key:
        raise ValueError("charge needs an idempotency key in _meta")
    with _db() as conn:
        row = conn.execute("SELECT receipt FROM charges WHERE key = ?", (key,)).fetchone()
        if row is not None:
            return str(row[0])
        receipt = f"charged {amount_cents} cents on order {order_id}"
        conn.execute("INSERT INTO charges VALUES (?, ?)", (key, receipt))
        return receipt


@app.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_order(order_id: str, ctx: Context) -> str:
    """Delete an order for good."""
    _record("delete_order", ctx, order_id)
    return f"order {order_id} deleted"


@app.tool()
def fail_order(order_id: str, ctx: Context) -> str:
    """Always fails."""
    _record("fail_order", ctx, order_id)
    raise ValueError(f"order {order_id} cannot be processed")


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def flaky_lookup(order_id: str, ctx: Context) -> str:
    """Look up an order; the server dies in the middle of the first call."""
    _record("flaky_lookup", ctx, order_id)
    with _db() as conn:
        (calls,) = conn.execute("SELECT COUNT(*) FROM calls WHERE tool = 'flaky_lookup'").fetchone()
    if calls == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return f"order {order_id}: shipped"


def main(argv: list[str]) -> None:
    global DB
    transport, DB, *rest = argv
    if os.path.exists(DB + ".down"):
        sys.exit("the server is down")
    _db().close()
    if transport == "stdio":
        app.run()
        return
    import anyio
    import uvicorn

    (port,) = rest
    config = uvicorn.Config(
        app.streamable_http_app(), host="127.0.0.1", port=int(port), log_level="warning"
    )
    anyio.run(uvicorn.Server(config).serve)


if __name__ == "__main__":
    main(sys.argv[1:])
