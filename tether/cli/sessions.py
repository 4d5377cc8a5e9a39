"""``tether actors``, ``sessions``, ``show`` and ``tree``: what the store holds, actor by
actor."""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

import tether
from tether.actors.session import MODEL_TOOL
from tether.cli.base import EXIT_OK, Corrupt, add_command, admin, whole_number
from tether.cli.output import indent, pairs, print_json, table
from tether.render.journal import decision, describe
from tether.render.records import (
    MAILBOX_LIMIT,
    actor_summary,
    effect_view,
    is_session,
    journal_after,
    lease_text,
    message_view,
    session_view,
)
from tether.render.text import compact, cut, decode, pretty, when
from tether.runtime.approvals import view as approval_view
from tether.store.records import ActorRecord

_TEXT_WIDTH = 200  # a goal, belief or answer in ``show``: a detail view, cut only when long


def register(commands: Any) -> None:
    add_command(commands, "actors", "every actor in the store", cmd_actors)
    add_command(
        commands,
        "sessions",
        "the agent sessions (top-level actors of the application)",
        cmd_sessions,
    )
    show = add_command(
        commands,
        "show",
        "one actor: record, state, journal, mailbox, effects, approvals",
        cmd_show,
    )
    show.add_argument("actor_id", metavar="ID")
    show.add_argument(
        "--events",
        type=whole_number,
        default=10,
        metavar="N",
        help="journal events to show (default: 10)",
    )
    add_command(commands, "tree", "the supervision tree", cmd_tree)


async def cmd_actors(rt: tether.Runtime, args: argparse.Namespace) -> int:
    corrupt = Corrupt()
    records = await admin(rt).list_actors(on_corrupt=corrupt)
    return await _list_actors(rt, args, records, "actors", corrupt)


async def cmd_sessions(rt: tether.Runtime, args: argparse.Namespace) -> int:
    # A damaged row cannot say whether it is a session: it is listed as corrupt here too.
    corrupt = Corrupt()
    records = [r for r in await admin(rt).list_actors(on_corrupt=corrupt) if is_session(r)]
    return await _list_actors(rt, args, records, "sessions", corrupt, sessions=True)


async def _list_actors(
    rt: tether.Runtime,
    args: argparse.Namespace,
    records: list[ActorRecord],
    what: str,
    corrupt: Corrupt,
    *,
    sessions: bool = False,
) -> int:
    """The listing of ``actors`` and ``sessions``: STATUS is the actor's (an ``ActorStatus``,
    as ``tether tree`` says it); a session's TASK is its ``SessionInfo.status``."""
    store = admin(rt)
    now, lease_now = rt.clock(), await store.store_time()
    rows = [await actor_summary(store, rec, now, lease_now, corrupt) for rec in records]
    headers = ["ID", "CLASS", "STATUS", "MAILBOX", "PARKED", "JOURNAL", "LEASE"]
    if sessions:
        for row, rec in zip(rows, records, strict=True):
            info = await session_view(rt, rec, corrupt)
            row["task_status"] = info["status"] if info is not None else None
            row["task"] = info["task"] if info is not None else None
        headers.insert(3, "TASK")
    if args.json:
        print_json([*rows, *corrupt.json("id")])
    elif not rows and not corrupt.rows:
        print(f"no {what} in {args.db}")
    elif not rows:
        corrupt.print()
    else:
        cells = [
            [
                r["id"],
                r["class"],
                r["status"],
                r["mailbox"],
                r["parked"],
                r["journal"],
                lease_text(r),
            ]
            for r in rows
        ]
        if sessions:
            for cell, r in zip(cells, rows, strict=True):
                task = "-" if r["task_status"] is None else r["task_status"]
                cell.insert(3, f"task {r['task']} {task}" if r["task"] else task)
        print(table(headers, cells))
        corrupt.print()
    corrupt.check()
    return EXIT_OK


