"""A fake payments service in its own process, for crash tests that count what the world saw.

An agent that refunds an order and is SIGKILLed mid-call leaves the world in one of three
states: the refund never reached the service, it was recorded once, or (after a careless retry)
it was recorded twice. This module makes those outcomes countable. The service runs as a
separate process and persists every refund in its own SQLite file, so the counts survive the
agent and can be read after everything else has died.

Run it directly::

    python -m tether.testing.payments serve --db refunds.db [--port 0] [--ignore-keys]
        [--delay SECONDS] [--host 127.0.0.1]

It prints exactly one line, ``listening on http://HOST:PORT``, then serves JSON (``--host``:
the address it listens on; ``0.0.0.0`` for every address of the machine, as a test of
several network namespaces needs):

``POST /refunds`` ``{order_id, amount_cents, idempotency_key?}``
    Records a refund and answers ``{refund_id, order_id, amount_cents, replayed}``. When the
    service honors idempotency keys (the default) and the key was seen before, it records
    nothing and answers the stored refund with ``replayed: true`` (a key reused with a
    different order or amount is a 422). With ``--ignore-keys`` every call records a refund.
``GET /refunds``
    Every refund, oldest first, as a JSON list.
``GET /refunds/count?order_id=X``
    ``{"order_id": X, "count": n}`` (all refunds when ``order_id`` is left out).
``GET /calls``
    ``{"calls": n}``: how many ``POST /refunds`` this process has received.
``POST /faults``
    Replaces the fault plan. Calls are numbered by the server, 1-based, in arrival order of
    ``POST /refunds`` since the process started::

        {"fail_calls": [1, 2], "status": 503,          # answer these calls with an error
         "delay_calls": {"3": 1.5},                     # record, wait, then answer
         "delay_before_calls": {"4": 1.5},              # wait, then record and answer
         "hang_calls": [5], "hang_before_calls": [6]}   # record (or not) and never answer

    A failed call records nothing. A delay (and ``--delay``, which applies to every call)
    happens *after* the refund is durably recorded and *before* the answer, so a client killed
    or timing out during the wait leaves a recorded refund: the ambiguous case. The
    ``*_before`` variants wait before anything is recorded.

Errors are JSON ``{"error": "..."}`` with a non-2xx status; 429 and 5xx are transient.

For tests: :class:`PaymentsService` starts and stops the process, :class:`PaymentsClient` is
a small async client raising :class:`PaymentsError`, and :func:`refunds` /
:func:`refund_count` read the SQLite file directly, with or without the process running.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from http import HTTPStatus
from http.client import HTTPException
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Annotated, Any, Self

import anyio.to_thread
import msgspec

__all__ = (
    "PaymentsClient",
    "PaymentsError",
    "PaymentsService",
    "main",
    "refund_count",
    "refunds",
)

LISTENING_PREFIX = "listening on "

_SCHEMA = """
CREATE TABLE IF NOT EXISTS refunds (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    refund_id TEXT NOT NULL UNIQUE,
    order_id TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,
    idempotency_key TEXT,
    call INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS refunds_order ON refunds (order_id);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    idempotency_key TEXT PRIMARY KEY,
    refund_id TEXT NOT NULL REFERENCES refunds (refund_id)
);
"""

_REFUND_COLUMNS = "refund_id, order_id, amount_cents, idempotency_key, call, created_at"


# -- errors ---------------------------------------------------------------------------------


class PaymentsError(Exception):
    """The payments service answered with a non-2xx status.

    ``status_code`` is the HTTP status; ``transient`` is true for 429 and 5xx, the answers a
    caller may retry.
    """

    def __init__(self, status: int, message: str) -> None:
        self.status_code = status
        self.message = message
        super().__init__(f"payments service answered {status}: {message}")

    @property
    def transient(self) -> bool:
        return self.status_code == 429 or self.status_code >= 500


# -- the server -----------------------------------------------------------------------------


class _RefundRequest(msgspec.Struct, forbid_unknown_fields=True):
    order_id: Annotated[str, msgspec.Meta(min_length=1)]
    amount_cents: Annotated[int, msgspec.Meta(gt=0)]
    idempotency_key: str | None = None


# Calls are numbered from 1: a plan for call 0 or -1 would never fire, so it is a 400.
_CallNumber = Annotated[int, msgspec.Meta(ge=1)]


class _Faults(msgspec.Struct, forbid_unknown_fields=True):
    fail_calls: list[_CallNumber] = []
    status: Annotated[int, msgspec.Meta(ge=400, le=599)] = 503
    delay_calls: dict[_CallNumber, Annotated[float, msgspec.Meta(ge=0)]] = {}
    delay_before_calls: dict[_CallNumber, Annotated[float, msgspec.Meta(ge=0)]] = {}
    hang_calls: list[_CallNumber] = []
    hang_before_calls: list[_CallNumber] = []


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


def _open_db(path: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.executescript(_SCHEMA)
    return conn


def _row_to_refund(row: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(_REFUND_COLUMNS.split(", "), row, strict=True))


class _Ledger:
    """The server's state: the SQLite file, the call counter and the fault plan."""

    def __init__(self, db_path: str | Path, *, honor_keys: bool, delay: float) -> None:
        self.honor_keys = honor_keys
        self.delay = delay
        self.stopping = threading.Event()
        self._conn = _open_db(db_path)
        self._lock = threading.Lock()  # around every use of the one connection
        self._calls = 0
        self._faults = _Faults()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def next_call(self) -> tuple[int, _Faults]:
        with self._lock:
            self._calls += 1
            return self._calls, self._faults

    @property
    def calls(self) -> int:
        with self._lock:
            return self._calls

    def set_faults(self, faults: _Faults) -> None:
        with self._lock:
            self._faults = faults

    def record(self, req: _RefundRequest, call: int) -> dict[str, Any]:
        """Record a refund (or find the one its key already recorded) in one transaction."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                key = req.idempotency_key if self.honor_keys else None
                if key is not None:
                    row = conn.execute(
                        "SELECT r.refund_id, r.order_id, r.amount_cents FROM idempotency_keys k "
                        "JOIN refunds r USING (refund_id) WHERE k.idempotency_key = ?",
                        (key,),
                    ).fetchone()
                    if row is not None:
                        conn.execute("ROLLBACK")
                        if (row[1], row[2]) != (req.order_id, req.amount_cents):
                            raise _HttpError(
                                422,
                                f"idempotency key {key!r} was used for order {row[1]!r} "
                                f"({row[2]} cents)",
                            )
                        return {
                            "refund_id": row[0],
                            "order_id": row[1],
                            "amount_cents": row[2],
                            "replayed": True,
                        }
                refund_id = f"re_{uuid.uuid4().hex[:20]}"
                conn.execute(
                    f"INSERT INTO refunds ({_REFUND_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        refund_id,
                        req.order_id,
                        req.amount_cents,
                        req.idempotency_key,
                        call,
                        time.time(),
                    ),
                )
                if key is not None:
                    conn.execute(
                        "INSERT INTO idempotency_keys (idempotency_key, refund_id) VALUES (?, ?)",
                        (key, refund_id),
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return {
            "refund_id": refund_id,
            "order_id": req.order_id,
            "amount_cents": req.amount_cents,
            "replayed": False,
        }

    def refunds(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(f"SELECT {_REFUND_COLUMNS} FROM refunds ORDER BY seq")
            return [_row_to_refund(r) for r in rows.fetchall()]

    def count(self, order_id: str | None) -> int:
        with self._lock:
            if order_id is None:
                row = self._conn.execute("SELECT COUNT(*) FROM refunds").fetchone()
            else:
                row = self._conn.execute(
                    "SELECT COUNT(*) FROM refunds WHERE order_id = ?", (order_id,)
                ).fetchone()
            return int(row[0])


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The listen backlog (socketserver's default is 5): a burst of calls from several
    # runtimes on a loaded machine overflows a short one, and the kernel then resets
    # connections it had half-accepted (SYN cookies), which a test world reads as a call
    # whose outcome is unknown.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], ledger: _Ledger) -> None:
        self.ledger = ledger
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
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
                faults = msgspec.json.decode(self._body() or b"{}", type=_Faults)
                self.server.ledger.set_faults(faults)
                self._send(200, msgspec.to_builtins(faults))
            else:
                raise _HttpError(404, f"no route {method} {url.path}")
        except _HttpError as exc:
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
        req = msgspec.json.decode(self._body(), type=_RefundRequest)
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
            raise _HttpError(faults.status, f"injected fault on call {call}: {phrase}")
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


def _serve(db: str, port: int, *, honor_keys: bool, delay: float, host: str) -> None:
    ledger = _Ledger(db, honor_keys=honor_keys, delay=delay)
    server = _Server((host, port), ledger)

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        sys.stdout.write(f"{LISTENING_PREFIX}http://{host}:{server.server_address[1]}\n")
        sys.stdout.flush()
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        ledger.stopping.set()
        server.server_close()
        ledger.close()


def _delay_problem(delay: object) -> str | None:
    """Why ``delay`` is no delay in seconds, or None. A negative or NaN delay would be skipped
    silently and an infinite one fails every call after recording it (Event.wait overflows)."""
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        return f"delay must be a number of seconds, not {delay!r}"
    if not 0 <= delay < math.inf:
        return f"delay must be a finite number of seconds >= 0, not {delay!r}"
    return None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    problem = _delay_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m tether.testing.payments serve --db PATH [...]``."""
    parser = argparse.ArgumentParser(
        prog="python -m tether.testing.payments", description="A fake payments service."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the HTTP API until SIGTERM or Ctrl-C")
    serve.add_argument("--db", required=True, help="the SQLite file refunds are recorded in")
    serve.add_argument("--port", type=int, default=0, help="0 (the default) picks a free port")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    serve.add_argument(
        "--ignore-keys", action="store_true", help="record every call, even a repeated key"
    )
    serve.add_argument(
        "--delay",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="wait this long after recording each refund and before answering",
    )
    args = parser.parse_args(argv)
    _serve(args.db, args.port, honor_keys=not args.ignore_keys, delay=args.delay, host=args.host)


# -- offline readers ------------------------------------------------------------------------


@contextlib.contextmanager
def _reader(db_path: str | Path) -> Iterator[sqlite3.Connection]:
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"no payments database at {path}")
    conn = sqlite3.connect(path)
    try:
        yield conn
    finally:
        conn.close()


