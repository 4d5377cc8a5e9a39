"""A webhook receiver on 127.0.0.1 for the notification tests: it checks each notice's
signature with ``tether.verify_webhook``, as a real receiver must, and keeps every POST it
got (a fake service's own record of what arrived, read by the tests)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import tether

SECRET = "s3cret-of-the-tests-0123456789abcdef"


class Delivery:
    """One POST as the receiver got it."""

    def __init__(self, headers: dict[str, str], body: bytes, verified: str | None) -> None:
        self.headers = headers
        self.body = body
        self.verified = verified  # None: the signature holds; else why not
        self.json: Any = json.loads(body)

    @property
    def delivery_id(self) -> str:
        return self.headers["tether-delivery"]

    @property
    def event(self) -> str:
        return self.headers["tether-event"]


class Receiver:
    """``url`` takes notices. ``fail_first``: answer the first N POSTs with ``fail_status``.
    ``on_post(delivery)``: called with each POST before it is answered (a test kills the
    sender there)."""

    def __init__(self, secret: str = SECRET) -> None:
        self.secret = secret
        self.deliveries: list[Delivery] = []
        self.fail_first = 0
        self.fail_status = 503
        self.on_post: Callable[[Delivery], None] | None = None
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    tether.verify_webhook(receiver.secret, body, headers.get("tether-signature"))
                    verified = None
                except tether.WebhookSignatureError as exc:
                    verified = str(exc)
                delivery = Delivery(headers, body, verified)
                with receiver._lock:
                    receiver.deliveries.append(delivery)
                    failing = len(receiver.deliveries) <= receiver.fail_first
                if receiver.on_post is not None:
                    receiver.on_post(delivery)
                status = receiver.fail_status if failing else (401 if verified else 200)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hooks/tether"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def got(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Delivery]:
        """Wait until ``count`` POSTs have arrived; every one so far."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.got()
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise AssertionError(f"{count} deliveries expected, {len(self.got())} arrived")

    def by_id(self) -> dict[str, list[Delivery]]:
        out: dict[str, list[Delivery]] = {}
        for d in self.got():
            out.setdefault(d.delivery_id, []).append(d)
        return out
