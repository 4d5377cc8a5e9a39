"""A local model provider for tests: a real HTTP server on 127.0.0.1 that answers from a script.

``ProviderServer`` runs ``http.server`` in a thread and answers each POST with the next
:class:`Reply` of its script (or with what a function of the request returns), so the real
``openai`` and ``anthropic`` SDKs talk to it over real sockets, exactly as to the provider.
Every request is kept in ``received`` (its path, headers and JSON body), which is the
server's own record of what the agents asked: the crash tests count model requests there.

A reply can be held (``hold`` seconds, or until the server closes) to make the client time
out; a held request still counts as received.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a JSON body (or raw bytes) with a status and headers."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hold: float = 0.0  # seconds to hold the answer (the client gives up first)


@dataclass(frozen=True)
class Received:
    """One request as the server got it."""

    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # the decoded JSON body
    at: float  # time.monotonic() on arrival


Answer = Callable[[Received], Reply]


class ProviderServer:
    """See the module docstring. Use as a context manager; ``url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, script: Sequence[Reply] | Answer) -> None:
        self._answer: Answer = script if callable(script) else self._from(list(script))
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def bodies(self) -> list[Any]:
        with self._lock:
            return [r.body for r in self.received]

    def __enter__(self) -> ProviderServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._closing.set()  # releases held answers
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """Wait until ``count`` requests have arrived; the requests."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the provider got {len(self.received)} request(s) in {timeout} s, not {count}"
                )
            time.sleep(0.01)

    def _from(self, replies: list[Reply]) -> Answer:
        """Answer the n-th request with the n-th reply; past the script, a 418 naming it."""
        given = iter(replies)

        def answer(request: Received) -> Reply:
            try:
                return next(given)
            except StopIteration:
                problem = f"the test script has no reply for request #{len(self.received)}"
                return Reply({"error": {"message": problem, "type": "test_script"}}, 418)

        return answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' clients use it

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                request = Received(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    at=time.monotonic(),
                )
                with server._lock:
                    server.received.append(request)
                    reply = server._answer(request)
                if reply.hold:
                    server._closing.wait(reply.hold)
                payload = (
                    reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                )
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to answer

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # quiet: the requests are in ``received``

        return Handler


def by_turns(replies: Sequence[Reply], count: Callable[[Any], int]) -> Answer:
    """Answer by where the conversation is, not by arrival: ``replies[count(body)]``, where
    ``count`` reads from the request how many model answers it already holds (so a request
    asked again after a crash would get the same reply, and the test sees it asked twice)."""

    def answer(request: Received) -> Reply:
        n = count(request.body)
        if n < len(replies):
            return replies[n]
        return Reply({"error": {"message": f"no reply for turn {n}", "type": "test_script"}}, 418)

    return answer
