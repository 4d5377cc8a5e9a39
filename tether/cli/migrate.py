"""``tether migrate``: upgrade a store to this tether's schema version, offline.

A migration is one transaction: interrupted (Ctrl-C, a lost connection), it leaves the store
as it was, and running it again starts over. On a terminal, a line on stderr says so while it
runs (a large store's migration can take a while).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import tether
from tether.cli.base import EXIT_OK


def register(commands: Any) -> None:
    migrate = commands.add_parser(
        "migrate",
        help="upgrade the store to this tether's schema version (stop its runtimes first)",
        description="Upgrade the store to this tether's schema version, in one transaction. "
        "Stop every runtime on the store first.",
    )
    migrate.add_argument("--db", default=argparse.SUPPRESS, help="the store: a file or a URL")
    migrate.add_argument(
        "--force",
        action="store_true",
        help="go on although the store lists runtimes that may be alive (they are known gone)",
    )
    migrate.set_defaults(store_handler=cmd_migrate)


async def cmd_migrate(store: tether.Store, args: argparse.Namespace) -> int:
    if sys.stderr.isatty():
        print(
            f"migrating {args.db} in one transaction (interrupted, it changes nothing)...",
            file=sys.stderr,
            flush=True,
        )
    before, after = await store.migrate(force=args.force)
    if before == after:
        print(f"{args.db}: schema version {after} already; nothing to do")
    else:
        print(f"{args.db}: upgraded from schema version {before} to {after}")
    return EXIT_OK
