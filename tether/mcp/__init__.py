"""MCP tools through the effects ledger (``pip install 'tether[mcp]'``).

``tether.mcp.tools(server)`` lists an MCP server's tools and returns tether tools: each call
is recorded (intent, receipt) with the runtime's idempotency key, which reaches the server in
the request's ``_meta`` (``"tether/idempotency_key"``) and as an argument where the tool
declares one; recovery comes from the server's annotations; the server's connection is an
actor of the supervision tree, restarted with backoff when the server dies. See
``docs/mcp.md``.
"""

from tether.mcp.connection import McpConnection as McpConnection
from tether.mcp.connection import McpSupervisor as McpSupervisor
from tether.mcp.connection import connection_id as connection_id
from tether.mcp.errors import McpConnectionLost as McpConnectionLost
from tether.mcp.errors import McpNotConnected as McpNotConnected
from tether.mcp.errors import McpToolError as McpToolError
from tether.mcp.link import KEY_META as KEY_META
from tether.mcp.servers import HttpServer as HttpServer
from tether.mcp.servers import McpServer as McpServer
from tether.mcp.servers import StdioServer as StdioServer
from tether.mcp.tools import KEY_ARGUMENTS as KEY_ARGUMENTS
from tether.mcp.tools import load_tools as load_tools
from tether.mcp.tools import policy as policy
from tether.mcp.tools import tools as tools

__all__ = (
    "tools",
    "load_tools",
    "StdioServer",
    "HttpServer",
    "McpServer",
    "KEY_META",
    "KEY_ARGUMENTS",
    "policy",
    "McpToolError",
    "McpNotConnected",
    "McpConnectionLost",
    "McpConnection",
    "McpSupervisor",
    "connection_id",
)
