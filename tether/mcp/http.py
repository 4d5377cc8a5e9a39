"""The HTTP client of a streamable HTTP connection, which tells which requests the server
never processed.

The mcp SDK reports every failure of a request as an error of the request, or of the whole
transport, and no longer says which requests reached the server. This client is the SDK's
own (its timeouts, the developer's headers, the environment's proxies) with one addition:
:meth:`WatchingClient.send` tells its :data:`Unprocessed` callback of

* a request whose connection failed before it was sent (a refused or timed-out connect, no
  connection from the pool): the server never saw it;
* a request answered with HTTP 404 although it carried a session id: a server of the
  handshake era (2025-11-25 and before) answers so for a session it no longer knows (it
  restarted, or ended the session), without processing the request. The SDK keeps the dead
  session; the connection must end, and its owner connect again with a new session.

Each is told per request, so a call whose own request reached the server is never taken as
not carried out because another request of the connection failed to connect.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

#: Told of a request the server never processed: its body (``b""`` for one streamed), why,
#: and whether the connection's session is over (HTTP 404), which ends the connection.
Unprocessed = Callable[[bytes, str, bool], None]

#: The header of a streamable HTTP session (the handshake era's servers give one).
SESSION_HEADER = "mcp-session-id"
#: Failures that leave a request unsent: no connection was made (or taken from the pool).
_NOT_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)


class WatchingClient(httpx2.AsyncClient):
    """An HTTP client as the mcp SDK makes it, telling ``unprocessed`` of the requests the
    server never processed (module docstring)."""

    def __init__(self, unprocessed: Unprocessed, headers: dict[str, str] | None) -> None:
        super().__init__(
            headers=headers,
            timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        )
        self._unprocessed = unprocessed

    async def send(
        self,
        request: httpx2.Request,
        *,
        stream: bool = False,
        auth: Any = httpx2.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx2.USE_CLIENT_DEFAULT,
    ) -> httpx2.Response:
        try:
            response = await super().send(
                request, stream=stream, auth=auth, follow_redirects=follow_redirects
            )
        except _NOT_SENT as exc:
            self._unprocessed(_body(request), f"{type(exc).__name__}: {exc}", False)
            raise
        if response.status_code == 404 and SESSION_HEADER in request.headers:
            why = "the server no longer knows this connection's session (HTTP 404)"
            self._unprocessed(_body(request), why, True)
        return response


def _body(request: httpx2.Request) -> bytes:
    """The request's body; ``b""`` for one that is streamed (a GET has none)."""
    try:
        return bytes(request.content)
    except httpx2.RequestNotRead:
        return b""
