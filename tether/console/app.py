"""The console as an ASGI application (Starlette): ``create_app(config)``.

It opens the store as the CLI does (``Runtime(serve=False)``: no actor runs here) for the
application's lifetime, and decides through ``rt.approvals``. Every response carries the
security headers (a strict Content-Security-Policy: scripts and styles from the console
itself only — htmx is shipped in the package — no framing, no referrer to other sites) and
``Cache-Control: no-store``. Every request finds its session (``auth.Session``) and its
principal here; the pages and the API decide what an unauthenticated one gets.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

import tether
from tether.console import api, pages
from tether.console.auth import (
    SESSION_COOKIE,
    SESSION_MAX_AGE,
    Authenticator,
    Networks,
    Session,
    Sessions,
)
from tether.console.config import ConsoleConfig, loopback_host
from tether.console.tokens import TokenFile
from tether.store.open import open_store

HERE = Path(__file__).parent
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    "Cache-Control": "no-store",
}


class Console:
    """What every request handler reaches through ``request.app.state.console``."""

    def __init__(self, config: ConsoleConfig) -> None:
        self.config = config
        self.sessions = Sessions(config.secret)
        tokens = TokenFile(config.tokens) if config.auth == "token" and config.tokens else None
        if tokens is not None:
            tokens.entries()  # a missing or unreadable file fails now, not at the first login
        self.auth = Authenticator(
            mode=config.auth,
            sessions=self.sessions,
            tokens=tokens,
            header=config.trusted_header,
            proxies=Networks(list(config.trusted_proxies)),
            proxy_viewers=config.proxy_viewers,
        )
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals["version"] = tether.__version__
        self._rt: tether.Runtime | None = None

    @property
    def rt(self) -> tether.Runtime:
        if self._rt is None:
            raise tether.RuntimeClosed("the console's store is not open")
        return self._rt

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[None]:
        store = open_store(self.config.db, create=False)  # a missing store is an error
        async with tether.Runtime(store=store, serve=False) as rt:
            self._rt = rt
            try:
                yield
            finally:
                self._rt = None


class _Context(BaseHTTPMiddleware):
    """Session and principal for every request; the security headers on every response; a
    session cookie for a browser that has none (its CSRF token), or whose session changed."""

    async def dispatch(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        console: Console = request.app.state.console
        if console.config.auth == "none" and not loopback_host(request.headers.get("host", "")):
            # Without authentication, a page elsewhere whose name was made to resolve to
            # 127.0.0.1 (DNS rebinding) would be the console's own origin to the browser:
            # it could read a form's CSRF token and approve. Answer loopback names only.
            return PlainTextResponse(
                "this console has no authentication: it answers requests for a loopback "
                "host name only (127.0.0.1, localhost, [::1])\n",
                status_code=421,
                headers=HEADERS,
            )
        found = console.sessions.read(request)
        session = found or Session()
        request.state.session = session
        request.state.principal = console.auth.principal(request, found)
        response = await call_next(request)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        if request.url.scheme == "https":
            response.headers.setdefault("Strict-Transport-Security", "max-age=31536000")
        changed = getattr(request.state, "session_changed", False)
        if getattr(request.state, "session_ended", False):
            response.delete_cookie(SESSION_COOKIE, path="/")
        elif found is None or changed:
            response.set_cookie(
                SESSION_COOKIE,
                console.sessions.write(request.state.session),
                max_age=SESSION_MAX_AGE,
                path="/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response


def create_app(config: ConsoleConfig) -> Starlette:
    """The console for ``config``: an ASGI app to serve with uvicorn (``tether console``)."""
    console = Console(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with console.opened():
            yield

    routes: list[Any] = [
        *pages.routes(),
        *api.routes(),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        Route("/healthz", _healthz),
        Route("/favicon.ico", _favicon),  # asked for by browsers whatever the page says
    ]
    app = Starlette(routes=routes, middleware=[Middleware(_Context)], lifespan=lifespan)
    app.state.console = console
    return app


async def _healthz(request: Request) -> Response:
    return Response("ok\n", media_type="text/plain")


async def _favicon(request: Request) -> Response:
    return RedirectResponse("/static/favicon.svg", status_code=301)
