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

While a file ``DB.down`` exists, the server exits as it starts (a server that cannot start);
while ``DB.without`` exists, the server lists none of the tools it names (a new version of
the server); while ``DB.slow`` exists, it sleeps that many seconds before it serves (a slow
start). Each start appends the server's pid to ``DB.starts``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

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


def _legacy(inner: Any) -> Any:
    """The app as a server of the handshake era (2025-11-25 and before, most servers in use
    today) answers: it knows no ``server/discover`` (a request without a session, which it
    refuses with 400 as the SDK 1.x does), so the client falls back to ``initialize`` and
    a session the server may forget (a restart: HTTP 404 for the old session's id)."""

    async def legacy(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if b'"server/discover"' in body:
            refusal = (
                b'{"jsonrpc":"2.0","id":"server-error","error":'
                b'{"code":-32600,"message":"Bad Request: Missing session ID"}}'
            )
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 400, "headers": headers})
            await send({"type": "http.response.body", "body": refusal})
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await inner(scope, replay, send)

    return legacy


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow_lookup(order_id: str, seconds: float, ctx: Context) -> str:
    """Look up an order, slowly."""
    _record("slow_lookup", ctx, order_id)
    await anyio.sleep(seconds)
    return f"order {order_id}: shipped"


@app.tool()
async def hold_order(order_id: str, seconds: float, ctx: Context) -> str:
    """Put an order on hold; takes a while."""
    _record("hold_order", ctx, order_id)
    await anyio.sleep(seconds)
    return f"order {order_id} held"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def order_history(order_id: str, size: int, ctx: Context) -> str:
    """An order's whole history: ``size`` characters of it."""
    _record("order_history", ctx, order_id)
    return "x" * size


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
# no return annotation: content blocks, without structured output
def order_label(order_id: str, ctx: Context):  # type: ignore[no-untyped-def]
    """An order's shipping label: a caption and a picture."""
    _record("order_label", ctx, order_id)
    return [f"label of order {order_id}", Image(data=b"\x89PNG-label", format="png")]


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def order_checksum(order_id: str, ctx: Context) -> int:
    """An order's checksum: a number wider than 64 bits."""
    _record("order_checksum", ctx, order_id)
    return 2**70 + int(order_id)


class Address(BaseModel):
    street: str
    zip_code: str


class Shipment(BaseModel):
    order_id: str
    to: Address
    parcels: list[Address] = []


@app.tool(annotations=ToolAnnotations(idempotent_hint=True))
def ship(shipment: Shipment, ctx: Context) -> str:
    """Ship an order (a nested input: its schema has $defs and $ref)."""
    _record("ship", ctx, shipment.order_id)
    return f"order {shipment.order_id} shipped to {shipment.to.zip_code}"


def main(argv: list[str]) -> None:
    global DB
    transport, DB, *rest = argv
    with open(DB + ".starts", "a") as starts:  # every start of the server, by pid
        starts.write(f"{os.getpid()}\n")
    if os.path.exists(DB + ".down"):
        sys.exit("the server is down")
    if os.path.exists(DB + ".without"):  # a new version of the server, without these tools
        for name in Path(DB + ".without").read_text().split():
            app.remove_tool(name)
    if os.path.exists(DB + ".slow"):  # a server slow to start: seconds in the file
        time.sleep(float(Path(DB + ".slow").read_text()))
    _db().close()
    if transport == "stdio":
        app.run()
        return
    import anyio
    import uvicorn

    (port,) = rest
    served = app.streamable_http_app()
    config = uvicorn.Config(
        _legacy(served) if transport == "http-legacy" else served,
        host="127.0.0.1",
        port=int(port),
        log_level="warning",
    )
    anyio.run(uvicorn.Server(config).serve)


if __name__ == "__main__":
    main(sys.argv[1:])
