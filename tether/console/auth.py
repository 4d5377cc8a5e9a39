"""Who is asking: the console's authentication, one mode per console.

* ``token``: people log in with a token (``tokens.py``) and get a signed session cookie
  (HttpOnly, SameSite=Strict, Secure over HTTPS); scripts send ``Authorization: Bearer``.
* ``proxy``: an authenticating reverse proxy names the user in a header
  (``--trusted-header``), believed only from the proxy's addresses (``--trusted-proxies``):
  from anywhere else the header is ignored and the request is unauthenticated. Every
  proxied user has the role ``approve`` unless ``--proxy-viewers`` names them.
* ``none``: loopback only (the server refuses to bind elsewhere); whoever connects is
  ``local``, a name nobody checked (``authenticated=False``).

The identity that decides always comes from here (``Principal``), never from a form field or
a request body.
"""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass, field
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import HTTPConnection

from tether.console.tokens import TokenFile
from tether.runtime.audit import Identity

SESSION_COOKIE = "tether_console"
SESSION_MAX_AGE = 12 * 3600  # a login lasts a working day
MODES = ("token", "proxy", "none")


@dataclass(frozen=True)
class Principal:
    """An authenticated user of the console (or ``local`` without authentication)."""

    name: str
    role: str  # "view" | "approve"
    authenticated: bool
    remote: str | None
    token_id: str | None = None  # the token a session was made with (revocable)

    def identity(self, via: str, *, read_only: bool) -> Identity:
        forbidden = None
        if read_only:
            forbidden = "the console is read-only"
        elif self.role != "approve":
            forbidden = f"role {self.role!r} may only look"
        return Identity(
            name=self.name,
            via=via,
            authenticated=self.authenticated,
            remote=self.remote,
            forbidden=forbidden,
        )


@dataclass
class Session:
    """What the signed session cookie holds: the CSRF token of this browser, and who logged
    in (token mode)."""

    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    user: str | None = None
    role: str | None = None
    token_id: str | None = None

    def dump(self) -> dict[str, Any]:
        return {"csrf": self.csrf, "user": self.user, "role": self.role, "tid": self.token_id}


class Sessions:
    """Signs and reads the session cookie (itsdangerous, with the console's secret)."""

    def __init__(self, secret: str) -> None:
        self._signer = URLSafeTimedSerializer(secret, salt="tether-console-session")

    def read(self, conn: HTTPConnection) -> Session | None:
        raw = conn.cookies.get(SESSION_COOKIE)
        if not raw:
            return None
        try:
            data = self._signer.loads(raw, max_age=SESSION_MAX_AGE)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("csrf"), str):
            return None
        return Session(
            csrf=data["csrf"],
            user=_str_or_none(data.get("user")),
            role=_str_or_none(data.get("role")),
            token_id=_str_or_none(data.get("tid")),
        )

    def write(self, session: Session) -> str:
        return self._signer.dumps(session.dump())


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


class Networks:
    """Addresses as CIDR blocks (``--trusted-proxies``)."""

    def __init__(self, cidrs: list[str]) -> None:
        self.blocks = [ipaddress.ip_network(c, strict=False) for c in cidrs]

    def __contains__(self, host: str | None) -> bool:
        if host is None:
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in block for block in self.blocks)


@dataclass
class Authenticator:
    """Finds the ``Principal`` of a request in the console's one mode."""

    mode: str
    sessions: Sessions
    tokens: TokenFile | None = None
    header: str = "X-Forwarded-User"
    proxies: Networks = field(default_factory=lambda: Networks([]))
    proxy_viewers: frozenset[str] = frozenset()

    def remote(self, conn: HTTPConnection) -> str | None:
        """The client's address: behind a trusted proxy, the last ``X-Forwarded-For`` hop that
        no trusted proxy added. Each proxy appends the address it saw; what stands before
        that, the client wrote itself, so the first hop names whoever the client says."""
        host = conn.client.host if conn.client else None
        if self.mode != "proxy" or host not in self.proxies:
            return host
        hops = [h.strip() for h in conn.headers.get("x-forwarded-for", "").split(",")]
        for hop in reversed([h for h in hops if h]):
            if hop not in self.proxies:
                return hop
        return host

    def bearer(self, conn: HTTPConnection) -> Principal | None:
        """The principal of an ``Authorization: Bearer`` token (token mode), else None."""
        scheme, _, token = conn.headers.get("authorization", "").partition(" ")
        if self.tokens is None or scheme.lower() != "bearer" or not token:
            return None
        entry = self.tokens.verify(token.strip())
        if entry is None:
            return None
        return Principal(entry.user, entry.role, True, self.remote(conn), entry.id)

    def principal(self, conn: HTTPConnection, session: Session | None) -> Principal | None:
        """Who is asking, or None (not logged in, not from the proxy)."""
        if self.mode == "none":
            return Principal("local", "approve", False, self.remote(conn))
        if self.mode == "proxy":
            host = conn.client.host if conn.client else None
            user = conn.headers.get(self.header, "").strip()
            if host not in self.proxies or not user:
                return None
            role = "view" if user in self.proxy_viewers else "approve"
            return Principal(user, role, True, self.remote(conn))
        found = self.bearer(conn)
        if found is not None:
            return found
        if session is None or session.token_id is None or self.tokens is None:
            return None
        entry = self.tokens.get(session.token_id)  # revoked since the login: no more
        if entry is None or entry.user != session.user:
            return None
        return Principal(entry.user, entry.role, True, self.remote(conn), entry.id)
