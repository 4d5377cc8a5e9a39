"""One live connection to an MCP server, in a task of its own.

The mcp SDK's client (its transports and ``Client``) holds anyio task groups and cancel
scopes, which must be entered and exited by the same task: :meth:`Link.run` enters them, and
stays inside until the link is closed or the connection is lost. Calls are made from the
callers' own tasks through the connected client (the SDK's dispatcher serves requests from
any task); a caller cancelled mid-call (a tool timeout, a ``CancelTask``) is cut short
without disturbing the connection.

The link watches its transport:

* the write stream records the idempotency key of each ``tools/call`` request handed to the
  transport, so that a call that fails with "connection closed" is known to have been sent
  (maybe carried out) or not (not carried out);
* an HTTP transport tells of each request the server never processed (a failed connect, a
  session the server no longer knows: ``tether.mcp.http``): such a call was not carried out,
  whatever became of the connection; a session that is over ends the link;
* the read stream's end means the server is gone (a stdio server that exited closes its
  stdout); the link then ends and says so to its owner (``on_lost``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self, cast

import anyio

from tether.mcp.errors import McpConnectionLost, McpNotConnected, McpToolError
from tether.mcp.servers import McpServer, leaves

if TYPE_CHECKING:
    from types import TracebackType

    from mcp import Client
    from mcp.types import CallToolResult, RequestParamsMeta, Tool

#: The ``_meta`` key of a ``tools/call`` request that carries the runtime's idempotency key.
KEY_META = "tether/idempotency_key"


class Link:
    """A connection to ``server``; see the module docstring."""

    def __init__(self, server: McpServer, on_lost: Callable[[str], None] | None = None) -> None:
        self.server = server
        self.client: Client | None = None
        self.up = anyio.Event()  # set once connected (the handshake is done)
        self.ended = anyio.Event()  # set once the connection is over, whatever way
        self.why: str | None = None  # why it ended (or never came up)
        self.sent: set[str] = set()  # keys of tools/call requests handed to the transport
        # keys of tools/call requests the transport knows the server never processed, and why
        self.unprocessed: dict[str, str] = {}
        self._on_lost = on_lost
        self._stop = anyio.Event()
        self._closing = False

    @property
    def connected(self) -> bool:
        """Connected, and not ending: a link that is lost or closing takes no new calls
        (its transport may take seconds to wind down; its dispatcher is already closed)."""
        return self.client is not None and self.up.is_set() and not self._stop.is_set()

    async def run(self) -> None:
        """Connect, then serve until closed or lost. Raises nothing but cancellation."""
        from mcp import Client

        try:
            async with Client(
                _Watched(self.server.transport(self._unprocessed), self), cache=None
            ) as client:
                self.client = client
                self.up.set()
                await self._stop.wait()
        except Exception as exc:  # noqa: BLE001 - any failure ends the link, and is its reason
            self.lost(_described(exc))
        finally:
            self.client = None
            self.ended.set()
        if not self._closing and self._on_lost is not None:
            self._on_lost(self.why or "the connection ended")

    async def wait_up(self, timeout: float) -> None:
        """Wait until connected; ``McpNotConnected`` (and the link closed) if it ended or did
        not come up within ``timeout`` seconds."""
        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as tg:

                async def ended() -> None:
                    await self.ended.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(ended)
                await self.up.wait()
                tg.cancel_scope.cancel()
        if not self.connected:
            self.close()
            why = self.why or f"it did not connect within {timeout} s"
            raise McpNotConnected(
                self.server.name, f"cannot connect ({self.server.describe()}): {why}"
            )

    def lost(self, why: str) -> None:
        """The connection is over (the server's stream ended, or the transport failed)."""
        if self.why is None and not self._closing:
            self.why = why
        self._stop.set()

    def _unprocessed(self, body: bytes, why: str, session_over: bool) -> None:
        """The transport knows that the server never processed the request ``body``. When
        the session is over (HTTP 404: the server restarted, or ended it), so is the
        connection: its owner connects again, with a new session."""
        key = _call_key_in(body)
        if key is not None:
            self.unprocessed[key] = why
        if session_over:
            self.lost(why)

    def close(self) -> None:
        """End the connection (the server process is stopped by its transport)."""
        self._closing = True
        self._stop.set()

    async def list_tools(self) -> list[Tool]:
        """Every tool the server lists, following its pages."""
        client = self._client(None)
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(1000):  # a server whose pages never end cannot hang the listing
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def call(
        self, tool: str, remote: str, arguments: dict[str, Any], key: str
    ) -> CallToolResult:
        """Call ``remote`` with ``arguments``; the key goes in the request's ``_meta``. Errors
        are sorted as ``tether.mcp.errors`` says (``tool`` names the tether tool)."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        client = self._client(tool)
        try:
            # RequestParamsMeta is a TypedDict open to extra keys (PEP 728), as _meta is
            meta = cast("RequestParamsMeta", {KEY_META: key})
            return await client.call_tool(remote, arguments, meta=meta)
        except MCPError as exc:
            unprocessed = self.unprocessed.get(key)
            if unprocessed is not None:
                raise McpNotConnected(
                    tool, f"{self._where()}: {unprocessed}; the request was not sent"
                ) from None
            if exc.code == CONNECTION_CLOSED:
                why = self.why or exc.message
                if key not in self.sent:
                    raise McpNotConnected(
                        tool,
                        f"{self._where()}: the connection closed ({why}); the request was not sent",
                    ) from None
                raise McpConnectionLost(
                    tool,
                    f"{self._where()}: the connection dropped after the request was sent ({why})",
                ) from None
            if exc.code == REQUEST_TIMEOUT:
                raise McpConnectionLost(tool, f"{self._where()}: {exc.message}") from None
            raise McpToolError(
                tool, f"the server answered error {exc.code}: {exc.message}"
            ) from None
        finally:
            self.sent.discard(key)
            self.unprocessed.pop(key, None)

    def _client(self, tool: str | None) -> Client:
        client = self.client
        if client is None or not self.connected:
            raise McpNotConnected(
                tool or self.server.name,
                f"{self._where()} is not connected ({self.why or 'not yet'}); the request was not sent",
            )
        return client

    def _where(self) -> str:
        return f"MCP server {self.server.name!r}"


def _described(exc: BaseException) -> str:
    """The innermost failures of ``exc`` (the SDK's task groups wrap them in groups)."""
    shown = (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__ for e in leaves(exc))
    return "; ".join(dict.fromkeys(shown))


class _Watched:
    """The server's transport, with its streams watched by the link (module docstring)."""

    def __init__(self, inner: Any, link: Link) -> None:
        self._inner = inner
        self._link = link

    async def __aenter__(self) -> tuple[_Reader, _Writer]:
        read, write = await self._inner.__aenter__()
        return _Reader(read, self._link), _Writer(write, self._link)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        result: bool | None = await self._inner.__aexit__(exc_type, exc, tb)
        return result


class _Stream:
    """One of the transport's streams, passed through."""

    def __init__(self, inner: Any, link: Link) -> None:
        self._inner = inner
        self._link = link

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _Reader(_Stream):
    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._link.lost("the server closed the connection")
            raise

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class _Writer(_Stream):
    async def send(self, item: Any, /) -> None:
        key = _call_key(item)
        if key is not None:
            self._link.sent.add(key)
        try:
            await self._inner.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            if key is not None:
                self._link.sent.discard(key)  # refused by a closed stream: surely not sent
            raise


def _call_key_in(body: bytes) -> str | None:
    """The idempotency key of the ``tools/call`` request whose JSON body is ``body``."""
    try:
        message = json.loads(body) if body else None
    except ValueError:
        return None
    params = message.get("params") if isinstance(message, dict) else None
    return _key_in(message.get("method") if isinstance(message, dict) else None, params)


def _key_in(method: object, params: object) -> str | None:
    if method != "tools/call":
        return None
    meta = params.get("_meta") if isinstance(params, dict) else None
    key = meta.get(KEY_META) if isinstance(meta, dict) else None
    return key if isinstance(key, str) else None


def _call_key(item: Any) -> str | None:
    """The idempotency key of a ``tools/call`` request, None for any other message."""
    message = getattr(item, "message", None)
    return _key_in(getattr(message, "method", None), getattr(message, "params", None))
