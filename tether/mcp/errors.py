"""How a call of an MCP server's tool can fail, sorted into tether's taxonomy.

* the server answered that the tool failed (a result with ``isError``, or a JSON-RPC error
  to ``tools/call``): :class:`McpToolError`, a failure recorded in the ledger like any tool's,
  which the model sees and which is never retried;
* the request was never handed to the transport (no connection, or it closed before the
  request went out): :class:`McpNotConnected`, a ``TransientToolError``: not carried out,
  retried under the tool's retry policy;
* the connection dropped after the request was sent: :class:`McpConnectionLost`, a
  ``ConnectionError``: maybe carried out, so retried with the same key only by
  ``recovery="retry"`` tools and otherwise held by the tool's recovery policy. A call that
  runs past its tool's ``timeout`` is cut short by the effect path, also "maybe carried out".
"""

from __future__ import annotations

from tether.errors import ToolError, TransientToolError


class McpToolError(ToolError):
    """The MCP server answered that the tool call failed: a ``CallToolResult`` with
    ``isError``, or a JSON-RPC error response. ``detail`` is the server's own text."""

    def __init__(self, tool: str, detail: str) -> None:
        self.detail = detail
        super().__init__(tool, detail)


class McpNotConnected(TransientToolError):
    """The request was not sent: the server is not connected (it is starting, or being
    restarted after it died) or the connection closed before the request went out."""


class McpConnectionLost(ToolError, ConnectionError):
    """The connection to the server dropped after the request was sent: the call may have
    been carried out (a ``ConnectionError``, so the effects ledger sorts it as such)."""
