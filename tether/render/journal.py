"""Journal events as a person reads them: one line per event, by its type.

Events arrive decoded without their classes (``tether.render.text.decode``: a dict with a
``type`` tag), so a journal renders in a process that cannot import the application's
classes too. Each kind tether journals has its own line: an agent session's (a task started,
a step with its belief and frontier, the model's decision with its tool calls, a tool's
result, an answer), a gate's approvals, a breaker's transitions, a loop guard's, a
supervisor's; an application's own events show their fields. ``tether show`` prints these
lines; the console's journal and timeline show them too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from tether.render.text import compact, cut

#: The longest line ``describe`` gives (before a quoted text or value is cut short).
LINE_WIDTH = 100

Render = Callable[[Mapping[str, Any]], str]


def kind(event: Any) -> str:
    """An event's type tag (``TaskStarted``), or ``event`` when it has none."""
    return str(event.get("type", "event")) if isinstance(event, Mapping) else "event"


def describe(event: Any) -> str:
    """One journal event as one line."""
    if not isinstance(event, Mapping):
        return cut(compact(event, cut_at=None), LINE_WIDTH)
    render = _RENDERERS.get(kind(event))
    if render is None:
        return _fields(event)
    try:
        return render(event)
    except (KeyError, TypeError, AttributeError, ValueError):
        # An event stored by another tether version, its fields not what this one expects:
        # shown as its fields rather than not at all.
        return _fields(event)


def decision(value: Any) -> str:
    """A model's decision (``ToolCall``, ``ToolCalls``, ``FinalAnswer``) as words."""
    if not isinstance(value, Mapping):
        return "decided"
    tag = value.get("type")
    if tag == "FinalAnswer":
        return f"final answer: {_quote(value.get('text', ''))}" + _usage(value)
    if tag == "ToolCall":
        return "call " + _call(value) + _usage(value)
    if tag == "ToolCalls":
        calls = [_call(c) for c in value.get("calls", ()) if isinstance(c, Mapping)]
        return f"{len(calls)} calls: " + "; ".join(calls) + _usage(value)
    return str(tag)


# -- an agent session's events -------------------------------------------------------------------


def _task_started(e: Mapping[str, Any]) -> str:
    return f"task {e['task']} started: {_quote(e['text'])}"


def _user_said(e: Mapping[str, Any]) -> str:
    return f"user: {_quote(e['text'])}"


def _heard(e: Mapping[str, Any]) -> str:
    return "the messages that came during the step joined the conversation"


def _step_begun(e: Mapping[str, Any]) -> str:
    belief = f"; belief: {_quote(e['belief'], 50)}" if e.get("belief") else ""
    return f"step {e['step']} of task {e['task']}: {e['frontier'] or 'next step'}{belief}"


def _model_decided(e: Mapping[str, Any]) -> str:
    return "model: " + decision(e["decision"])


def _tool_result(e: Mapping[str, Any]) -> str:
    record = e["record"]
    call = f"{record['tool']}({compact(record.get('args', {}), cut_at=40)})"
    if record.get("asked") is not None:  # a person modified it: it ran with args, not these
        call += f" modified by a person from ({compact(record['asked'], cut_at=40)})"
    key = f" [effect {str(e['key'])[:8]}]" if e.get("key") else ""
    if e.get("invalid"):
        return f"{call} not made, invalid arguments: {cut(str(record.get('error')), 60)}"
    if record.get("error") is not None:
        return f"{call} → error: {cut(str(record['error']), 60)}{key}"
    return f"{call} → {cut(str(record.get('result', '')), 60)}{key}"


def _context_reset(e: Mapping[str, Any]) -> str:
    return f"context reset, the history summed up: {_quote(e['summary'])}"


def _task_ended(e: Mapping[str, Any]) -> str:
    answer = f"; answer: {_quote(e['answer'], 50)}" if e.get("answer") else ""
    return f"task {e['task']} ended: {cut(str(e['outcome']), 60)}{answer}"


# -- guards --------------------------------------------------------------------------------------


def _approval_requested(e: Mapping[str, Any]) -> str:
    return (
        f"approval requested: {e['request_id']} for {e['tool']} ({cut(str(e['reason']), 50)}), "
        f"deadline {_clock(e['deadline'])}"
    )