def refunds(db_path: str | Path) -> list[dict[str, Any]]:
    """Every refund recorded in the service's SQLite file, oldest first.

    Each is ``{refund_id, order_id, amount_cents, idempotency_key, call, created_at}``. Works
    whether or not the service is still running (or was killed).
    """
    with _reader(db_path) as conn:
        rows = conn.execute(f"SELECT {_REFUND_COLUMNS} FROM refunds ORDER BY seq").fetchall()
    return [_row_to_refund(r) for r in rows]


def refund_count(db_path: str | Path, order_id: str | None = None) -> int:
    """How many refunds the service's SQLite file holds for ``order_id`` (for all orders if
    ``None``)."""
    with _reader(db_path) as conn:
        if order_id is None:
            row = conn.execute("SELECT COUNT(*) FROM refunds").fetchone()
        else:
            row = conn.execute(
                "SELECT COUNT(*) FROM refunds WHERE order_id = ?", (order_id,)
            ).fetchone()
    return int(row[0])


# -- the process, for tests -----------------------------------------------------------------


def _serve_argv(
    db_path: Path, *, honor_keys: bool, delay: float, port: int, host: str
) -> list[str]:
    argv = [sys.executable, "-m", "tether.testing.payments", "serve", "--db", str(db_path)]
    argv += ["--port", str(port), "--delay", repr(delay), "--host", host]
    if not honor_keys:
        argv.append("--ignore-keys")
    return argv


