"""A session's trajectory, drawn: its tasks and steps, model decisions, effects with their
status and attempts, approvals, restarts and dead letters, on one time axis (server-side SVG).

Where the times come from. A session's journal events carry no time of their own; the
effects ledger does (each row's intent and receipt times), and so do approval requests,
dead letters and the parent supervisor's ``Restarted`` events. A ``ModelDecided`` event takes
the time of the model call it records (the session's model calls are ledger rows, in order),
a ``ToolResult`` the receipt time of its effect (by key); an event without one of its own
(``TaskStarted``, ``StepBegun``, ``TaskEnded``) takes the time of the next timed event, or
the previous one at the end of the journal. So the drawing is as exact as the ledger, and
never invents an order: events keep the journal's.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.actors.session import MODEL_TOOL
from tether.render.journal import describe
from tether.store.records import ApprovalRecord, DeadLetter, EffectRecord

LANES = ("Tasks", "Steps", "Model", "Tools", "Approvals", "Restarts")
WIDTH = 1040  # the drawing's units (it scales to the page's width)
LEFT = 96  # where the plot begins, after the lanes' names
RIGHT = 16
MARK_HALF_WIDTH = 6  # a point in time (a restart, a dead letter) is a diamond this wide
_LANE = 30
_TOP = 26
_COLOURS = {
    "done": "#2f8f4e",
    "finished": "#2f8f4e",
    "approved": "#2f8f4e",
    "running": "#3b6fc4",
    "working": "#3b6fc4",
    "pending": "#3b6fc4",
    "retry": "#8a63c7",
    "failed": "#c4413b",
    "rejected": "#c4413b",
    "aborted": "#7a7a7a",
    "quarantined": "#d08a10",
    "restart": "#c4413b",
    "dead letter": "#7a1f1b",
    "step": "#5f7f9f",
}


@dataclass
class Item:
    lane: str
    start: float
    end: float
    label: str
    status: str
    detail: str = ""


@dataclass
class Timeline:
    items: list[Item] = field(default_factory=list)
    events: list[tuple[float, str, str]] = field(default_factory=list)  # (at, kind, text)

    @property
    def span(self) -> tuple[float, float]:
        if not self.items:
            return (0.0, 1.0)
        start = min(i.start for i in self.items)
        end = max(i.end for i in self.items)
        return (start, max(end, start + 1.0))


def build(
    journal: Sequence[tuple[int, Any]],
    effects: Sequence[EffectRecord],
    approvals: Sequence[ApprovalRecord],
    restarts: Sequence[tuple[float, str]],
    dead: Sequence[DeadLetter],
    now: float,
) -> Timeline:
    """The timeline of one session from its journal (decoded events, in order), ledger rows,
    approval requests, restarts ``(at, reason)`` and dead letters."""
    tl = Timeline()
    ordered = sorted(effects, key=lambda e: (e.created_at, e.msg_id, e.idx))
    for e in ordered:
        lane = "Model" if e.tool == MODEL_TOOL else "Tools"
        label = "model call" if lane == "Model" else e.tool
        if e.attempts > 1:
            label += f" x{e.attempts}"
        end = e.updated_at if e.status not in ("pending", "quarantined") else max(now, e.updated_at)
        detail = f"{e.tool}: {e.status}, {e.attempts} attempt(s)"
        if e.error:
            detail += f"; {e.error}"
        if e.history:
            detail += "; " + "; ".join(e.history[-3:])
        tl.items.append(Item(lane, e.created_at, end, label, e.status, detail))
    for a in approvals:
        end = a.decided_at if a.decided_at is not None else max(now, a.created_at)
        tl.items.append(
            Item("Approvals", a.created_at, end, a.tool, a.status, f"{a.request_id}: {a.status}")
        )
        tl.events.append((a.created_at, "approval", f"{a.tool} held for approval ({a.reason})"))
        if a.decided_at is not None:
            last = a.decisions[-1] if a.decisions else None
            who = f" by {last.by}" if last is not None else ""
            tl.events.append((a.decided_at, "approval", f"{a.tool} {a.status}{who}"))
    for at, reason in restarts:
        tl.items.append(Item("Restarts", at, at, "restart", "restart", reason))
        tl.events.append((at, "restart", f"restarted: {reason}"))
    for d in dead:
        tl.items.append(
            Item("Restarts", d.created_at, d.created_at, "dead letter", "dead letter", d.reason)
        )
        tl.events.append((d.created_at, "dead letter", f"{d.type} dead-lettered: {d.reason}"))
    _journal(tl, journal, ordered, now)
    tl.events.sort(key=lambda e: e[0])
    return tl


def _journal(
    tl: Timeline, journal: Sequence[tuple[int, Any]], ledger: Sequence[EffectRecord], now: float
) -> None:
    """Tasks and steps from the journal, timed by the ledger (module docstring)."""
    model_calls = iter([e for e in ledger if e.tool == MODEL_TOOL])
    by_key = {e.key: e for e in ledger}
    times: list[float | None] = []
    for _, event in journal:
        kind = event.get("type") if isinstance(event, dict) else None
        at: float | None = None
        if kind == "ModelDecided":
            call = next(model_calls, None)
            at = call.updated_at if call is not None else None
        elif kind == "ToolResult" and event.get("key") in by_key:
            at = by_key[event["key"]].updated_at
        times.append(at)
    filled = _fill(times, now)
    task: tuple[float, str] | None = None
    step: tuple[float, str] | None = None
    for (_, event), at in zip(journal, filled, strict=True):
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "TaskStarted":
            task = (at, f"task {event.get('task')}: {event.get('text', '')}")
            tl.events.append(
                (at, "task", f"task {event.get('task')} started: {event.get('text', '')}")
            )
        elif kind == "StepBegun":
            if step is not None:
                tl.items.append(Item("Steps", step[0], at, step[1], "step"))
            step = (at, f"step {event.get('step')}")
            tl.events.append((at, "step", describe(event)))
        elif kind == "ModelDecided":
            tl.events.append((at, "model", describe(event)))
        elif kind == "ToolResult":
            tl.events.append((at, "tool", describe(event)))
        elif kind == "TaskEnded":
            outcome = str(event.get("outcome", ""))
            if step is not None:
                tl.items.append(Item("Steps", step[0], at, step[1], "step"))
                step = None
            if task is not None:
                status = "finished" if outcome == "finished" else "failed"
                tl.items.append(Item("Tasks", task[0], at, task[1], status, outcome))
                task = None
            tl.events.append((at, "task", describe(event)))
    if step is not None:
        tl.items.append(Item("Steps", step[0], now, step[1], "step"))
    if task is not None:
        tl.items.append(Item("Tasks", task[0], now, task[1], "running", "under way"))


def _fill(times: list[float | None], now: float) -> list[float]:
    """Each missing time: the next known one, else the previous one, else ``now``."""
    out: list[float] = [0.0] * len(times)
    following: float | None = None
    for i in range(len(times) - 1, -1, -1):
        if times[i] is not None:
            following = times[i]
        out[i] = following if following is not None else -1.0
    previous = now
    for i, t in enumerate(out):
        if t < 0:
            out[i] = previous
        previous = out[i]
    return out


# -- drawing ------------------------------------------------------------------------------------


def _clock(t: float, fmt: str | None) -> str:
    if fmt is not None:
        return time.strftime(fmt, time.localtime(t))
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 10) % 10}"


def svg(tl: Timeline) -> str:
    """The timeline as an SVG element (text escaped), one lane per row of ``LANES``."""
    start, end = tl.span
    # The plot leaves a mark's half width free at each end, so that a point at the first or
    # the last time is drawn whole.
    plot_left, plot_right = LEFT + MARK_HALF_WIDTH, WIDTH - RIGHT - MARK_HALF_WIDTH
    scale = (plot_right - plot_left) / (end - start)
    height = _TOP + _LANE * len(LANES) + 8
    out = [
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {height}" width="100%" '
        f'role="img" aria-label="session timeline" xmlns="http://www.w3.org/2000/svg">'
    ]
    clock = "%H:%M:%S" if end - start >= 8 else None  # under 8 s: tenths of a second
    for i in range(5):  # the time axis
        t = start + (end - start) * i / 4
        x = plot_left + (t - start) * scale
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        out.append(
            f'<line x1="{x:.1f}" y1="{_TOP - 6}" x2="{x:.1f}" y2="{height - 8}" class="tick"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{_TOP - 10}" text-anchor="{anchor}" class="axis">'
            f"{_clock(t, clock)}</text>"
        )
    for row, lane in enumerate(LANES):
        y = _TOP + row * _LANE
        out.append(f'<text x="8" y="{y + 19}" class="lane">{lane}</text>')
        out.append(
            f'<line x1="{LEFT}" y1="{y + _LANE}" x2="{WIDTH - RIGHT}" y2="{y + _LANE}" class="rule"/>'
        )
        # The longest first: a short item that overlaps a long one is drawn over it.
        in_lane = sorted((i for i in tl.items if i.lane == lane), key=lambda i: i.start - i.end)
        for item in in_lane:
            x = plot_left + (item.start - start) * scale
            w = min(max(4.0, (item.end - item.start) * scale), plot_right + 4.0 - x)
            colour = _COLOURS.get(item.status, "#5f7f9f")
            tip = html.escape(f"{item.label} — {item.detail or item.status}", quote=True)
            if item.start == item.end and lane == "Restarts":
                h = MARK_HALF_WIDTH
                out.append(
                    f'<g><title>{tip}</title><path d="M{x:.1f} {y + 6} l{h} 9 l-{h} 9 l-{h} -9 z" '
                    f'fill="{colour}"/></g>'
                )
                continue
            out.append(
                f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y + 5}" width="{w:.1f}" '
                f'height="{_LANE - 10}" rx="3" fill="{colour}"/>'
            )
            if w > 9 * len(item.label) * 0.62:
                out.append(
                    f'<text x="{x + 5:.1f}" y="{y + 19}" class="bar">{html.escape(item.label)}</text>'
                )
            out.append("</g>")
    out.append("</svg>")
    return "".join(out)
