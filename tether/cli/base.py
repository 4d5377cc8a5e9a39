"""What every command shares: exit codes, ``CliError``, how a command is declared on the
parser (``add_command``), argument types, and the damaged-rows report of a listing."""

from __future__ import annotations

import argparse
import getpass
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import tether
from tether.actors.messages import TOO_DEEP, nesting_problem
from tether.render.records import CorruptRows
from tether.render.text import one_line
from tether.store.admin import StoreAdmin

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: A command run on a runtime opened for administration (``Runtime(serve=False)``).
Handler = Callable[[tether.Runtime, argparse.Namespace], Awaitable[int]]
#: A command run on the store alone, no runtime (``migrate``).
StoreHandler = Callable[[tether.Store, argparse.Namespace], Awaitable[int]]
#: A command that opens what it needs itself (``demo``, ``console``): its arguments and the
#: command line's words it did not parse.
DirectHandler = Callable[[argparse.Namespace, list[str]], int]
#: Checks of a command's arguments that argparse cannot express, run before the store opens.
Prepare = Callable[[argparse.Namespace], None]

APP_DIR_HELP = (
    "import the application's actor classes and tools from DIR "
    "(put first on sys.path; default: the current directory)"
)


class CliError(Exception):
    """An expected failure: printed as one ``tether: error:`` line, exit code ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        self.code = code
        super().__init__(message)


def add_command(
    group: Any,
    name: str,
    help_: str,
    handler: Handler,
    *,
    as_json: bool = True,
    prepare: Prepare | None = None,
) -> argparse.ArgumentParser:
    """A command on a runtime: ``--db`` and ``--app-dir`` may also follow it, and ``--json``
    unless ``as_json`` is false."""
    p: argparse.ArgumentParser = group.add_parser(name, help=help_, description=help_)
    p.add_argument("--db", default=argparse.SUPPRESS, help="the store: a file or a URL")
    p.add_argument("--app-dir", default=argparse.SUPPRESS, metavar="DIR", help=APP_DIR_HELP)
    if as_json:
        p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(handler=handler, prepare=prepare)
    return p


class Corrupt(CorruptRows):
    """Damaged rows a listing left out, by key: listed after the readable ones, then the
    command fails naming them (one damaged row must not hide the others, and a script must
    still learn that something was not read)."""

    def __init__(self, what: str = "damaged row(s) in the store") -> None:
        super().__init__()
        self.what = what

    def print(self) -> None:
        for _, err in self.rows:
            print(one_line(f"corrupt: {err}"))

    def check(self) -> None:
        if self.rows:
            raise CliError(
                f"{len(self.rows)} {self.what} (listed as corrupt): "
                + ", ".join(k for k, _ in self.rows)
            )


def admin(rt: tether.Runtime) -> StoreAdmin:
    """What the commands read from the store: no more than an administration tool may."""
    return rt.store


def typed(name: str) -> tether.Identity:
    """The CLI authenticates no one: ``--by`` is a name the person typed, audited as such
    (names nobody checked count as one approver together towards a quorum)."""
    return tether.Identity(name=name, via="cli", authenticated=False)


def login() -> str:
    """This process's login name, the default ``--by``."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name (a container's uid without a passwd entry)
        return f"uid {os.getuid()}"


# -- argument types -----------------------------------------------------------------------------


def whole_number(text: str) -> int:
    """A whole number, 0 or more."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {n}")
    return n


def non_empty(text: str) -> str:
    """A name or a reason: anything but blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def json_arg(text: str, option: str) -> Any:
    """``option``'s JSON value, refused unless a store can keep it and hand it back."""
    # Python's json accepts NaN, Infinity and numbers too large for a float (read as inf):
    # none of them is JSON, and stored as a tool's arguments or result they reach the agent
    # as values no JSON consumer can read back. Refuse them here, before anything is stored.
    try:
        value = json.loads(text, parse_constant=_not_json, parse_float=_finite_float)
        too_deep = nesting_problem(value)
    except ValueError as exc:  # JSONDecodeError, _NotJson, an int of over 4300 digits
        raise CliError(f"{option} is not valid JSON: {exc}", EXIT_USAGE) from None
    except RecursionError:  # deeper than json's parser goes, so far beyond the limit
        too_deep = TOO_DEEP
    if too_deep is not None:
        raise CliError(f"{option} cannot be stored: {too_deep}", EXIT_USAGE)
    return value


def json_kind(value: Any) -> str:
    """What a JSON value is, in words (for an error about the wrong kind)."""
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


class _NotJson(ValueError):
    pass


def _not_json(constant: str) -> Any:
    raise _NotJson(f"{constant} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotJson(f"the number {text} is too large")
    return value
