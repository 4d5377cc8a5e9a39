"""The supervised connections: one actor per MCP server, under a supervisor of their own.

::

    tether.guards (GuardSupervisor)
    └── mcp:servers (McpSupervisor: one-for-one, restarts with backoff)
        ├── mcp:server:<name> (McpConnection)
        └── ...

An :class:`McpConnection` holds a :class:`~tether.mcp.link.Link` to its server, run in a
task of the runtime's own. When the server dies (a stdio server exits, an HTTP transport
fails), the link says so and the actor fails: its supervisor restarts it after a backoff,
and the new instance connects again (a stdio server is started again). A connection that
cannot connect at all (a server down, one that exits as it starts) fails the same way, within
the server's ``connect_timeout``, and is restarted the same way. Too many restarts in a
minute make the MCP supervisor give up, and ``tether.guards`` restarts it; the connection
then starts again on its next use. Nothing about the connection is journaled: it is live
state, and its restarts are the supervision tree's (``rt.tree()`` shows them).

Calls find the connection through :func:`link_for`: started on first use, and waited for,
within the server's ``wait_connected`` seconds, while it starts or restarts. A connection
held by another runtime on the same store is not used from here (its calls fail as not
carried out): run one runtime per store for a stdio server, or connect each to its own.
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import msgspec

from tether.actors.actor import Actor
from tether.actors.messages import Message
from tether.errors import ChildStartFailed, TetherError
from tether.mcp.errors import McpNotConnected
from tether.mcp.link import Link
from tether.mcp.servers import McpServer, registered
from tether.supervisor.spec import Backoff, OneForOne
from tether.supervisor.supervisor import Supervisor

MCP_SUPERVISOR = "mcp:servers"
_CONNECTION_PREFIX = "mcp:server:"
_POLL = 0.05  # seconds between looks at a connection that is starting
#: Seconds (at most a tenth of the time left) before a call's deadline at which it stops
#: waiting for its connection: time to say "not sent" before the deadline cuts it short.
_DEADLINE_MARGIN = 1.0


def connection_id(server: str) -> str:
    return f"{_CONNECTION_PREFIX}{server}"


class McpSupervisor(Supervisor):
    """Supervises the MCP server connections (module docstring). Each connection starts on
    its first call, in the process that knows its server, not when this supervisor starts."""

    strategy = OneForOne(
        max_restarts=30,
        within=60.0,
        backoff=Backoff(initial_delay=0.25, max_delay=5.0, reset_after=30.0),
    )
    children: ClassVar[list[Any]] = []
    start_dynamic_children = False


class ServerLost(Message):
    """Said by a connection's link to its own actor (in memory): the server is gone."""

    why: str


class GetConnection(Message):
    """Ask a connection what it is connected to: ``{"server", "connected", "why"}``."""


class ConnectionState(msgspec.Struct, frozen=True):
    """Nothing: a connection is live state, rebuilt by connecting."""


class McpServerLost(TetherError):
    """The connection's server went away: the connection fails, and is restarted."""


class McpConnection(Actor[ConnectionState]):
    """The live connection to one MCP server (module docstring)."""

    initial_state = ConnectionState()
    passivates = False  # idle for hours is normal; the server must not be restarted for it

    def __init__(self, server: str) -> None:
        self.server_name = server
        self.link: Link | None = None

    async def on_start(self) -> None:
        """Start connecting, and return: the start never fails for a server that is down.
        A connection that ends, or does not come up within ``connect_timeout``, fails the
        actor through a message of its own, and its supervisor restarts it after a backoff.
        (A failed *first* start would be its starter's to judge, and nothing would start it
        again: a server down when first used would be given up for good.)"""
        server = registered(self.server_name)
        link = self.link = Link(server, on_lost=self._lost)
        runtime = self._tether_cell.runtime
        runtime.start_soon(link.run)
        runtime.start_soon(self._give_up_unless_up, link, server.connect_timeout)

    async def _give_up_unless_up(self, link: Link, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            await link.up.wait()
            return
        if not link.ended.is_set():
            link.lost(f"it did not connect within {timeout} s")

    async def on_stop(self) -> None:
        if self.link is not None:
            self.link.close()

    def _lost(self, why: str) -> None:
        """Fail through a message of our own, so that supervision handles it as a failure."""
        cell: Any = self._tether_cell  # the runtime's Cell: it takes in-memory messages
        if cell.instance is self:
            cell.offer_local(ServerLost(why=why))

    async def handle(self, msg: ServerLost | GetConnection) -> dict[str, Any]:
        if isinstance(msg, ServerLost):
            raise McpServerLost(f"MCP server {self.server_name!r} is gone: {msg.why}")
        link = self.link
        return {
            "server": self.server_name,
            "connected": link is not None and link.connected,
            "why": link.why if link is not None else None,
        }

    def summary(self) -> str:
        """One line for ``rt.tree()``."""
        link = self.link
        if link is not None and link.connected:
            return f"connected ({link.server.describe()})"
        why = link.why if link is not None else None
        return f"not connected ({why})" if why else "not connected"


def _wait_until(server: McpServer) -> tuple[float, str]:
    """When a call stops waiting for its connection, and how to say why: after the server's
    ``wait_connected`` seconds, or a little before the call's own deadline (its tool's
    ``timeout``), whichever comes first. A call cut short by its deadline while it waits is
    taken by the effect path as maybe carried out; one that gives up first knows that it
    sent nothing, and says so (``McpNotConnected``: not carried out)."""
    now = anyio.current_time()
    waited = now + server.wait_connected
    deadline = anyio.current_effective_deadline()
    before_deadline = deadline - min(_DEADLINE_MARGIN, (deadline - now) / 10)
    if before_deadline < waited:
        return before_deadline, f"within the call's timeout ({deadline - now:.3g} s left)"
    return waited, f"after {server.wait_connected} s"


async def link_for(rt: Any, server: McpServer, tool: str) -> Link:
    """The live link to ``server`` in runtime ``rt``: its connection started on first use,
    and waited for while it starts or restarts. ``McpNotConnected`` after the server's
    ``wait_connected`` seconds, or just before the call's deadline: the request was not
    sent."""
    last = "it is starting"
    until, waited = _wait_until(server)
    with anyio.move_on_at(until):
        while True:
            try:
                await rt.guards.child(MCP_SUPERVISOR, McpSupervisor, {})
                cell = await rt.guards.child(
                    connection_id(server.name),
                    McpConnection,
                    {"server": server.name},
                    parent=MCP_SUPERVISOR,
                )
            except ChildStartFailed as exc:  # its first start failed: tried again below
                cell, last = None, exc.reason
            instance = cell.instance if cell is not None else None
            link = instance.link if isinstance(instance, McpConnection) else None
            if link is not None and link.connected:
                return link
            if link is not None and link.why:
                last = link.why
            elif cell is not None and cell.start_error is not None:
                last = str(cell.start_error)
            await anyio.sleep(_POLL)
    raise McpNotConnected(
        tool,
        f"MCP server {server.name!r} is not connected {waited} ({last}); the request was not sent",
    )
