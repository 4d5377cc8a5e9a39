"""Where an MCP server is: a command the runtime starts (stdio) or a URL (streamable HTTP).

A server object is configuration only; the live connection is an actor of the supervision
tree (``tether.mcp.connection``). Each server has a ``name``, which names its connection
actor (``mcp:server:<name>``) and appears in errors. Servers are registered by name in this
process when their tools are listed, so that the connection actor, started or restarted by
its supervisor, finds the command or URL again; the command's environment (which may hold
secrets) is never stored.
"""

from __future__ import annotations

import abc
import hashlib
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import ConfigError

if TYPE_CHECKING:  # the module imports the mcp SDK, an extra: at run time, when connecting
    from tether.mcp.http import Unprocessed

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: Seconds a connection may take to start (spawn and handshake) before the start fails.
DEFAULT_CONNECT_TIMEOUT = 30.0
#: Seconds a call waits for a connection that is down (starting, restarting) before it fails
#: as not carried out (``McpNotConnected``), to be retried under the tool's retry policy.
DEFAULT_WAIT_CONNECTED = 10.0


def _seconds(where: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{where}: {name} must be a positive number of seconds, not {value!r}")
    return float(value)


class McpServer(abc.ABC):
    """An MCP server tether connects to. Subclasses say how to open its transport."""

    name: str
    connect_timeout: float
    wait_connected: float

    def _common(
        self, name: str | None, default: str, connect_timeout: float, wait_connected: float
    ) -> None:
        where = f"{type(self).__name__}"
        if name is not None and not (isinstance(name, str) and _NAME.match(name)):
            raise ConfigError(
                f"{where}: name must be 1-64 letters, digits, '_', '-' or '.', "
                f"starting with a letter or digit, not {name!r}"
            )
        self.name = name or default
        self.connect_timeout = _seconds(where, "connect_timeout", connect_timeout)
        self.wait_connected = _seconds(where, "wait_connected", wait_connected)

    @abc.abstractmethod
    def transport(self, unprocessed: Unprocessed) -> AbstractAsyncContextManager[Any]:
        """A new transport (the mcp SDK's ``Transport``): entered once per connection. It
        tells ``unprocessed`` of each request it knows the server never processed
        (``tether.mcp.http``); one it cannot tell of is taken as maybe carried out."""

    @abc.abstractmethod
    def describe(self) -> str:
        """What the server is, for a person (never a secret)."""

    @abc.abstractmethod
    def identity(self) -> tuple[object, ...]:
        """What makes two server objects the same server (one name, one server)."""


class StdioServer(McpServer):
    """A server the runtime starts as a subprocess, speaking MCP over its stdin and stdout:
    ``StdioServer("python", ["server.py"], env={"TOKEN": ...})``. ``env`` is added to a small
    safe set of the parent's variables (``PATH``, ``HOME``...), as the mcp SDK does. The name
    defaults to the command's file name and a hash of the command line."""

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        cwd: str | Path | None = None,
        name: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        wait_connected: float = DEFAULT_WAIT_CONNECTED,
    ) -> None:
        if not (isinstance(command, str) and command):
            raise ConfigError(f"StdioServer: command must be a non-empty string, not {command!r}")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise ConfigError(f"StdioServer: args must be a list of strings, not {args!r}")
        if env is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ConfigError("StdioServer: env must map strings to strings")
        self.command = command
        self.args = tuple(args)
        self.env = dict(env) if env is not None else None
        self.cwd = str(cwd) if cwd is not None else None
        line = "\x1f".join((command, *self.args, self.cwd or ""))
        default = f"{Path(command).name}-{hashlib.sha256(line.encode()).hexdigest()[:8]}"
        self._common(name, _clean(default), connect_timeout, wait_connected)

    def transport(self, unprocessed: Unprocessed) -> AbstractAsyncContextManager[Any]:
        """A request handed to a stdio transport may have been read by the server: none is
        told of as unprocessed."""
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=self.command, args=list(self.args), env=self.env, cwd=self.cwd
        )
        return stdio_client(params)

    def describe(self) -> str:
        return f"stdio: {' '.join((self.command, *self.args))}"

    def identity(self) -> tuple[object, ...]:
        env = tuple(sorted(self.env.items())) if self.env is not None else None
        return ("stdio", self.command, self.args, env, self.cwd)


class HttpServer(McpServer):
    """A server reached over MCP's streamable HTTP transport at ``url``
    (``HttpServer("http://127.0.0.1:8000/mcp")``). ``headers`` go with every request (an
    ``Authorization``, for one). The name defaults to the host and a hash of the URL."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        wait_connected: float = DEFAULT_WAIT_CONNECTED,
    ) -> None:
        if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            raise ConfigError(f"HttpServer: url must be an http:// or https:// URL, not {url!r}")
        self.url = url
        self.headers = dict(headers) if headers is not None else None
        host = url.split("://", 1)[1].split("/", 1)[0].rpartition("@")[2]
        default = f"{host}-{hashlib.sha256(url.encode()).hexdigest()[:8]}"
        self._common(name, _clean(default), connect_timeout, wait_connected)

    def transport(self, unprocessed: Unprocessed) -> AbstractAsyncContextManager[Any]:
        return self._transport(unprocessed)

    @asynccontextmanager
    async def _transport(self, unprocessed: Unprocessed) -> AsyncIterator[Any]:
        """The SDK's streamable HTTP transport over an HTTP client that tells which requests
        the server never processed (``tether.mcp.http``)."""
        from mcp.client.streamable_http import streamable_http_client

        from tether.mcp.http import WatchingClient

        client = WatchingClient(unprocessed, self.headers)
        async with client, streamable_http_client(self.url, http_client=client) as streams:
            yield streams

    def describe(self) -> str:
        return f"streamable HTTP: {self.url.split('?', 1)[0]}"

    def identity(self) -> tuple[object, ...]:
        headers = tuple(sorted(self.headers.items())) if self.headers is not None else None
        return ("http", self.url, headers)


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``'s (nested) groups, or ``exc`` itself."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def _clean(name: str) -> str:
    """A default name made of what the command or URL holds, cut to the allowed characters."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", name).lstrip("-_.") or "server"
    return cleaned[-64:].lstrip("-_.") or "server"


_registered: dict[str, McpServer] = {}


def register(server: McpServer) -> None:
    """Remember ``server`` under its name in this process, for its connection actor. Another
    server under the same name is refused: the actor would connect to one or the other."""
    if not isinstance(server, McpServer):
        raise ConfigError(
            f"an MCP server is a tether.mcp.StdioServer or HttpServer, not {server!r}"
        )
    known = _registered.setdefault(server.name, server)
    if known is not server and known.identity() != server.identity():
        raise ConfigError(
            f"two MCP servers are named {server.name!r} ({known.describe()}; "
            f"{server.describe()}): give one another name="
        )


def registered(name: str) -> McpServer:
    """The server registered under ``name`` in this process."""
    server = _registered.get(name)
    if server is None:
        raise ConfigError(
            f"no MCP server named {name!r} is known in this process: list its tools "
            "(tether.mcp.tools) before the runtime connects to it"
        )
    return server
