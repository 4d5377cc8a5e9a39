"""What each page shows, read from the store through ``StoreAdmin`` and ``rt.approvals``: plain
dicts and lists for the templates and the JSON API. Nothing here changes the store.

A session is shown as ``tether show`` shows it (the readers it shares with the CLI, ``tether.render``), with
its timeline drawn (``timeline.py``).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

import tether
from tether.actors.actor import class_path, import_object
from tether.actors.guards.actors import Breaker
from tether.actors.guards.gate import ApprovalRequest
from tether.actors.session import MODEL_TOOL
from tether.actors.tool import Tool
from tether.console import timeline
from tether.render import journal as journal_lines
from tether.render import records, text
from tether.runtime.journal import folded
from tether.store.records import ApprovalRecord

RECENT_EVENTS = 12
RECENT_EFFECTS = 20


def when(ts: float | None, now: float) -> dict[str, Any] | None:
    """A time for a page: its clock text, how far from now, and the raw value (the page's
    script counts deadlines down from it)."""
    if ts is None:
        return None
    delta = ts - now
    span = text.span(abs(delta))
    return {
        "at": ts,
        "clock": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)),
        "relative": f"in {span}" if delta > 0 else f"{span} ago",
        "past": delta <= 0,
    }


def pretty(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value, enc_hook=repr), indent=2).decode()


def compact(value: Any, width: int = 70) -> str:
    """``value`` as JSON on one line, cut to ``width``: a space after each comma and colon,
    so that a narrow column wraps it between values, not inside one."""
    encoded = msgspec.json.encode(value, enc_hook=repr)
    text = msgspec.json.format(encoded, indent=0).decode()
    return text if len(text) <= width else text[: width - 1] + "…"


def approval_row(a: ApprovalRequest, now: float) -> dict[str, Any]:
    """One request as the list shows it."""
    return {
        "id": a.request_id,
        "session": a.session_id,
        "tool": a.tool,
        "args": compact(a.args),
        "reason": a.reason,
        "status": a.status,
        "age": when(a.created_at, now),
        "deadline": when(a.deadline, now),
        "on_timeout": a.on_timeout,
        "counted": a.approvals_counted,
        "needed": a.approvers_needed,
        "approved_by": a.approved_by,
        "modified": a.args != a.requested_args,
        "expired": a.status == "pending" and a.deadline <= now,
    }


async def approvals(rt: tether.Runtime, status: str | None) -> list[ApprovalRequest]:
    from tether.runtime.approvals import report_corrupt, view

    records = await rt.store.find_approvals(status=status, on_corrupt=report_corrupt)
    rows = [view(r) for r in records]
    if status == "pending":
        now = rt.clock()
        rows = [r for r in rows if r.deadline > now]
    return rows


def tool_of(record: ApprovalRecord) -> Tool[..., Any] | None:
    """The request's tool, imported by the path it was stored with (None if it cannot be)."""
    if not record.tool_path:
        return None
    try:
        found = import_object(record.tool_path, "tool")
    except tether.ConfigError:
        return None
    return found if isinstance(found, Tool) else None


async def approval(rt: tether.Runtime, request_id: str) -> dict[str, Any]:
    """Everything a reviewer needs to decide one request."""
    request = await rt.approvals.get(request_id)
    [record] = await rt.store.find_approvals(request_id=request_id)
    now = rt.clock()
    tool = tool_of(record)
    session = await session_summary(rt, request.session_id)
    effects = await rt.store.find_effects(actor_id=request.session_id)
    journal = await recent_journal(rt, request.session_id, RECENT_EVENTS)
    outcome = (
        "rejected: the call will not run"
        if request.on_timeout == "reject"
        else "approved: the call runs as it stands"
    )
    return {
        "req": request,
        "row": approval_row(request, now),
        "args_pretty": pretty(request.args),
        "requested_pretty": pretty(request.requested_args),
        "context": [
            (k, v if isinstance(v, str) else pretty(v)) for k, v in request.context.items()
        ],
        "decisions": [
            {
                **d,
                "when": when(d.get("at"), now),
                "args_compact": compact(d["args"], 120) if d.get("args") is not None else None,
            }
            for d in request.decisions
        ],
        "schema": pretty(tool.schema.json_schema()) if tool is not None else None,
        "tool_importable": tool is not None,
        "at_deadline": f"at the deadline the request is {outcome}",
        "decided_at": when(record.decided_at, now),
        "decided_after": (
            text.span(record.decided_at - record.created_at)
            if record.decided_at is not None
            else None
        ),
        "session": session,
        "journal": journal,
        "effects": [_effect_row(e, now) for e in effects[-RECENT_EFFECTS:]],
    }


