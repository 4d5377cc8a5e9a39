"""Recovery: an effect whose outcome is not simply its result (I4, I5).

* An intent without a receipt is *ambiguous*: the call may or may not have happened (the
  process stopped during it, or the tool raised an error that says it may have been carried
  out). The tool's ``recovery`` policy decides: ``"retry"`` calls again with the same key (its
  receiver honors keys), ``"reconcile"`` asks the tool's reconcile hook whether it happened,
  ``"quarantine"`` holds it for a person.
* A call cut short by an interrupting message (``interrupts.py``) is resolved the same way,
  without calling again: the handler hears ``EffectInterrupted``.
* A replayed step that asks for another tool or input at a recorded slot is a determinism
  violation, held for a person.

Held for a person means *quarantined*: the step is suspended (``StepSuspended``), its message
parked with the effect's row marked quarantined, until a person resolves it
(``rt.quarantine``: mark done, retry, or abort).
"""

from __future__ import annotations

from typing import Any, NoReturn, Protocol

import anyio
import msgspec

from tether import telemetry
from tether.actors.tool import Done, NotDone, Tool, Unknown
from tether.errors import (
    DeterminismViolation,
    EffectInterrupted,
    StepSuspended,
    TransientToolError,
)
from tether.runtime.effect_host import EffectCell
from tether.runtime.interrupts import CallInterrupted
from tether.runtime.step import Step
from tether.store.records import EffectRecord, StoredMessage


class RecoveringCall(Protocol):
    """What recovery reads and does of the call it resolves (``effects._Effect``)."""

    cell: EffectCell
    step: Step
    m: StoredMessage
    tool: Tool
    idx: int
    key: str
    kwargs: dict[str, Any]
    input_hash: str

    @property
    def log(self) -> Any: ...

    def next_attempt(self, rec: EffectRecord, note: str) -> EffectRecord: ...
    async def write(self, rec: EffectRecord) -> None: ...
    async def call(self, rec: EffectRecord, *, first: bool = False) -> Any: ...
    async def receipt(self, rec: EffectRecord, value: Any, note: str | None = None) -> Any: ...


async def ambiguous(call: RecoveringCall, rec: EffectRecord, why: str) -> Any:
    """An intent without a receipt: the call may or may not have happened (I4)."""
    tool = call.tool
    call.log.warning("effect_ambiguous", attempt=rec.attempts, why=why, recovery=tool.recovery)
    if tool.recovery == "retry":
        return await call.call(call.next_attempt(rec, f"ambiguous ({why}): retried"))
    if tool.recovery == "reconcile":
        if tool.reconcile_hook is None:
            suspend(call, f"{why}; tool has recovery='reconcile' but no reconcile hook", rec)
        verdict = await reconcile(call)
        match verdict:
            case Done(result=value):
                call.log.info("effect_reconciled", verdict="done")
                return await call.receipt(rec, value, "reconciled: done")
            case NotDone():
                call.log.info("effect_reconciled", verdict="not done")
                return await call.call(call.next_attempt(rec, "reconciled: not done"))
            case Unknown(reason=reason):
                suspend(call, f"{why}; reconcile: {reason}", rec)
            case _:
                suspend(call, f"{why}; the reconcile hook returned {verdict!r}", rec)
    suspend(call, why, rec)


async def interrupted(call: RecoveringCall, rec: EffectRecord, exc: CallInterrupted) -> Any:
    """An interrupted call (``tether.runtime.interrupts``), resolved by the tool's recovery
    policy without calling again: the handler gets ``EffectInterrupted``, unless the
    reconcile hook says the call happened (then its result, as usual)."""
    tool, why, now = call.tool, exc.why, call.cell.runtime.clock()
    call.log.warning("effect_interrupted", attempt=rec.attempts, why=why, made=exc.made)
    if not exc.made:  # the intent is recorded, the call was not made: a sure "not done"
        note = f"attempt {rec.attempts}: not made: {why} before the call"
        error = f"not made: {why}"
    else:
        note = f"attempt {rec.attempts}: {why} during the call: it may have been carried out"
        error = note.partition(": ")[2]
        if tool.recovery == "reconcile":
            verdict = await reconcile(call)
            if isinstance(verdict, Done):
                return await call.receipt(rec, verdict.result, f"{note}; reconciled: done")
            if isinstance(verdict, NotDone):
                note, error = f"{note}; reconciled: not done", f"{why}: reconciled: not done"
            else:
                reason = getattr(verdict, "reason", repr(verdict))
                return await _hold_interrupted(call, rec, f"{error}; reconcile: {reason}", note)
        elif tool.recovery == "retry":  # its receiver honors the key: safe to call again
            error += "; calling again with its key is safe"
        else:
            return await _hold_interrupted(call, rec, error, note)
    history = [*rec.history, note]
    failed = msgspec.structs.replace(
        rec, status="failed", error=error, history=history, updated_at=now
    )
    await call.write(failed)
    raise EffectInterrupted(tool.name, call.key, why, made=exc.made)


