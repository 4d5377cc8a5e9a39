"""The service's HTTP API: its routes, the fault plan applied to each refund call, and the
JSON answers (the API is described in ``tether.testing.payments``)."""

from __future__ import annotations

import json
import traceback
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec

from tether.testing.payments.ledger import Faults, HttpError, Ledger, RefundRequest


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # The listen backlog (socketserver's default is 5): a burst of calls from several
    # runtimes on a loaded machine overflows a short one, and the kernel then resets
    # connections it had half-accepted (SYN cookies), which a test world reads as a call
    # whose outcome is unknown.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], ledger: Ledger) -> None:
        self.ledger = ledger
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: Server
    server_version = "tether-fake-payments/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: stdout carries only the listening line and stderr is for real errors."""

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        try:
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (or was killed) while the call was in flight

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        try:
            route = (method, url.path.rstrip("/") or "/")
            if route == ("POST", "/refunds"):
                self._post_refund()
            elif route == ("GET", "/refunds"):
                self._send(200, self.server.ledger.refunds())
            elif route == ("GET", "/refunds/count"):
                query = urllib.parse.parse_qs(url.query)
                order_id = query["order_id"][0] if "order_id" in query else None
                count = self.server.ledger.count(order_id)
                self._send(200, {"order_id": order_id, "count": count})
            elif route == ("GET", "/calls"):
                self._send(200, {"calls": self.server.ledger.calls})
            elif route == ("POST", "/faults"):
                faults = msgspec.json.decode(self._body() or b"{}", type=Faults)
                self.server.ledger.set_faults(faults)
                self._send(200, msgspec.to_builtins(faults))
            else:
                raise HttpError(404, f"no route {method} {url.path}")
        except HttpError as exc:
            self._send(exc.status, {"error": exc.message})
        except msgspec.ValidationError as exc:
            self._send(400, {"error": f"invalid request: {exc}"})
        except msgspec.DecodeError as exc:
            self._send(400, {"error": f"invalid JSON: {exc}"})
        except Exception as exc:  # noqa: BLE001 - a fake service answers 500, like a real one
            traceback.print_exc()
            self._send(500, {"error": f"internal error: {exc!r}"})

    def _post_refund(self) -> None:
        ledger = self.server.ledger
        call, faults = ledger.next_call()
        req = msgspec.json.decode(self._body(), type=RefundRequest)
        if call in faults.hang_before_calls:
            ledger.stopping.wait()
            return
        if call in faults.delay_before_calls:
            ledger.stopping.wait(faults.delay_before_calls[call])
        if call in faults.fail_calls:
            try:
                phrase = HTTPStatus(faults.status).phrase
            except ValueError:
                phrase = "error"
            raise HttpError(faults.status, f"injected fault on call {call}: {phrase}")
        answer = ledger.record(req, call)
        if call in faults.hang_calls:
            ledger.stopping.wait()
            return
        wait = ledger.delay + faults.delay_calls.get(call, 0.0)
        if wait > 0:
            ledger.stopping.wait(wait)
        self._send(200, answer)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")