async def session_summary(rt: tether.Runtime, actor_id: str) -> dict[str, Any] | None:
    rec = await rt.store.get_actor(actor_id)
    if rec is None:
        return None
    info = await records.session_view(rt, rec, records.CorruptRows())
    return {"id": rec.actor_id, "class": rec.class_path, "status": rec.status, "info": info}


async def recent_journal(rt: tether.Runtime, actor_id: str, n: int) -> list[dict[str, Any]]:
    total = await records.journal_length(rt.store, actor_id)
    rows = await records.journal_after(rt.store, actor_id, max(0, total - n))
    return [
        {"seq": seq, "type": journal_lines.kind(ev), "text": journal_lines.describe(ev)}
        for seq, ev in rows
    ]


def _effect_row(e: Any, now: float) -> dict[str, Any]:
    result = text.decode(e.result) if e.result is not None else None
    if e.tool == MODEL_TOOL:  # its input is the whole context: say what it decided
        args = f"the session's context ({len(e.args)} bytes)"
        outcome = "model: " + journal_lines.decision(result)
    else:
        args = compact(text.decode(e.args))
        outcome = compact(result) if e.result is not None else ""
    return {
        "key": e.key,
        "tool": e.tool,
        "status": e.status,
        "attempts": e.attempts,
        "args": args,
        "outcome": outcome if e.result is not None else (e.error or ""),
        "when": when(e.created_at, now),
    }


async def sessions(rt: tether.Runtime) -> list[dict[str, Any]]:
    corrupt = records.CorruptRows()
    now, lease_now = rt.clock(), await rt.store.store_time()
    out = []
    for rec in await rt.store.list_actors(on_corrupt=corrupt):
        if not records.is_session(rec):
            continue
        summary = await records.actor_summary(rt.store, rec, now, lease_now, corrupt)
        info = await records.session_view(rt, rec, corrupt)
        pending = await rt.approvals.pending(rec.actor_id)
        out.append(
            {
                **summary,
                "info": info,
                "pending": [a.request_id for a in pending],
                "since": when(rec.created_at, now),
            }
        )
    return out


async def session(rt: tether.Runtime, actor_id: str) -> dict[str, Any]:
    """``tether show`` of one session, and its timeline."""
    rec = await rt.store.get_actor(actor_id)
    if rec is None:
        raise tether.ActorNotFound(actor_id)
    corrupt = records.CorruptRows()
    now, lease_now = rt.clock(), await rt.store.store_time()
    summary = await records.actor_summary(rt.store, rec, now, lease_now, corrupt)
    journal = await records.journal_after(rt.store, actor_id, 0)
    effects = await rt.store.find_effects(actor_id=actor_id, on_corrupt=corrupt)
    requests = await rt.store.find_approvals(actor_id=actor_id)
    dead = await rt.store.dead_letters(actor_id, on_corrupt=corrupt)
    restarts = await _restarts(rt, rec.parent_id, actor_id)
    mailbox = await rt.store.list_messages(actor_id, records.MAILBOX_LIMIT, on_corrupt=corrupt)
    snap = await rt.store.load_snapshot(actor_id)
    drawn = timeline.build(journal, effects, requests, restarts, dead, now)
    return {
        "summary": summary,
        "info": await records.session_view(rt, rec, corrupt),
        "record": rec,
        "created": when(rec.created_at, now),
        "state": pretty(text.decode(snap.state)) if snap is not None else None,
        "journal": [
            {"seq": seq, "type": journal_lines.kind(ev), "text": journal_lines.describe(ev)}
            for seq, ev in journal[-40:]
        ],
        "journal_total": len(journal),
        "mailbox": [records.message_view(m, now) for m in mailbox],
        "effects": [_effect_row(e, now) for e in effects],
        "approvals": [approval_row(_view(r), now) for r in requests],
        "svg": timeline.svg(drawn),
        "events": [
            {"when": when(at, now), "kind": kind, "text": text} for at, kind, text in drawn.events
        ],
        "corrupt": corrupt.rows,
    }