async def _hold_interrupted(
    call: RecoveringCall, rec: EffectRecord, reason: str, note: str
) -> NoReturn:
    """Quarantine an interrupted call for a person (who records what happened), without
    holding the step: it goes on, told that the call was interrupted."""
    held = msgspec.structs.replace(
        rec,
        status="quarantined",
        reason=reason,
        history=[*rec.history, note],
        updated_at=call.cell.runtime.clock(),
    )
    telemetry.effects_quarantined.add(1, {"tether.tool": call.tool.name})
    await call.write(held)
    raise EffectInterrupted(call.tool.name, call.key, reason, made=True)


async def reconcile(call: RecoveringCall) -> Any:
    """Ask the tool's reconcile hook whether the call happened: its verdict, or
    ``Unknown`` (why) if it has none, raises, or does not answer in time."""
    tool, hook = call.tool, call.tool.reconcile_hook
    if hook is None:
        return Unknown("the tool has no reconcile hook")
    kwargs = dict(call.kwargs)
    kwargs["idempotency_key"] = call.key
    verdict: Any = None
    try:
        # Bounded like the call itself: a hook that hangs held the step (and the actor)
        # for ever, its effect neither resolved nor quarantined.
        with anyio.move_on_after(tool.timeout) as scope:
            verdict = await hook(**kwargs)
        if scope.cancelled_caught:
            verdict = Unknown(f"the reconcile hook did not answer within {tool.timeout} s")
    except Exception as exc:  # noqa: BLE001 - a hook that cannot tell: a person decides
        verdict = Unknown(f"the reconcile hook raised {describe(exc)}")
    return verdict


async def violation(call: RecoveringCall, recorded: EffectRecord) -> NoReturn:
    """The replayed step asks for another call than the one recorded at its slot (I5): held
    for a person, the recorded row quarantined (an aborted one stays aborted: raised)."""
    detail = (
        f"effect #{call.idx} of message {call.m.msg_id} was recorded as {recorded.tool} with "
        f"input {recorded.input_hash[:12]}, but the replayed step asked for {call.tool.name} "
        f"with input {call.input_hash[:12]}"
    )
    if recorded.status == "aborted":
        raise DeterminismViolation(call.tool.name, recorded.key, detail)
    call.log.error("determinism_violation", detail=detail)
    if recorded.status != "quarantined":
        held = msgspec.structs.replace(
            recorded,
            status="quarantined",
            reason=f"determinism violation: {detail}",
            history=[*recorded.history, f"was {recorded.status}; {detail}"],
            updated_at=call.cell.runtime.clock(),
        )
        suspend(call, held.reason or detail, held)
    suspend(call, recorded.reason or detail, None)


def suspend(call: RecoveringCall, reason: str, rec: EffectRecord | None) -> NoReturn:
    """Hold the step for a person: the cell parks the message with ``rec`` quarantined."""
    if rec is not None:
        rec = msgspec.structs.replace(
            rec,
            status="quarantined",
            reason=reason,
            updated_at=call.cell.runtime.clock(),
        )
        telemetry.effects_quarantined.add(1, {"tether.tool": call.tool.name})
        call.log.error("effect_quarantined", reason=reason, attempt=rec.attempts)
    call.step.suspend(f"effect {call.key} ({call.tool.name}) is quarantined: {reason}", rec)
    raise StepSuspended(call.step.suspended or reason)


def retry_delay(tool: Tool, attempt: int, exc: Exception) -> float:
    """The wait before the attempt after ``attempt``: the policy's jittered backoff, or longer
    when the receiver said when to come back (``TransientToolError.retry_after``, from an HTTP
    ``Retry-After``), never past the policy's ``max_delay``. Asking again sooner than a rate
    limiter said only earns another 429, and counts one more failure toward the breaker."""
    delay = tool.retry.delay(attempt)
    asked = exc.retry_after if isinstance(exc, TransientToolError) else None
    if isinstance(asked, int | float) and asked > delay:  # False for NaN
        delay = min(float(asked), tool.retry.max_delay)
    return delay


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception a tool raised. One whose ``str()`` itself raises
    would fail the step before its failure is recorded, leaving the intent to be taken, on
    redelivery, for a call that never reported back: described by its type alone instead."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - any failure of a user __str__
        return f"{type(exc).__name__}: (its message cannot be shown: str() raised)"


def shown(value: Any, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters (a result can be large), and never raising."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - any failure of a user __repr__
        return f"(a {type(value).__name__})"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def type_name(t: Any) -> str:
    """``str``, ``Receipt``, ``list[str]``: a result type as a person reads it."""
    return t.__qualname__ if isinstance(t, type) else repr(t)
