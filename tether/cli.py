"""The ``tether`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tether", description="Supervised, durable actors for AI agents."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="run the durable-counter demo on an embedded SQLite store"
    )
    demo.add_argument(
        "--store", default="tether-demo.db", help="store file to create (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    if args.command == "demo":
        from tether.demo import run

        return run(args.store)
    parser.error(f"unknown command {args.command!r}")  # exits


if __name__ == "__main__":
    sys.exit(main())
