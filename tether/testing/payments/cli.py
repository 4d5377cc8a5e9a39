"""``python -m tether.testing.payments serve``: the service's command line, and its process
serving until SIGTERM or Ctrl-C after printing its one listening line."""

from __future__ import annotations

import argparse
import math
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from tether.testing.payments.ledger import Ledger
from tether.testing.payments.server import Server

LISTENING_PREFIX = "listening on "


def run_server(db: str, port: int, *, honor_keys: bool, delay: float, host: str) -> None:
    ledger = Ledger(db, honor_keys=honor_keys, delay=delay)
    server = Server((host, port), ledger)

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


def delay_problem(delay: object) -> str | None:
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
    problem = delay_problem(value)
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
    run_server(
        args.db, args.port, honor_keys=not args.ignore_keys, delay=args.delay, host=args.host
    )
