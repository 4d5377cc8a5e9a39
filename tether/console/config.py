"""The console's settings, checked before anything listens."""

from __future__ import annotations

import ipaddress
import os
import secrets
import urllib.parse
from dataclasses import dataclass, field

from tether.console.auth import MODES
from tether.errors import ConfigError

DEFAULT_BIND = "127.0.0.1:8470"


@dataclass(frozen=True)
class ConsoleConfig:
    """How a console serves one store.

    Args:
        db: the store, a path or URL (``tether.open_store``); it must exist.
        auth: ``"token"``, ``"proxy"`` or ``"none"`` (loopback only).
        tokens: the token file (``auth="token"``).
        trusted_header: the header an authenticating proxy names the user in.
        trusted_proxies: the proxies' addresses, as CIDR blocks (``auth="proxy"``).
        proxy_viewers: proxied users who may only look (role ``view``).
        read_only: refuse every change (decisions, resolutions, retries), in the server.
        secret: signs the session cookies; a random one per process by default (logins then
            end when the console restarts). ``TETHER_CONSOLE_SECRET`` sets one.
        refresh: seconds between the live refreshes of the pages.
        bind: ``HOST:PORT`` to listen on (for ``check_bind``).
    """

    db: str
    auth: str = "token"
    tokens: str | None = None
    trusted_header: str = "X-Forwarded-User"
    trusted_proxies: tuple[str, ...] = ()
    proxy_viewers: frozenset[str] = frozenset()
    read_only: bool = False
    secret: str = field(
        default_factory=lambda: os.environ.get("TETHER_CONSOLE_SECRET") or secrets.token_hex(32)
    )
    refresh: float = 2.0
    bind: str = DEFAULT_BIND

    def __post_init__(self) -> None:
        if self.auth not in MODES:
            raise ConfigError(f"--auth must be one of {', '.join(MODES)}, not {self.auth!r}")
        if self.auth == "token" and not self.tokens:
            raise ConfigError(
                "--auth token needs --tokens FILE (make one with "
                "`tether console token add USER --role approve --tokens FILE`)"
            )
        if self.auth == "proxy":
            if not self.trusted_proxies:
                raise ConfigError(
                    "--auth proxy needs --trusted-proxies CIDR: the proxy's header is "
                    "believed from those addresses only"
                )
            for cidr in self.trusted_proxies:
                try:
                    ipaddress.ip_network(cidr, strict=False)
                except ValueError as exc:
                    raise ConfigError(f"--trusted-proxies: {exc}") from None
            if not self.trusted_header.strip():
                raise ConfigError("--trusted-header must name a header")
        if len(self.secret) < 32:
            raise ConfigError("the session secret must be 32 characters at least")
        if not (isinstance(self.refresh, int | float) and self.refresh > 0):
            raise ConfigError(f"refresh must be > 0 seconds, not {self.refresh!r}")
        self.check_bind()

    def host_port(self) -> tuple[str, int]:
        host, sep, port = self.bind.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ConfigError(f"--bind takes HOST:PORT, not {self.bind!r}")
        return host.strip("[]"), int(port)

    def check_bind(self) -> None:
        """Refuse to listen beyond loopback without authentication."""
        host, _ = self.host_port()
        if self.auth == "none" and not _loopback(host):
            raise ConfigError(
                f"refusing to listen on {host} without authentication: anyone who reaches it "
                "could approve payments. Bind to 127.0.0.1, or use --auth token or --auth proxy"
            )


def loopback_host(host_header: str) -> bool:
    """Whether a request's ``Host`` header (``name[:port]``) names a loopback host."""
    try:
        name = urllib.parse.urlsplit(f"//{host_header}").hostname
    except ValueError:  # a malformed port or address
        return False
    return name is not None and _loopback(name)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name that may resolve anywhere
