"""``tether demo``: a refund agent killed mid-refund and resumed (``tether.demo``)."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="a refund agent killed mid-refund and resumed, on an embedded SQLite store",
    )
    demo.add_argument(
        "--db",
        "--store",
        dest="demo_db",
        metavar="PATH",
        default="tether-demo.db",
        help="store file to create, replacing an old one (default: %(default)s)",
    )
    demo.set_defaults(direct=run_demo)


def run_demo(args: argparse.Namespace, rest: list[str]) -> int:
    from tether.demo import run

    return run(args.demo_db)