def _view(record: ApprovalRecord) -> ApprovalRequest:
    from tether.runtime.approvals import view

    return view(record)


async def _restarts(
    rt: tether.Runtime, parent_id: str | None, actor_id: str
) -> list[tuple[float, str]]:
    """The parent supervisor's ``Restarted`` events for ``actor_id``: its restarts, in time."""
    if parent_id is None:
        return []
    out = []
    for _, event in await records.journal_after(rt.store, parent_id, 0):
        if (
            isinstance(event, dict)
            and event.get("type") == "Restarted"
            and event.get("child_id") == actor_id
        ):
            out.append((float(event.get("at", 0.0)), str(event.get("reason", ""))))
    return out


async def tree(rt: tether.Runtime) -> list[dict[str, Any]]:
    """The supervision tree, each node with its state and, for a breaker, its time left."""
    now = rt.clock()
    breakers: dict[str, dict[str, Any]] = {}
    for rec in await rt.store.list_actors(parent_id="tether.guards"):
        if rec.class_path == class_path(Breaker):
            try:
                breakers[rec.actor_id] = (await folded(rt, rec, Breaker)).describe(now)
            except tether.TetherError:  # a damaged journal: the tree says what it can
                continue
    return [_node(n, now, breakers) for n in await rt.tree(on_corrupt=records.CorruptRows())]


def _node(node: tether.TreeNode, now: float, breakers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    state: str = node.status
    detail = node.detail or ""
    breaker = breakers.get(node.id)
    if breaker is not None and breaker["status"] != "closed":
        # ``describe`` gives the status as of now: an open breaker whose open time is over is
        # half-open already, its next call a trial.
        state = "breaker " + str(breaker["status"]).replace("_", "-")
        left = float(breaker["until"] or now) - now
        when_next = (
            f"{text.span(left)} left"
            if breaker["status"] == "open"
            else "a trial call decides whether it closes"
        )
        detail = f"{breaker['reason']}; {when_next}; trips={breaker['trips']}"
    return {
        "id": node.id,
        "class": node.actor_class.rsplit(":", 1)[-1],
        "status": node.status,
        "state": state,
        "restarts": node.restart_count,
        "last_failure": node.last_failure,
        "detail": detail,
        "children": [_node(c, now, breakers) for c in node.children],
    }


async def quarantine(rt: tether.Runtime) -> list[dict[str, Any]]:
    now = rt.clock()
    return [
        {
            "key": q.key,
            "actor": q.actor_id,
            "tool": q.tool,
            "args": pretty(q.args),
            "attempts": q.attempts,
            "reason": q.reason,
            "history": q.history,
            "since": when(q.since, now),
            "violation": q.reason.startswith("determinism violation"),
        }
        for q in await rt.quarantine.list(on_corrupt=records.CorruptRows())
    ]


async def dead_letters(rt: tether.Runtime) -> list[dict[str, Any]]:
    now = rt.clock()
    return [
        {
            "msg_id": d.msg_id,
            "actor": d.actor_id,
            "type": d.type,
            "attempts": d.attempts,
            "reason": d.reason,
            "errors": d.errors,
            "payload": compact(text.decode(d.payload), 120),
            "when": when(d.created_at, now),
        }
        for d in await rt.dead_letters.list(on_corrupt=records.CorruptRows())
    ]


async def audit(
    rt: tether.Runtime,
    before: int | None,
    limit: int,
    *,
    target: str | None = None,
    actor: str | None = None,
) -> list[dict[str, Any]]:
    now = rt.clock()
    found = await rt.store.list_audit(target=target, actor_id=actor, before=before, limit=limit)
    return [{**msgspec.to_builtins(a), "when": when(a.at, now)} for a in found]
