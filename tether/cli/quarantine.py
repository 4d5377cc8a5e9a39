"""``tether quarantine list | show | resolve``: effects whose outcome is ambiguous, held for a
person. A resolution is stored; the runtime serving the actor picks it up."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

import tether
from tether.cli.base import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Corrupt,
    add_command,
    json_arg,
    non_empty,
    typed,
)
from tether.cli.output import pairs, print_json, table
from tether.render.text import compact, when


def register(commands: Any) -> None:
    quarantine = commands.add_parser("quarantine", help="ambiguous effects held for a person")
    acts = quarantine.add_subparsers(dest="action", required=True, metavar="ACTION")
    add_command(acts, "list", "quarantined effects", cmd_list).add_argument(
        "--actor", metavar="ID", help="only this actor's effects"
    )
    add_command(acts, "show", "one quarantined effect", cmd_show).add_argument("key", metavar="KEY")
    resolve = add_command(
        acts, "resolve", "resolve a quarantined effect", cmd_resolve, prepare=_check_resolve
    )
    resolve.add_argument("key", metavar="KEY")
    how = resolve.add_mutually_exclusive_group(required=True)
    how.add_argument("--done", action="store_true", help="the call did happen (see --result)")
    how.add_argument("--retry", action="store_true", help="call again, with the same key")
    how.add_argument("--abort", action="store_true", help="do not call; the step is told why")
    resolve.add_argument(
        "--result", dest="result_json", metavar="JSON", help="with --done: the call's result"
    )
    resolve.add_argument("--reason", type=non_empty, metavar="TEXT", help="with --abort: why")
    resolve.add_argument("--by", required=True, type=non_empty, metavar="NAME", help="who resolves")


def _check_resolve(args: argparse.Namespace) -> None:
    if args.result_json is not None and not args.done:
        raise CliError("--result goes with --done", EXIT_USAGE)
    if args.reason is not None and not args.abort:
        raise CliError("--reason goes with --abort", EXIT_USAGE)
    if args.abort and args.reason is None:
        raise CliError(
            "--abort needs --reason TEXT: the step (and its agent) is told it", EXIT_USAGE
        )
    args.result = None if args.result_json is None else json_arg(args.result_json, "--result")


async def cmd_list(rt: tether.Runtime, args: argparse.Namespace) -> int:
    corrupt = Corrupt()
    rows = await rt.quarantine.list(args.actor, on_corrupt=corrupt)
    if args.json:
        print_json([*msgspec.to_builtins(rows), *corrupt.json("key")])
    elif not rows and not corrupt.rows:
        print("no quarantined effects")
    else:
        _print_table(rows, rt.clock())
        corrupt.print()
    corrupt.check()
    return EXIT_OK


def _print_table(rows: list[tether.QuarantinedEffect], now: float) -> None:
    if not rows:
        return
    print(
        table(
            ["KEY", "ACTOR", "#", "TOOL", "ARGS", "ATTEMPTS", "SINCE", "REASON"],
            [
                [
                    q.key,
                    q.actor_id,
                    q.index,
                    q.tool,
                    compact(q.args),
                    q.attempts,
                    when(q.since, now),
                    q.reason,
                ]
                for q in rows
            ],
        )
    )


async def cmd_show(rt: tether.Runtime, args: argparse.Namespace) -> int:
    q = await rt.quarantine.get(args.key)
    if args.json:
        print_json(q)
        return EXIT_OK
    now = rt.clock()
    print(
        pairs(
            [
                ("key", q.key),
                ("actor", q.actor_id),
                ("message", f"{q.msg_id}, effect #{q.index}"),
                ("tool", q.tool),
                ("args", compact(q.args, cut_at=None)),
                ("attempts", str(q.attempts)),
                ("since", when(q.since, now)),
                ("reason", q.reason),
            ]
        )
    )
    if q.history:
        print("history:")
        for note in q.history:
            print(f"  - {note}")
    return EXIT_OK


async def cmd_resolve(rt: tether.Runtime, args: argparse.Namespace) -> int:
    q = await rt.quarantine.get(args.key)
    who = typed(args.by)
    if args.done:
        await rt.quarantine.mark_done(args.key, args.result, identity=who)
        what = "marked done" + (
            f" with result {compact(args.result)}" if args.result is not None else ""
        )
    elif args.retry:
        await rt.quarantine.retry(args.key, identity=who)
        what = "to be called again with the same key"
    else:
        await rt.quarantine.abort(args.key, args.reason, identity=who)
        what = f"aborted: {args.reason}"
    resolution = "done" if args.done else "retry" if args.retry else "aborted"
    if args.json:
        print_json(
            {
                "key": q.key,
                "actor_id": q.actor_id,
                "tool": q.tool,
                "resolution": resolution,
                "by": args.by,
            }
        )
    else:
        print(f"{q.key} ({q.tool} of {q.actor_id}): {what}, by {args.by}")
    return EXIT_OK
