"""``tether approvals list | show | approve | reject | modify``: calls held for a person's
decision. A decision is stored; the runtime serving the session picks it up."""

from __future__ import annotations

import argparse
from typing import Any

import tether
from tether.cli.base import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Corrupt,
    add_command,
    admin,
    json_arg,
    json_kind,
    non_empty,
    typed,
)
from tether.cli.output import pairs, print_json, table
from tether.render.text import compact, when
from tether.runtime.approvals import view as approval_view


def register(commands: Any) -> None:
    approvals = commands.add_parser("approvals", help="calls held for a person's decision")
    acts = approvals.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = add_command(
        acts, "list", "approval requests (pending ones unless --status)", cmd_list
    )
    listing.add_argument(
        "--status", choices=("pending", "approved", "rejected", "all"), default="pending"
    )
    listing.add_argument("--session", metavar="ID", help="only this session's requests")
    add_command(acts, "show", "one approval request", cmd_show).add_argument(
        "request_id", metavar="ID"
    )
    for action, help_ in (
        ("approve", "approve the call as it stands"),
        ("reject", "reject the call; the reason goes back to the agent"),
        ("modify", "run the call with these arguments instead (validated by the tool)"),
    ):
        p = add_command(
            acts,
            action,
            help_,
            cmd_decide,
            prepare=_parse_modified_args if action == "modify" else None,
        )
        p.add_argument("request_id", metavar="ID")
        p.add_argument("--by", required=True, type=non_empty, metavar="NAME", help="who decides")
        if action == "reject":
            p.add_argument("--reason", required=True, type=non_empty, metavar="TEXT")
        if action == "modify":
            p.add_argument(
                "--args",
                required=True,
                dest="args_json",
                metavar="JSON",
                help="the tool's arguments, as a JSON object",
            )


def _parse_modified_args(args: argparse.Namespace) -> None:
    value = json_arg(args.args_json, "--args")
    if not isinstance(value, dict):
        raise CliError(
            f"--args must be a JSON object of the tool's arguments, not {json_kind(value)}",
            EXIT_USAGE,
        )
    args.modify_args = value


async def cmd_list(rt: tether.Runtime, args: argparse.Namespace) -> int:
    status = None if args.status == "all" else args.status
    # A request whose record cannot be decoded is listed as corrupt, by id (``approvals show``
    # on it gives the error).
    corrupt = Corrupt("approval request(s) cannot be decoded")
    records = await admin(rt).find_approvals(
        status=status, actor_id=args.session, on_corrupt=corrupt
    )
    rows = [approval_view(r) for r in records]
    if args.json:
        print_json([*rows, *corrupt.json("request_id")])
    elif not rows and not corrupt.rows:
        which = "" if status is None else f"{status} "
        print(f"no {which}approval requests")
    else:
        if rows:
            _print_table(rows, rt.clock())
        corrupt.print()
    corrupt.check()
    return EXIT_OK


def _print_table(rows: list[tether.ApprovalRequest], now: float) -> None:
    print(
        table(
            ["REQUEST", "SESSION", "TOOL", "ARGS", "STATUS", "APPROVALS", "DEADLINE", "REASON"],
            [
                [
                    a.request_id,
                    a.session_id,
                    a.tool,
                    compact(a.args),
                    a.status,
                    f"{len(a.approved_by)}/{a.approvers_needed}",
                    when(a.deadline, now) if a.status == "pending" else "-",
                    a.reason,
                ]
                for a in rows
            ],
        )
    )


async def cmd_show(rt: tether.Runtime, args: argparse.Namespace) -> int:
    request = await rt.approvals.get(args.request_id)
    if args.json:
        print_json(request)
    else:
        print(approval_text(request, rt.clock()))
    return EXIT_OK


def approval_text(a: tether.ApprovalRequest, now: float) -> str:
    """One request, every field on its line, then its decisions."""
    items = [
        ("request", a.request_id),
        ("session", a.session_id),
        ("tool", a.tool),
        ("args", compact(a.args, cut_at=None)),
    ]
    if a.requested_args != a.args:
        items.append(("requested", compact(a.requested_args, cut_at=None)))
    items += [
        ("status", a.status),
        ("reason", a.reason),
        (
            "approvals",
            f"{len(a.approved_by)} of {a.approvers_needed}: {', '.join(a.approved_by) or '-'}",
        ),
        ("deadline", f"{when(a.deadline, now)}, then {a.on_timeout}"),
        ("created", when(a.created_at, now)),
    ]
    items += [
        (f"context.{k}", v if isinstance(v, str) else compact(v, cut_at=None))
        for k, v in a.context.items()
    ]
    lines = [pairs(items)]
    if a.decisions:
        lines.append("decisions:")
        for d in a.decisions:
            extra = f": {d['reason']}" if d.get("reason") else ""
            if "args" in d:
                extra += f" args={compact(d['args'], cut_at=None)}"
            lines.append(f"  {when(d['at'], now)}  {d['kind']} by {d['by']}{extra}")
    return "\n".join(lines)


async def cmd_decide(rt: tether.Runtime, args: argparse.Namespace) -> int:
    decision: tether.Approve | tether.Reject | tether.Modify
    if args.action == "approve":
        decision = tether.Approve(by=args.by)
    elif args.action == "reject":
        decision = tether.Reject(by=args.by, reason=args.reason)
    else:
        decision = tether.Modify(by=args.by, args=args.modify_args)
    request = await rt.approvals.decide(args.request_id, decision, identity=typed(args.by))
    if args.json:
        print_json(request)
    elif request.status == "pending":
        print(
            f"{request.request_id}: {args.action} by {args.by} recorded; "
            f"{len(request.approved_by)} of {request.approvers_needed} approval(s), still pending"
        )
    else:
        print(
            f"{request.request_id}: {request.status} ({request.tool}({compact(request.args)})); "
            f"session {request.session_id} resumes in the runtime that serves it"
        )
    return EXIT_OK