async def cmd_show(rt: tether.Runtime, args: argparse.Namespace) -> int:
    store = admin(rt)
    rec = await store.get_actor(args.actor_id)
    if rec is None:
        raise tether.ActorNotFound(args.actor_id)
    now, lease_now = rt.clock(), await store.store_time()
    corrupt = Corrupt()
    summary = await actor_summary(store, rec, now, lease_now, corrupt)
    snap = await store.load_snapshot(rec.actor_id)
    after = await journal_after(store, rec.actor_id, snap.seq if snap is not None else 0)
    total = summary["journal"]
    first = max(0, total - args.events)
    recent = await journal_after(store, rec.actor_id, first) if args.events else []
    # Counted by the summary (damaged rows reported there); listed here.
    mailbox = await store.list_messages(rec.actor_id, MAILBOX_LIMIT, on_corrupt=Corrupt())
    effects = await store.find_effects(actor_id=rec.actor_id, on_corrupt=corrupt)
    requests = [
        approval_view(r)
        for r in await store.find_approvals(actor_id=rec.actor_id, on_corrupt=corrupt)
    ]
    pending = await rt.approvals.pending(rec.actor_id)
    session = await session_view(rt, rec, corrupt)
    out: dict[str, Any] = {
        "actor": summary,
        "session": session,
        "init": decode(rec.init),
        "snapshot": None if snap is None else {"seq": snap.seq, "state": decode(snap.state)},
        "events_since_snapshot": len(after),
        "journal": [{"seq": seq, "event": event} for seq, event in recent],
        "mailbox": [message_view(m, now) for m in mailbox],
        "effects": [effect_view(e) for e in effects],
        "approvals": [msgspec.to_builtins(a) for a in requests],
        "pending_approvals": [msgspec.to_builtins(a) for a in pending],
    }
    if corrupt.rows:
        out["corrupt"] = corrupt.json("key")
    if args.json:
        print_json(out)
        corrupt.check()
        return EXIT_OK
    stop = f" ({rec.stop_reason})" if rec.stop_reason else ""
    lease = lease_text(summary)
    if rec.lease_owner:
        lease += f", until {when(rec.lease_expires, lease_now)}"
    print(
        pairs(
            [
                ("actor", rec.actor_id),
                ("class", rec.class_path),
                ("parent", rec.parent_id or "-"),
                ("status", summary["status"] + stop),
                ("lease", f"{lease} (fence {rec.fence})"),
                ("created", when(rec.created_at, now)),
                ("init", compact(out["init"])),
            ]
        )
    )
    print()
    if session is not None:
        print(session_text(session))
        print()
    if snap is None:
        print(f"state: no snapshot; the initial state folded with {len(after)} event(s)")
    else:
        print(f"state: snapshot at seq {snap.seq}, then {len(after)} event(s) after it")
        print(indent(pretty(out["snapshot"]["state"])))
    print()
    shown = f"; the last {len(recent)}" if len(recent) < total else ""
    print(f"journal: {total} event(s){shown}")
    for seq, event in recent:
        print(f"  {seq:>6}  {describe(event)}")
    print()
    print(f"mailbox: {len(mailbox)} message(s)")
    if mailbox:
        rows = [
            [m["msg_id"], m["type"], m["attempts"], m["parks"], m["state"], m["last_error"] or ""]
            for m in out["mailbox"]
        ]
        print(indent(table(["MSG_ID", "TYPE", "ATTEMPTS", "PARKS", "STATE", "LAST ERROR"], rows)))
    print()
    print(f"effects: {len(effects)}")
    for e in out["effects"]:
        print("  " + _effect_line(e))
        if e["reason"]:
            print(f"      reason: {e['reason']}")
        for note in e["history"]:
            print(f"      - {note}")
    print()
    waiting = sum(a.status == "pending" for a in requests)
    print(f"approvals: {len(requests)} ({waiting} pending)")
    for a in requests:
        print("  " + approval_line(a, now))
    if corrupt.rows:
        print()
        corrupt.print()
    corrupt.check()
    return EXIT_OK


def session_text(s: dict[str, Any]) -> str:
    """An agent session's ``SessionInfo`` (as ``msgspec.to_builtins`` gives it): its status,
    goal, task and how it ended, belief and frontier."""
    items = [("goal", cut(s["goal"], _TEXT_WIDTH))]
    if s["task"]:
        # Committed steps only: the one under way shows once it commits.
        done = f"{s['steps']} step(s) committed"
        items.append(("task", f"{s['task']}, {done}: {cut(s['task_text'], _TEXT_WIDTH)}"))
    if s["status"] != "working" and s["outcome"]:
        items.append(("outcome", cut(s["outcome"], _TEXT_WIDTH)))
        if s["last_answer"]:
            items.append(("answer", cut(s["last_answer"], _TEXT_WIDTH)))
    items += [(name, cut(s[name], _TEXT_WIDTH)) for name in ("belief", "frontier") if s[name]]
    usage = s.get("usage") or {}
    if usage.get("total_tokens"):
        items.append(
            (
                "tokens",
                f"{usage['total_tokens']} ({usage['input_tokens']} in, "
                f"{usage['output_tokens']} out)",
            )
        )
    return f"session: {s['status']}\n" + indent(pairs(items))


def approval_line(a: tether.ApprovalRequest, now: float) -> str:
    """One approval request on a line: the call, where it stands, who decided and when."""
    call = f"{a.request_id}  {a.tool}({compact(a.args, cut_at=40)})"
    count = f"{len(a.approved_by)}/{a.approvers_needed}"
    if a.status == "pending":
        return f"{call}  pending {count}, deadline {when(a.deadline, now)}"
    last = a.decisions[-1] if a.decisions else {}
    by = f" by {last['by']}" if last.get("by") else ""
    why = f": {cut(str(last['reason']), 40)}" if last.get("reason") else ""
    at = f", {when(last['at'], now)}" if last.get("at") is not None else ""
    return f"{call}  {a.status}{by}{why} ({count}){at}"


def _effect_line(e: dict[str, Any]) -> str:
    if e["tool"] == MODEL_TOOL and isinstance(e["args"], dict):
        # Its arguments are the whole context the model was shown: say what it decided.
        call = "model(the session's context)"
        outcome = decision(e["result"]) if e["status"] == "done" else cut(e["error"] or "")
    else:
        call = f"{e['tool']}({compact(e['args'])})"
        outcome = compact(e["result"]) if e["status"] == "done" else cut(e["error"] or "")
    return f"{e['key']}  #{e['index']} {call} {e['status']}, {e['attempts']} attempt(s)" + (
        f" -> {outcome}" if outcome else ""
    )


async def cmd_tree(rt: tether.Runtime, args: argparse.Namespace) -> int:
    corrupt = Corrupt()
    roots = await rt.tree(on_corrupt=corrupt)
    if args.json:
        print_json([*msgspec.to_builtins(roots), *corrupt.json("id")])
    elif not roots and not corrupt.rows:
        print(f"no actors in {args.db}")
    else:
        for root in roots:
            print(root.render())
        corrupt.print()
    corrupt.check()
    return EXIT_OK
