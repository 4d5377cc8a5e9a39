"""``tether dead-letters list | retry | discard``: messages that could not be processed."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

import tether
from tether.cli.base import EXIT_OK, Corrupt, add_command, login, non_empty, typed
from tether.cli.output import print_json, table
from tether.render.text import decode, when
from tether.store.records import DeadLetter


def register(commands: Any) -> None:
    dead = commands.add_parser("dead-letters", help="messages that could not be processed")
    acts = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    add_command(acts, "list", "dead letters, oldest first", cmd_list).add_argument(
        "--actor", metavar="ID", help="only this actor's dead letters"
    )
    for action, help_, handler in (
        ("retry", "put a dead letter back in its actor's mailbox", cmd_retry),
        ("discard", "delete a dead letter for good", cmd_discard),
    ):
        p = add_command(acts, action, help_, handler)
        p.add_argument("msg_id", metavar="MSG_ID")
        p.add_argument(
            "--by",
            type=non_empty,
            default=login(),
            metavar="NAME",
            help="who does it, for the audit log (default: your login name, now %(default)s)",
        )


async def cmd_list(rt: tether.Runtime, args: argparse.Namespace) -> int:
    corrupt = Corrupt()
    letters = await rt.dead_letters.list(args.actor, on_corrupt=corrupt)
    if args.json:
        print_json(
            [
                *({**msgspec.to_builtins(d), "payload": decode(d.payload)} for d in letters),
                *corrupt.json("msg_id"),
            ]
        )
    elif not letters and not corrupt.rows:
        print("no dead letters")
    else:
        _print_table(letters, rt.clock())
        corrupt.print()
    corrupt.check()
    return EXIT_OK


def _print_table(letters: list[DeadLetter], now: float) -> None:
    if not letters:
        return
    print(
        table(
            ["MSG_ID", "ACTOR", "TYPE", "ATTEMPTS", "WHEN", "REASON", "LAST ERROR"],
            [
                [
                    d.msg_id,
                    d.actor_id,
                    d.type,
                    d.attempts,
                    when(d.created_at, now),
                    d.reason,
                    next((e for e in reversed(d.errors) if e.startswith("attempt ")), ""),
                ]
                for d in letters
            ],
        )
    )


async def cmd_retry(rt: tether.Runtime, args: argparse.Namespace) -> int:
    await rt.dead_letters.retry(args.msg_id, identity=typed(args.by))
    if args.json:
        print_json({"msg_id": args.msg_id, "retried": True})
    else:
        print(f"{args.msg_id}: back in its actor's mailbox with a fresh attempt count")
    return EXIT_OK


async def cmd_discard(rt: tether.Runtime, args: argparse.Namespace) -> int:
    await rt.dead_letters.discard(args.msg_id, identity=typed(args.by))
    if args.json:
        print_json({"msg_id": args.msg_id, "discarded": True})
    else:
        print(f"{args.msg_id}: discarded")
    return EXIT_OK
