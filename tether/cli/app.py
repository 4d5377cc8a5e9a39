"""The command line: the parser assembled from the command groups, and ``main``, which runs a
command and turns expected failures into one ``tether: error:`` line and an exit code."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence

import anyio
import structlog

import tether
from tether import app_dir as app_dir_module
from tether.cli import (
    approvals,
    audit,
    check,
    console,
    copy,
    dead_letters,
    demo,
    migrate,
    quarantine,
    sessions,
)
from tether.cli.base import (
    APP_DIR_HELP,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    DirectHandler,
    Handler,
    Prepare,
    StoreHandler,
)
from tether.errors import ConfigError
from tether.render.text import one_line
from tether.store.open import open_store

#: The command groups, in the order ``tether --help`` lists them. A new group is a module
#: with ``register(commands)``, added here.
COMMAND_GROUPS = (
    sessions,
    check,
    approvals,
    quarantine,
    dead_letters,
    audit,
    console,
    migrate,
    copy,
    demo,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tether`` command with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    parser = build_parser()
    try:
        # A command that takes its own options (``tether console``) is handed the words the
        # parser did not know, as they are.
        args, rest = parser.parse_known_args(argv)
        if rest and not getattr(args, "takes_rest", False):
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
    except SystemExit as exc:  # --help, or a usage error argparse already explained
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        use_app_dir(args.app_dir)
        direct: DirectHandler | None = getattr(args, "direct", None)
        if direct is not None:
            return direct(args, rest)
        prepare: Prepare | None = getattr(args, "prepare", None)
        if prepare is not None:
            prepare(args)
        with _logs_to_stderr():
            code: int = anyio.run(_run, args.db, args)
        return code
    except KeyboardInterrupt:
        print("tether: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `tether actors | head`: the reader left; not an error of ours
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except BaseException as exc:
        expected = _expected(exc)
        if expected is None:
            raise
        if isinstance(expected, KeyboardInterrupt | asyncio.CancelledError):
            print("tether: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        code = expected.code if isinstance(expected, CliError) else EXIT_FAILED
        print(f"tether: error: {one_line(str(expected))}", file=sys.stderr)
        return code


async def _run(db: str, args: argparse.Namespace) -> int:
    try:
        store = open_store(db, create=False)  # a store that does not exist is an error
        store_handler: StoreHandler | None = getattr(args, "store_handler", None)
        if store_handler is not None:
            return await store_handler(store, args)
        async with tether.Runtime(store=store, serve=False) as rt:
            handler: Handler = args.handler
            return await handler(rt, args)
    except tether.StoreOpenError as exc:
        if "TETHER_DB" in os.environ:
            raise
        raise CliError(f"{exc} (give --db PATH or set TETHER_DB)") from exc


def _expected(exc: BaseException) -> BaseException | None:
    """The error to report for ``exc`` (unwrapping a task group's single error), or None if it
    is a bug that deserves its traceback."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [_expected(e) for e in exc.exceptions]
        if leaves and all(e is not None for e in leaves):
            return leaves[0]
        return None
    expected = (CliError, tether.TetherError, OSError, KeyboardInterrupt)
    if isinstance(exc, (*expected, asyncio.CancelledError)):
        return exc
    return None


@contextlib.contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """Keep stdout for the command's output: tether's logs go to stderr, warnings and up
    (unless the application configured structlog itself)."""
    if structlog.is_configured():
        yield
        return
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    try:
        yield
    finally:
        structlog.reset_defaults()


def use_app_dir(app_dir: str) -> None:
    """``tether.app_dir.use_app_dir``, its refusal a usage error of the command line."""
    try:
        app_dir_module.use_app_dir(app_dir)
    except ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tether",
        description="Supervised, durable actors for AI agents: inspect and administer a store.",
    )
    default_db = os.environ.get("TETHER_DB") or "tether.db"
    parser.add_argument(
        "--db",
        default=default_db,
        help="the store: a file, or a URL (sqlite:///a.db, postgresql://…); "
        "default: $TETHER_DB, else tether.db; now %(default)s",
    )
    parser.add_argument("--app-dir", default=".", metavar="DIR", help=APP_DIR_HELP)
    parser.add_argument("--version", action="version", version=f"%(prog)s {tether.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in COMMAND_GROUPS:
        group.register(commands)
    return parser
