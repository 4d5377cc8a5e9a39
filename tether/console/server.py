"""Serving the console with uvicorn, after the checks that must pass before it listens."""

from __future__ import annotations

import logging

import uvicorn

from tether.console.app import create_app
from tether.console.config import ConsoleConfig


def serve(config: ConsoleConfig, *, log_level: str = "info") -> None:
    """Listen on ``config.bind`` until interrupted. uvicorn's access log names method, path
    and status only: tokens travel in headers and form bodies, never in URLs, so no secret
    reaches a log."""
    config.check_bind()
    host, port = config.host_port()
    app = create_app(config)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        proxy_headers=False,  # the client address is the socket's: trusted proxies are ours to judge
        server_header=False,
        date_header=True,
        lifespan="on",
    )
    logging.getLogger(__name__).info("console stopped")