def _request(
    method: str, url: str, body: object | None = None, *, timeout: float
) -> Any:  # the decoded JSON answer
    """One blocking JSON request; maps failures onto PaymentsError / TimeoutError /
    ConnectionError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            raw = exc.read()
        finally:
            exc.close()
        try:
            message = str(json.loads(raw)["error"])
        except (ValueError, KeyError, TypeError):
            message = raw.decode(errors="replace") or exc.reason
        raise PaymentsError(exc.code, message) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise TimeoutError(f"{method} {url}: no answer within {timeout} s") from exc
        # keep the subtype: a refused connection (nothing was sent) is not a reset one
        cls = type(exc.reason) if isinstance(exc.reason, ConnectionError) else ConnectionError
        raise cls(f"{method} {url}: {exc.reason}") from exc
    except TimeoutError as exc:
        raise TimeoutError(f"{method} {url}: no answer within {timeout} s") from exc
    except ConnectionError:
        raise
    except (OSError, HTTPException) as exc:
        raise ConnectionError(f"{method} {url}: {exc!r}") from exc


class PaymentsService:
    """The fake payments service running in a child process.

    ``PaymentsService.start(db_path)`` returns once the child is listening; ``stop()`` (or
    leaving the ``with`` block) terminates it. The SQLite file stays behind for
    :func:`refunds` and :func:`refund_count`.
    """

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        url: str,
        db_path: Path,
        logs: tempfile.TemporaryDirectory[str],
    ) -> None:
        self.proc = proc
        self.url = url
        self.db_path = db_path
        self._logs = logs

    @classmethod
    def start(
        cls,
        db_path: str | Path,
        *,
        honor_keys: bool = True,
        delay: float = 0.0,
        port: int = 0,
        host: str = "127.0.0.1",
        startup_timeout: float = 15.0,
    ) -> PaymentsService:
        """Spawn ``python -m tether.testing.payments serve`` and wait for its listening line.

        Raises ``RuntimeError`` with the child's stderr if it exits or stays silent for
        ``startup_timeout`` seconds; ``ValueError`` for a negative, NaN or infinite ``delay``.
        """
        problem = _delay_problem(delay)
        if problem is not None:  # before spawning: the child would refuse it with exit 2
            raise ValueError(problem)
        db = Path(db_path)
        logs = tempfile.TemporaryDirectory(prefix="tether-payments-")
        out_path = Path(logs.name) / "stdout"
        err_path = Path(logs.name) / "stderr"
        argv = _serve_argv(db, honor_keys=honor_keys, delay=delay, port=port, host=host)
        # stdout and stderr go to files, never pipes: a full pipe would block the child
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + startup_timeout
        while True:
            line = out_path.read_text(errors="replace").partition("\n")
            if line[1] and line[0].startswith(LISTENING_PREFIX):
                return cls(proc, line[0][len(LISTENING_PREFIX) :].strip(), db, logs)
            exited = proc.poll()
            if exited is not None or time.monotonic() > deadline or line[1]:
                if exited is None:
                    proc.kill()
                    proc.wait()
                if exited is not None:
                    why = f"exited with code {exited} before printing its listening line"
                elif line[1]:
                    why = f"printed {line[0]!r} instead of its listening line"
                else:
                    why = f"did not print its listening line within {startup_timeout} s"
                stderr = err_path.read_text(errors="replace").strip()
                logs.cleanup()
                raise RuntimeError(
                    f"fake payments service ({' '.join(argv)}) {why}; stderr: {stderr or '(empty)'}"
                )
            time.sleep(0.01)

    @property
    def stderr(self) -> str:
        """What the child wrote to stderr so far."""
        path = Path(self._logs.name) / "stderr"
        return path.read_text(errors="replace") if path.exists() else ""

    def set_faults(
        self,
        *,
        fail_calls: Sequence[int] = (),
        status: int = 503,
        delay_calls: dict[int, float] | None = None,
        delay_before_calls: dict[int, float] | None = None,
        hang_calls: Sequence[int] = (),
        hang_before_calls: Sequence[int] = (),
    ) -> None:
        """Replace the service's fault plan (see the module docstring)."""
        body = {
            "fail_calls": list(fail_calls),
            "status": status,
            "delay_calls": {str(k): v for k, v in (delay_calls or {}).items()},
            "delay_before_calls": {str(k): v for k, v in (delay_before_calls or {}).items()},
            "hang_calls": list(hang_calls),
            "hang_before_calls": list(hang_before_calls),
        }
        _request("POST", f"{self.url}/faults", body, timeout=5.0)

    def calls(self) -> int:
        """How many ``POST /refunds`` the running service has received."""
        return int(_request("GET", f"{self.url}/calls", timeout=5.0)["calls"])

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the child (SIGTERM, then SIGKILL after ``timeout``); idempotent."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._logs.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# -- the async client -----------------------------------------------------------------------


