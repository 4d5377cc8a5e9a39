"""Guard admission: the loop detector and the breaker on an effect's path (I10).

A new call passes the session's loop detector once (a replay of its slot, or a call held for a
person, is no new call), then each attempt is admitted by the tool's breaker, which records
the attempt's outcome after it. Both decide synchronously on the live guard's state; the
events a decision produces are staged on the guard and journaled with the effect's next write
(``EffectWrite`` and the guard's append in one group commit, ``AdmittedCall.journal``).

On a detection, the session's ``LoopPolicy`` says feed back (``LoopDetected``), reset, stop,
or escalate to the approval gate. An open breaker raises ``ToolUnavailable`` with its
``retry_at``: the call was not made.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Protocol

from tether import telemetry
from tether.actors.guards.breaker import CallToken, Refused
from tether.actors.tool import Tool
from tether.errors import LoopDetected, ToolUnavailable
from tether.runtime.effect_host import EffectCell
from tether.runtime.kernel import Staged
from tether.runtime.step import Step
from tether.store.records import StoredMessage

if TYPE_CHECKING:
    from tether.runtime.guards import BreakerGuard, LoopWatch


def result_hash(blob: bytes) -> str:
    """What the loop guard compares of a result: a hash of its recorded (msgpack) form."""
    return hashlib.sha256(blob).hexdigest()[:16]


class AdmittedCall(Protocol):
    """What admission reads and sets of the call it admits (``effects._Effect``)."""

    cell: EffectCell
    step: Step
    m: StoredMessage
    tool: Tool
    idx: int
    args_hash: str  # what the loop guard compares: the input's canonical hash, shortened
    breaker: BreakerGuard | None
    loops: LoopWatch | None

    def journal(self, staged: Staged | None) -> None: ...
    async def flush(self) -> None: ...


async def watch_loops(call: AdmittedCall) -> None:
    """Show a new call to the session's loop detector; act on what it detects."""
    tool, cell = call.tool, call.cell
    if not tool.loop_guard:
        return
    loops = call.loops = await cell.runtime.guards.loops(cell)
    if loops is None:
        return
    now = cell.runtime.clock()
    slot = f"{call.m.msg_id}#{call.idx}"
    detection, staged = loops.call(tool.name, call.args_hash, now, slot)
    call.journal(staged)
    if detection is None:
        detection = loops.take_pending()
    if detection is None:
        return
    telemetry.loop_detections.add(1, {"tether.loop_pattern": detection.pattern})
    telemetry.guard_event(
        "loop_detected",
        actor_id=cell.actor_id,
        tool=tool.name,
        pattern=detection.pattern,
        response=detection.response,
        detail=detection.detail,
    )
    if detection.response == "escalate":
        if call.step.escalations is None:
            call.step.escalations = {}
        call.step.escalations[call.idx] = f"loop detected: {detection.detail}"
        return
    await call.flush()
    raise LoopDetected(tool.name, detection.pattern, detection.response, detection.detail)


def observe_result(call: AdmittedCall, blob: bytes | None) -> None:
    """Tell the loop guard what the call returned (its recorded form), for no-progress."""
    loops = call.loops
    if loops is None or blob is None:
        return
    now = call.cell.runtime.clock()
    detection, staged = loops.result(call.tool.name, call.args_hash, result_hash(blob), now)
    call.journal(staged)
    if detection is not None:
        loops.hold(detection)  # told before the session's next call


def admit(call: AdmittedCall) -> CallToken | None:
    """The breaker's admission of the next attempt; ``ToolUnavailable`` if it is open."""
    breaker = call.breaker
    if breaker is None:
        return None
    now = call.cell.runtime.clock()
    admission, events = breaker.admit(now)
    call.journal(breaker.journal(events))
    if isinstance(admission, Refused):
        name = call.tool.name
        raise ToolUnavailable(
            name,
            admission.describe(name, now),
            admission.retry_at,
            max(0.0, admission.retry_at - now),
        )
    return admission.token


def record_outcome(
    call: AdmittedCall, token: CallToken | None, exc: BaseException | None, started: float
) -> None:
    """Record an admitted attempt's outcome (``exc`` None: it succeeded) with the breaker."""
    breaker = call.breaker
    if breaker is None or token is None:
        return
    duration = time.monotonic() - started
    events = breaker.record(token, exc, duration, call.cell.runtime.clock())
    call.journal(breaker.journal(events))
