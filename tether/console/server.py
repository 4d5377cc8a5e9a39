"""Serving the console with uvicorn, after the checks that must pass before it listens."""

from __future__ import annotations

import logging

import anyio
import uvicorn
from starlette.applications import Starlette

from tether.console.app import Console, create_app
from tether.console.config import ConsoleConfig


def prepare(config: ConsoleConfig) -> Starlette:
    """The console's app, once what it serves is there: its token file (read by
    ``create_app``) and its store, opened and closed once here. A console that cannot serve
    says why (a ``TetherError``) before it listens, not in a server's startup traceback."""
    config.check_bind()
    app = create_app(config)
    console: Console = app.state.console

    async def opens() -> None:
        async with console.opened():
            pass

    anyio.run(opens)
    return app


def serve(config: ConsoleConfig, app: Starlette | None = None, *, log_level: str = "info") -> None:
    """Listen on ``config.bind`` until interrupted (``app``: made by ``prepare``, else made
    here). uvicorn's access log names method, path and status only: tokens travel in headers
    and form bodies, never in URLs, so no secret reaches a log."""
    config.check_bind()
    host, port = config.host_port()
    uvicorn.run(
        app if app is not None else create_app(config),
        host=host,
        port=port,
        log_level=log_level,
        proxy_headers=False,  # the client address is the socket's: trusted proxies are ours to judge
        server_header=False,
        date_header=True,
        lifespan="on",
    )
    logging.getLogger(__name__).info("console stopped")
