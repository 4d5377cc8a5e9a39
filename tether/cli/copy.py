"""``tether copy SRC DST``: move a stopped store to another backend (``tether.store.copy``).

The usual move is an SQLite file to PostgreSQL, when one machine is outgrown::

    tether copy agents.db postgresql://tether@db.internal/agents

Both stores must be stopped (no runtime serving either), the destination empty (``--resume``
finishes an interrupted copy into it), and at this tether's schema version (``tether
migrate`` an older one first). Each table is copied page by page and counted on both sides,
then both stores are checked as ``tether check`` checks one; on a terminal, a progress line
per table goes to stderr. Interrupted, it says how to finish.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

import anyio

from tether.cli.base import EXIT_FAILED, EXIT_OK, whole_number
from tether.cli.output import print_json, table
from tether.runtime.check import check_runtime_store
from tether.runtime.runtime import Runtime
from tether.store.copy import CopyReport, copy_store
from tether.store.copy.run import PAGE_SIZE, describe
from tether.store.open import open_store


def register(commands: Any) -> None:
    copy = commands.add_parser(
        "copy",
        help="copy a stopped store to another backend (SQLite -> PostgreSQL), verified by counts",
        description="Copy every table of the stopped store SRC into DST (a new store, created if "
        "missing), then count the rows of each table on both sides. SRC and DST are files or "
        "URLs (postgresql://…). Stop every runtime on both first.",
    )
    copy.add_argument("source", metavar="SRC", help="the store to copy: a file or a URL")
    copy.add_argument("destination", metavar="DST", help="the new store: a file or a URL")
    copy.add_argument(
        "--resume",
        action="store_true",
        help="DST holds an interrupted copy of SRC: keep what is there, copy the rest",
    )
    copy.add_argument(
        "--force",
        action="store_true",
        help="go on although a store lists runtimes this host cannot tell are gone (runtimes "
        "of other hosts that you know are stopped)",
    )
    copy.add_argument(
        "--page-size",
        type=_at_least_one,
        default=PAGE_SIZE,
        metavar="N",
        help="rows per transaction in DST (default: %(default)s)",
    )
    copy.add_argument("--json", action="store_true", help="print the report as JSON")
    copy.set_defaults(direct=run_copy)


async def store_check(url: str) -> list[str]:
    """``tether check`` of the whole (closed) store at ``url``: each violation, one sentence
    (``copy_store(check=…)``). Counts alone would pass a copy whose rows are all there but do
    not fit together; this reads them as a runtime would."""
    async with Runtime(store=open_store(url, create=False), serve=False) as rt:
        report = await check_runtime_store(rt, name=url)
    return [f"{v.kind}: {v.message}" for v in report.violations]


def _at_least_one(text: str) -> int:
    n = whole_number(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {n}")
    return n


def run_copy(args: argparse.Namespace, rest: list[str]) -> int:
    progress = Progress(sys.stderr)
    try:
        report = anyio.run(_copy, args, progress)
    except KeyboardInterrupt:
        progress.end()
        print(
            f"tether: the copy was interrupted; {args.destination} holds part of it: run the "
            "same command with --resume to finish it (rows already there are kept)",
            file=sys.stderr,
        )
        raise
    finally:
        progress.end()
    if args.json:
        print_json(describe(report))
    else:
        print(summary(report, args.source, args.destination))
    return EXIT_FAILED if report.mismatches() else EXIT_OK


async def _copy(args: argparse.Namespace, progress: Progress) -> CopyReport:
    return await copy_store(
        args.source,
        args.destination,
        resume=args.resume,
        force=args.force,
        page_size=args.page_size,
        progress=progress,
        check=store_check,
    )


def summary(report: CopyReport, source: str, destination: str) -> str:
    rows = [(t.table, t.source, t.destination, t.inserted) for t in report.tables]
    lines = [table(("table", "source", "destination", "copied now"), rows)]
    for name, columns in report.ignored.items():
        lines.append(f"not kept: {name}.{', '.join(columns)} ({destination} has no such column)")
    bad = report.mismatches()
    if bad:
        lines += [f"MISMATCH: {b}" for b in bad]
        lines.append(f"the copy of {source} in {destination} is not whole: do not serve it")
    else:
        if report.checks:
            lines.append("tether check: no violation in the source or in the destination")
        lines.append(
            f"OK: {report.copied:,} rows in {len(report.tables)} tables copied from {source} to "
            f"{destination}, the same count in every table"
        )
    return "\n".join(lines)


class Progress:
    """One line per table on ``stream`` while it is copied, when ``stream`` is a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.shown = stream.isatty()
        self.open = False

    def __call__(self, table_name: str, done: int, total: int) -> None:
        if not self.shown:
            return
        if done == 0 and self.open:
            self.stream.write("\n")
        share = f" {100 * done // total:3d}%" if total else ""
        self.stream.write(f"\rcopying {table_name:<13} {done:>12,} / {total:,} rows{share}")
        self.stream.flush()
        self.open = True

    def end(self) -> None:
        if self.open:
            self.stream.write("\n")
            self.stream.flush()
            self.open = False