def _approval_settled(e: Mapping[str, Any]) -> str:
    why = f": {cut(str(e['reason']), 50)}" if e.get("reason") else ""
    return f"approval {e['request_id']} {e['status']} by {e['by']}{why}"


def _breaker_call(e: Mapping[str, Any]) -> str:
    outcome = "failed" if e["failed"] else "slow" if e.get("slow") else "succeeded"
    return f"a call {outcome}"


def _breaker_opened(e: Mapping[str, Any]) -> str:
    return f"opened until {_clock(e['until'])} (trip {e['trips']}): {cut(str(e['reason']), 60)}"


def _loop_call(e: Mapping[str, Any]) -> str:
    return f"about to call {e['tool']} (arguments {str(e['args_hash'])[:8]})"


def _loop_result(e: Mapping[str, Any]) -> str:
    return f"{e['tool']} answered (result {str(e['result_hash'])[:8]})"


def _loop_flagged(e: Mapping[str, Any]) -> str:
    return f"loop: {e['pattern']} of {e['tool']} → {e['response']}: {cut(str(e['detail']), 60)}"


# -- supervisors ---------------------------------------------------------------------------------


def _child_added(e: Mapping[str, Any]) -> str:
    entry = e["entry"]
    return f"child {entry['child_id']} added ({str(entry['class_path']).rsplit(':', 1)[-1]})"


def _restarted(e: Mapping[str, Any]) -> str:
    return f"restarted {e['child_id']}: {cut(str(e['reason']), 60)}"


_RENDERERS: dict[str, Render] = {
    "TaskStarted": _task_started,
    "UserSaid": _user_said,
    "Heard": _heard,
    "StepBegun": _step_begun,
    "ModelDecided": _model_decided,
    "ToolResult": _tool_result,
    "ContextReset": _context_reset,
    "TaskEnded": _task_ended,
    "ApprovalRequested": _approval_requested,
    "ApprovalSettled": _approval_settled,
    "BreakerCallRecorded": _breaker_call,
    "BreakerOpened": _breaker_opened,
    "BreakerHalfOpened": lambda e: f"half-open: a trial call admitted, until {_clock(e['until'])}",
    "BreakerProbeAdmitted": lambda e: "half-open: one more trial call admitted",
    "BreakerProbePassed": lambda e: "a trial call succeeded",
    "BreakerProbeReleased": lambda e: f"a trial call gave its permit back ({e['outcome']})",
    "BreakerClosed": lambda e: "closed: the trial calls succeeded",
    "BreakerReset": lambda e: f"reset by {e['by']}",
    "LoopCallObserved": _loop_call,
    "LoopResultObserved": _loop_result,
    "LoopFlagged": _loop_flagged,
    "LoopReset": lambda e: f"recent calls forgotten: {cut(str(e['reason']), 60)}",
    "ChildAdded": _child_added,
    "ChildRemoved": lambda e: f"child {e['child_id']} removed",
    "Restarted": _restarted,
    "Reset": lambda e: f"failed, its restart window starts over: {cut(str(e['reason']), 60)}",
    "NoticeDelivered": lambda e: f"notice {e['notice_id']} delivered (HTTP {e['status']})",
}


# -- pieces --------------------------------------------------------------------------------------


def _call(call: Mapping[str, Any]) -> str:
    text = f"{call.get('tool')}({compact(call.get('args', {}), cut_at=50)})"
    if call.get("malformed"):
        text += f" (malformed: {cut(str(call['malformed']), 40)})"
    return text


def _usage(value: Mapping[str, Any]) -> str:
    usage = value.get("usage")
    if isinstance(usage, Mapping) and usage.get("total_tokens"):
        return f" [{usage['total_tokens']} tokens]"
    return ""


def _quote(text: Any, width: int = 70) -> str:
    return cut(str(text), width)


def _clock(ts: Any) -> str:
    return time.strftime("%H:%M:%S", time.localtime(float(ts)))


def _fields(event: Mapping[str, Any]) -> str:
    fields = ", ".join(
        f"{k}={cut(v if isinstance(v, str) else compact(v, cut_at=None), 30)}"
        for k, v in event.items()
        if k != "type"
    )
    tag = kind(event)
    return cut(f"{tag}: {fields}" if fields else tag, LINE_WIDTH)
