"""``tether console``: the web approval console, with its own options
(``tether.console.command``); it needs the ``console`` extra."""

from __future__ import annotations

import argparse
from typing import Any

from tether.cli.base import CliError


def register(commands: Any) -> None:
    console = commands.add_parser(
        "console",
        help="the web approval console (pip install 'tether[console]'); "
        "`tether console --help` for its options",
        add_help=False,
    )
    # What follows ``console`` on the command line is handed over as it is.
    console.set_defaults(direct=run_console, takes_rest=True)


def run_console(args: argparse.Namespace, rest: list[str]) -> int:
    try:
        from tether.console.command import main as console_main
    except ImportError as exc:  # the extra is not installed
        raise CliError(
            f"the console needs its extra: pip install 'tether[console]' ({exc})"
        ) from None
    return console_main(rest, default_db=args.db)
