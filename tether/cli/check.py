"""``tether check``: the integrity check of a whole store, as the CLI prints it.

The check is ``tether.runtime.check``; this module only formats its report: one line per
violation then a summary (exit 1 if any, else 0), or ``--json``. On a terminal, a progress
bar on stderr while the actors are checked.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

import tether
from tether.cli.base import add_command
from tether.runtime.check import check_runtime_store

EXIT_OK = 0
EXIT_VIOLATIONS = 1
_BAR_WIDTH = 30


class ProgressBar:
    """``checking actors [#####     ] 512/1000`` on ``out``, redrawn at most 10 times a second,
    erased when done. Drawn only on a terminal: a script's stderr gets nothing."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        filled = _BAR_WIDTH * done // max(total, 1)
        bar = "#" * filled + " " * (_BAR_WIDTH - filled)
        self.out.write(f"\rchecking actors [{bar}] {done}/{total}")
        if done >= total:
            self.out.write("\r" + " " * (_BAR_WIDTH + 40) + "\r")
        self.out.flush()


def register(commands: Any) -> None:
    add_command(
        commands,
        "check",
        "check the whole store's integrity (after an incident): exit 1 naming each violation",
        cmd_check,
    )


async def cmd_check(rt: tether.Runtime, args: argparse.Namespace) -> int:
    progress = ProgressBar(sys.stderr) if sys.stderr.isatty() and not args.json else None
    report = await check_runtime_store(rt, name=args.db, progress=progress)
    if args.json:
        sys.stdout.write(report.json().decode() + "\n")
    else:
        sys.stdout.write(report.summary() + "\n")
    return EXIT_OK if report.ok else EXIT_VIOLATIONS