class PaymentsClient:
    """A small async client: each call runs ``urllib`` in a worker thread.

    Errors: :class:`PaymentsError` for a non-2xx answer (``status_code``; 429 and 5xx are
    transient), ``TimeoutError`` when no answer arrives within ``timeout`` seconds and
    ``ConnectionError`` when the service cannot be reached (``ConnectionRefusedError`` when
    nothing was sent, ``ConnectionResetError`` when the connection dropped mid-call). A cancelled call returns at once;
    its request may still reach the service (the ambiguous case this service exists to test).
    """

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    async def refund(
        self, order_id: str, amount_cents: int, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """``POST /refunds``: ``{refund_id, order_id, amount_cents, replayed}``."""
        body: dict[str, Any] = {"order_id": order_id, "amount_cents": amount_cents}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        answer: dict[str, Any] = await self._call("POST", "/refunds", body)
        return answer

    async def refunds(self) -> list[dict[str, Any]]:
        """``GET /refunds``: every refund, oldest first."""
        answer: list[dict[str, Any]] = await self._call("GET", "/refunds", None)
        return answer

    async def _call(self, method: str, path: str, body: object | None) -> Any:
        def run() -> Any:
            return _request(method, self.url + path, body, timeout=self.timeout)

        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)


if __name__ == "__main__":
    main()
