"""``tether audit``: every attempted decision or resolution, allowed or refused."""

from __future__ import annotations

import argparse
from typing import Any

import tether
from tether.cli.base import EXIT_OK, add_command, admin, whole_number
from tether.cli.output import print_json, table
from tether.render.text import when


def register(commands: Any) -> None:
    audit = add_command(
        commands,
        "audit",
        "the audit log: every attempted decision or resolution, allowed or refused, newest first",
        cmd_audit,
    )
    audit.add_argument(
        "--target", metavar="ID", help="only attempts on this request, key or message"
    )
    audit.add_argument("--actor", metavar="ID", help="only attempts concerning this actor")
    audit.add_argument(
        "--limit", type=whole_number, default=100, metavar="N", help="rows to show (default: 100)"
    )
    audit.add_argument(
        "--before", type=whole_number, metavar="SEQ", help="only rows older than this one (paging)"
    )


async def cmd_audit(rt: tether.Runtime, args: argparse.Namespace) -> int:
    rows = await admin(rt).list_audit(
        target=args.target, actor_id=args.actor, before=args.before, limit=args.limit
    )
    if args.json:
        print_json(rows)
    elif not rows:
        print("no audit rows" + (" matching" if args.target or args.actor else ""))
    else:
        now = rt.clock()
        print(
            table(
                ["SEQ", "WHEN", "WHO", "VIA", "ACTION", "TARGET", "VERSION", "OUTCOME", "DETAIL"],
                [
                    [
                        a.seq,
                        when(a.at, now),
                        a.identity if a.authenticated else f"{a.identity} (unauthenticated)",
                        a.via + (f" {a.remote}" if a.remote else ""),
                        a.action,
                        a.target,
                        "-"
                        if a.version_before is None
                        else f"{a.version_before}->{'-' if a.version_after is None else a.version_after}",
                        a.outcome,
                        a.detail,
                    ]
                    for a in rows
                ],
            )
        )
    return EXIT_OK
