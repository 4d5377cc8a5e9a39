"""The effects ledger: intent before effect, receipt after it (I4), keys from the runtime (I5).

One effect of one step goes through :func:`perform`:

1. the arguments are validated against the tool's schema (nothing recorded if they are bad);
2. its slot is the step's next effect index; its idempotency key is
   ``sha256(actor id, message id, effect index, tool name, canonical input hash)``;
3. if the slot is already in the ledger (the step is being replayed after a crash, a failure or
   a wait), the recorded outcome answers: a receipt returns its result without calling the
   tool; an intent without a receipt is *ambiguous* and goes to the tool's recovery policy;
   a different tool or input at that index is a determinism violation, held for a person;
4. otherwise the intent is committed, the tool is called with the key, and the receipt is
   committed before the result is handed back.

Invariant: a tool is only ever called after an intent row with the attempt's number is
committed under the actor's current fence, so a stale owner (I8) never calls a tool.

A step that must wait for a person (a quarantined effect) is suspended: ``StepSuspended``
unwinds the handler and the cell parks the message; resolving the effect unparks it, and the
step replays from the start with every earlier effect answered from the ledger.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import msgspec

from tether import telemetry
from tether.actors.guards.breaker import CallToken, Refused
from tether.actors.messages import UNENCODABLE, nesting_problem
from tether.actors.tool import Done, NotDone, Tool, Unknown, classify
from tether.errors import (
    ConfigError,
    DeterminismViolation,
    EffectAborted,
    EffectInterrupted,
    LoopDetected,
    StepSuspended,
    ToolFailed,
    ToolUnavailable,
    TransientToolError,
)
from tether.runtime import gate
from tether.runtime.gate import EffectCell
from tether.runtime.interrupts import CallInterrupted, Interruptible
from tether.runtime.kernel import Staged
from tether.runtime.step import Step
from tether.store.records import EffectRecord, EffectWrite

if TYPE_CHECKING:
    from tether.runtime.guards import BreakerGuard, LoopWatch
    from tether.store.records import StoredMessage


def result_hash(blob: bytes) -> str:
    """What the loop guard compares of a result: a hash of its recorded (msgpack) form."""
    return hashlib.sha256(blob).hexdigest()[:16]


def effect_key(actor_id: str, msg_id: str, idx: int, tool: str, input_hash: str) -> str:
    """The idempotency key of one effect (I5): stable across every replay of the step."""
    raw = "\x1f".join((actor_id, msg_id, str(idx), tool, input_hash)).encode()
    return hashlib.sha256(raw).hexdigest()[:40]


async def perform(cell: EffectCell, step: Step, tool: Tool, args: dict[str, Any]) -> Any:
    """Run one effect of ``step`` through the ledger and return its result."""
    if not isinstance(tool, Tool):
        raise ConfigError(
            f"{cell.actor_id}: effect() takes a tool declared with @tether.tool, not {tool!r}"
        )
    if step.suspended is not None:
        # The step already waits for a person: nothing after that point may run.
        raise StepSuspended(step.suspended)
    m = cell.current
    if m is None or m.local is not None or step.closed:
        raise ConfigError(
            f"{cell.actor_id}: effect() is only allowed while handling a stored message"
        )
    step.last_key = None
    call = tool.prepare(args)
    idx = step.next_effect
    step.next_effect += 1
    key = step.last_key = effect_key(cell.actor_id, m.msg_id, idx, tool.name, call.input_hash)
    run = _Effect(cell, step, m, tool, idx, key, call.kwargs, call.args_blob, call.input_hash)
    try:
        if not telemetry.tracing_enabled():
            return await run.resolve()
        return await _traced(run, tool, key, idx)
    finally:
        run.defer_pending()  # whatever way it ended, the guards' events are not lost


async def _traced(run: _Effect, tool: Tool, key: str, idx: int) -> Any:
    attributes: dict[str, str | int] = {
        "tether.tool": tool.name,
        "tether.effect_key": key,
        "tether.effect_index": idx,
    }
    with telemetry.tracer.start_as_current_span("tether.effect", attributes=attributes) as span:
        result = await run.resolve()
        span.set_attribute("tether.replayed", run.replayed)
        span.set_attribute("tether.attempt", run.attempt)
        return result


class _Effect:
    """One effect being resolved: replayed from the ledger, or called."""

    # One per effect, its attributes read on every step of the call: slots, not a dict.
    __slots__ = (
        "_log",
        "args_blob",
        "args_hash",
        "attempt",
        "breaker",
        "cell",
        "idx",
        "input_hash",
        "key",
        "kwargs",
        "loops",
        "m",
        "pending",
        "replayed",
        "step",
        "tool",
    )

    def __init__(
        self,
        cell: EffectCell,
        step: Step,
        m: StoredMessage,
        tool: Tool,
        idx: int,
        key: str,
        kwargs: dict[str, Any],
        args_blob: bytes,
        input_hash: str,
    ) -> None:
        self.cell, self.step, self.m, self.tool = cell, step, m, tool
        self.idx, self.key, self.kwargs = idx, key, kwargs
        self.args_blob, self.input_hash = args_blob, input_hash
        self.replayed = False
        self.attempt = 0
        self.breaker: BreakerGuard | None = None
        self.loops: LoopWatch | None = None
        # what the loop guard compares: the requested input's canonical hash (I5's, shortened)
        self.args_hash = input_hash[:16]
        self.pending: list[Staged] = []  # guard journal appends to commit with our next write
        self._log: Any = None

    @property
    def log(self) -> Any:
        """The effect's logger, bound on first use (the common path logs nothing)."""
        if self._log is None:
            self._log = telemetry.log.bind(
                actor_id=self.cell.actor_id,
                msg_id=self.m.msg_id,
                tool=self.tool.name,
                effect_key=self.key,
            )
        return self._log

    # -- the ledger --------------------------------------------------------------------------

    async def resolve(self) -> Any:
        recorded = await self._recorded()
        if recorded is not None and (
            recorded.tool != self.tool.name or recorded.input_hash != self.input_hash
        ):
            return await self._violation(recorded)
        if recorded is None or recorded.status in ("pending", "retry"):
            # About to call: loop detector -> breaker -> gate -> ledger (DESIGN §6). The loop
            # detector sees each call once (a replay of its slot is not a new call, and a
            # call a person was asked about was seen before it was held); the breaker admits
            # each attempt; the gate decides whether the call waits for a person, and with
            # which arguments it runs (as approved, perhaps modified).
            asked = await gate.approval_for(self)
            if recorded is None and asked is None:
                await self._watch_loops()
            self.breaker = await self.cell.runtime.guards.breaker(self.tool)
            await gate.judge(self, asked)
        if recorded is None:
            return await self._call(self._record("pending", attempts=1), first=True)
        match recorded.status:
            case "done":
                return self._replay_done(recorded)
            case "failed":
                self._mark_replayed(recorded)
                raise ToolFailed(
                    self.tool.name, self.key, recorded.error or "failed", recorded.attempts
                )
            case "aborted":
                self._mark_replayed(recorded)
                raise EffectAborted(self.tool.name, self.key, recorded.reason or "aborted")
            case "quarantined":
                self._suspend(recorded.reason or "quarantined", None)
            case "retry":
                self.log.info("effect_retry_approved", attempt=recorded.attempts + 1)
                return await self._call(self._next_attempt(recorded, "retry approved"))
            case _:  # "pending": the intent is recorded, the outcome is not
                why = f"attempt {recorded.attempts} did not report back (the process stopped)"
                return await self._ambiguous(recorded, why)

    async def _recorded(self) -> EffectRecord | None:
        """The ledger row of this slot. A message on its first attempt that never waited has
        no rows, so the common path reads nothing."""
        step = self.step
        if step.ledger is None:
            if self.m.attempts <= 1 and self.m.parks == 0:
                step.ledger = {}
            else:
                rows = await self.cell.runtime.store.effects_of(self.cell.actor_id, self.m.msg_id)
                step.ledger = {r.idx: r for r in rows}
        return step.ledger.get(self.idx)

    def _record(self, status: str, *, attempts: int, **fields: Any) -> EffectRecord:
        now = self.cell.runtime.clock()
        return EffectRecord(
            actor_id=self.cell.actor_id,
            msg_id=self.m.msg_id,
            idx=self.idx,
            key=self.key,
            tool=self.tool.name,
            input_hash=self.input_hash,
            args=self.args_blob,
            status=status,
            attempts=attempts,
            created_at=now,
            updated_at=now,
            **fields,
        )

    def _next_attempt(self, rec: EffectRecord, note: str) -> EffectRecord:
        return msgspec.structs.replace(
            rec,
            status="pending",
            attempts=rec.attempts + 1,
            history=[*rec.history, note],
            updated_at=self.cell.runtime.clock(),
        )

    async def _write(self, rec: EffectRecord) -> None:
        """Commit ``rec``, together with the guard events decided since the last write."""
        guards = [g.submit() for g in self.pending]  # submitted first: the same batch
        self.pending = []
        await self.cell.commit_effect(EffectWrite(self.cell.fence, rec), *guards)
        if self.step.ledger is not None:  # else not read yet: the store has it now
            self.step.ledger[self.idx] = rec

    async def _flush(self) -> None:
        """Commit the guard events decided so far, when no effect write follows them."""
        guards = [g.submit() for g in self.pending]
        self.pending = []
        if guards:
            await asyncio.gather(*guards)

    def journal(self, staged: Staged | None) -> None:
        if staged is not None:
            self.pending.append(staged)

    def defer_pending(self) -> None:
        """Guard events not committed yet ride with the actor's next commit."""
        for staged in self.pending:
            self.cell.defer(staged)
        self.pending = []

    # -- loop detector and breaker -----------------------------------------------------------

    async def _watch_loops(self) -> None:
        if not self.tool.loop_guard:
            return
        loops = self.loops = await self.cell.runtime.guards.loops(self.cell)
        if loops is None:
            return
        now = self.cell.runtime.clock()
        slot = f"{self.m.msg_id}#{self.idx}"
        detection, staged = loops.call(self.tool.name, self.args_hash, now, slot)
        self.journal(staged)
        if detection is None:
            detection = loops.take_pending()
        if detection is None:
            return
        telemetry.loop_detections.add(1, {"tether.loop_pattern": detection.pattern})
        telemetry.guard_event(
            "loop_detected",
            actor_id=self.cell.actor_id,
            tool=self.tool.name,
            pattern=detection.pattern,
            response=detection.response,
            detail=detection.detail,
        )
        if detection.response == "escalate":
            if self.step.escalations is None:
                self.step.escalations = {}
            self.step.escalations[self.idx] = f"loop detected: {detection.detail}"
            return
        await self._flush()
        raise LoopDetected(self.tool.name, detection.pattern, detection.response, detection.detail)

    def _observe_result(self, blob: bytes | None) -> None:
        """Tell the loop guard what the call returned (its recorded form), for no-progress."""
        if self.loops is None or blob is None:
            return
        now = self.cell.runtime.clock()
        detection, staged = self.loops.result(
            self.tool.name, self.args_hash, result_hash(blob), now
        )
        self.journal(staged)
        if detection is not None:
            self.loops.hold(detection)  # told before the session's next call

    def _admit(self) -> CallToken | None:
        """The breaker's admission of the next attempt; ``ToolUnavailable`` if it is open."""
        breaker = self.breaker
        if breaker is None:
            return None
        now = self.cell.runtime.clock()
        admission, events = breaker.admit(now)
        self.journal(breaker.journal(events))
        if isinstance(admission, Refused):
            raise ToolUnavailable(
                self.tool.name,
                admission.describe(self.tool.name, now),
                admission.retry_at,
                max(0.0, admission.retry_at - now),
            )
        return admission.token

    def _outcome(self, token: CallToken | None, exc: BaseException | None, started: float) -> None:
        if self.breaker is None or token is None:
            return
        duration = time.monotonic() - started
        events = self.breaker.record(token, exc, duration, self.cell.runtime.clock())
        self.journal(self.breaker.journal(events))

    # -- outcomes ----------------------------------------------------------------------------

    def _replay_done(self, rec: EffectRecord) -> Any:
        """The recorded result of a call that happened. One that does not decode as the tool's
        result type (a result a person marked done from a process that could not check it, a
        tool whose return type changed, a damaged row) is held for a person, unless the tool is
        a "retry" one (as in ``_receipt``): the call did happen, so neither calling again nor
        failing the step is the runtime's to decide, and failing would only spend the message's
        attempts on the same row."""
        try:
            value = self.tool.decode_result(rec.result or b"\xc0")
        except msgspec.DecodeError as exc:
            why = (
                f"its recorded result does not decode as {_type_name(self.tool.result_type)}: {exc}"
            )
            if self.tool.recovery != "retry":
                held = msgspec.structs.replace(rec, history=[*rec.history, f"held: {why}"])
                self._suspend(why, held)
            self._mark_replayed(rec)
            raise ToolFailed(self.tool.name, self.key, why, rec.attempts) from None
        self._mark_replayed(rec)
        return value

    def _mark_replayed(self, rec: EffectRecord) -> None:
        self.replayed = True
        self.attempt = rec.attempts
        telemetry.effects_replayed.add(1, {"tether.tool": self.tool.name})
        self.log.info("effect_replayed", status=rec.status, attempt=rec.attempts)

    async def _call(self, rec: EffectRecord, *, first: bool = False) -> Any:
        """Commit the intent of attempt ``rec.attempts``, call, commit the receipt; retry
        outcomes that say the call was not carried out, under the tool's retry policy."""
        tool = self.tool
        while True:
            try:
                token = self._admit()
            except ToolUnavailable:
                await self._flush()
                if not first:
                    # An earlier attempt is known not to have been carried out: say so, so
                    # that the redelivery calls again instead of treating it as ambiguous.
                    await self._write(msgspec.structs.replace(rec, status="retry"))
                raise
            await self._write(rec)  # I4: the intent is durable before the call
            first = False
            self.attempt = rec.attempts
            telemetry.effects_run.add(1, {"tether.tool": tool.name})
            started = time.monotonic()
            try:
                value = await self._invoke()
            except CallInterrupted as exc:  # neither a success nor a failure for the breaker
                self._outcome(token, asyncio.CancelledError(), started)
                return await self._interrupted(rec, exc)
            except BaseException as exc:
                self._outcome(token, exc, started)
                if not isinstance(exc, Exception):
                    raise  # cancellation: the intent stays, ambiguous, for the recovery policy
                outcome = classify(exc)
                error = describe(exc)
                history = [*rec.history, f"attempt {rec.attempts}: {error}"]
                self.log.warning(
                    "effect_attempt_failed", attempt=rec.attempts, outcome=outcome, error=error
                )
                # on the effect's span: each failed attempt of a retried call is seen in the trace
                telemetry.span_event(
                    "effect_attempt_failed",
                    {"attempt": rec.attempts, "outcome": outcome, "error": error},
                )
                retryable = outcome == "not_done" or (
                    outcome == "maybe_done" and tool.recovery == "retry"
                )
                if retryable and rec.attempts < tool.retry.max_attempts:
                    await self.cell.runtime.time.sleep(_retry_delay(tool, rec.attempts, exc))
                    rec = msgspec.structs.replace(
                        rec,
                        attempts=rec.attempts + 1,
                        history=history,
                        updated_at=self.cell.runtime.clock(),
                    )
                    continue
                if outcome == "maybe_done" and tool.recovery != "retry":
                    return await self._ambiguous(
                        msgspec.structs.replace(rec, history=history), error
                    )
                await self._write(
                    msgspec.structs.replace(
                        rec,
                        status="failed",
                        error=error,
                        history=history,
                        updated_at=self.cell.runtime.clock(),
                    )
                )
                failures = self.cell.tool_failures
                failures[tool.name] = failures.get(tool.name, 0) + 1
                raise ToolFailed(tool.name, self.key, error, rec.attempts) from exc
            self._outcome(token, None, started)
            return await self._receipt(rec, value)

    async def _invoke(self) -> Any:
        kwargs = dict(self.kwargs)
        if self.tool.takes_key:
            kwargs["idempotency_key"] = self.key
        with Interruptible(self.cell, self.tool.timeout) as call:
            return await self.tool.fn(**kwargs)
        raise call.cut_short()  # reached only when its scope cancelled the call

    async def _receipt(self, rec: EffectRecord, value: Any, note: str | None = None) -> Any:
        now = self.cell.runtime.clock()
        history = rec.history if note is None else [*rec.history, note]
        try:
            blob = self.tool.encode_result(value)
            problem = self._unstorable(value, blob)
            # What the step sees is what a replay will see: the recorded form of the result.
            result = self.tool.decode_result(blob) if problem is None else None
        except (*UNENCODABLE, msgspec.DecodeError) as exc:
            problem = f"cannot be recorded as {_type_name(self.tool.result_type)}: "
            problem += nesting_problem(value) or str(exc)
        if problem is not None:
            # The call happened (or the reconcile hook says so), but what it returned cannot
            # be recorded: nothing of it is, rather than a part.
            self._observe_result(None)
            shown = f"result {_shown(value)} {problem}"
            if self.tool.recovery != "retry":
                # A call with an unknown side effect: failing the step would tell the handler
                # "not done" about a call that was made, and a handler that then tries another
                # way does it twice. A person decides (mark it done with a result that fits,
                # retry it, or abort it).
                why = f"the call was made, but its {shown}"
                held = msgspec.structs.replace(rec, history=[*history, f"held: {why}"])
                self._suspend(why, held)
            # A "retry" tool may be called again at no risk (its receiver honors the key; the
            # model has no side effect): a failure, recorded, that the handler is told of.
            error = shown[0].upper() + shown[1:]
            await self._write(
                msgspec.structs.replace(
                    rec, status="failed", error=error, history=history, updated_at=now
                )
            )
            raise ToolFailed(self.tool.name, self.key, error, rec.attempts) from None
        self._observe_result(blob)
        self.cell.tool_failures.pop(self.tool.name, None)
        done = msgspec.structs.replace(
            rec, status="done", result=blob, history=history, updated_at=now
        )
        if self.tool.recovery == "retry" and self.tool.defer_receipt and note is None:
            # A tool whose receiver honors keys: its receipt rides with the actor's next commit
            # (the next intent, or the step). If the process dies first, the intent without a
            # receipt is retried with the same key, and the receiver answers from its record:
            # one commit round trip fewer per effect, at no risk of a second effect.
            self.defer_pending()
            self.cell.defer(EffectWrite(self.cell.fence, done))
            if self.step.ledger is not None:  # else not read yet; _recorded reads it first
                self.step.ledger[self.idx] = done
        else:
            await self._write(done)
        return result

    def _unstorable(self, value: Any, blob: bytes) -> str | None:
        """Why a result that encodes as ``blob`` is not recorded, or None. Bounded like a
        message (``max_message_bytes``): a tool's result, and a model's decision, is stored in
        the ledger and, by a session, in its journal and in every later model request."""
        limit = self.cell.runtime.max_message_bytes
        if len(blob) > limit:
            return (
                f"cannot be recorded: it is {len(blob)} bytes, over the runtime's "
                f"max_message_bytes ({limit})"
            )
        too_deep = nesting_problem(value, blob)
        return None if too_deep is None else f"cannot be recorded: {too_deep}"

    async def _ambiguous(self, rec: EffectRecord, why: str) -> Any:
        """An intent without a receipt: the call may or may not have happened (I4)."""
        tool = self.tool
        self.log.warning("effect_ambiguous", attempt=rec.attempts, why=why, recovery=tool.recovery)
        if tool.recovery == "retry":
            return await self._call(self._next_attempt(rec, f"ambiguous ({why}): retried"))
        if tool.recovery == "reconcile":
            if tool.reconcile_hook is None:
                self._suspend(f"{why}; tool has recovery='reconcile' but no reconcile hook", rec)
            verdict = await self.reconcile()
            match verdict:
                case Done(result=value):
                    self.log.info("effect_reconciled", verdict="done")
                    return await self._receipt(rec, value, "reconciled: done")
                case NotDone():
                    self.log.info("effect_reconciled", verdict="not done")
                    return await self._call(self._next_attempt(rec, "reconciled: not done"))
                case Unknown(reason=reason):
                    self._suspend(f"{why}; reconcile: {reason}", rec)
                case _:
                    self._suspend(f"{why}; the reconcile hook returned {verdict!r}", rec)
        self._suspend(why, rec)

    async def _interrupted(self, rec: EffectRecord, exc: CallInterrupted) -> Any:
        """An interrupted call (``tether.runtime.interrupts``), resolved by the tool's recovery
        policy without calling again: the handler gets ``EffectInterrupted``, unless the
        reconcile hook says the call happened (then its result, as usual)."""
        tool, why, now = self.tool, exc.why, self.cell.runtime.clock()
        self.log.warning("effect_interrupted", attempt=rec.attempts, why=why, made=exc.made)
        if not exc.made:  # the intent is recorded, the call was not made: a sure "not done"
            note = f"attempt {rec.attempts}: not made: {why} before the call"
            error = f"not made: {why}"
        else:
            note = f"attempt {rec.attempts}: {why} during the call: it may have been carried out"
            error = note.partition(": ")[2]
            if tool.recovery == "reconcile":
                verdict = await self.reconcile()
                if isinstance(verdict, Done):
                    return await self._receipt(rec, verdict.result, f"{note}; reconciled: done")
                if isinstance(verdict, NotDone):
                    note, error = f"{note}; reconciled: not done", f"{why}: reconciled: not done"
                else:
                    reason = getattr(verdict, "reason", repr(verdict))
                    return await self._hold_interrupted(rec, f"{error}; reconcile: {reason}", note)
            elif tool.recovery == "retry":  # its receiver honors the key: safe to call again
                error += "; calling again with its key is safe"
            else:
                return await self._hold_interrupted(rec, error, note)
        history = [*rec.history, note]
        failed = msgspec.structs.replace(
            rec, status="failed", error=error, history=history, updated_at=now
        )
        await self._write(failed)
        raise EffectInterrupted(tool.name, self.key, why, made=exc.made)

    async def _hold_interrupted(self, rec: EffectRecord, reason: str, note: str) -> NoReturn:
        """Quarantine an interrupted call for a person (who records what happened), without
        holding the step: it goes on, told that the call was interrupted."""
        held = msgspec.structs.replace(
            rec,
            status="quarantined",
            reason=reason,
            history=[*rec.history, note],
            updated_at=self.cell.runtime.clock(),
        )
        telemetry.effects_quarantined.add(1, {"tether.tool": self.tool.name})
        await self._write(held)
        raise EffectInterrupted(self.tool.name, self.key, reason, made=True)

    async def reconcile(self) -> Any:
        """Ask the tool's reconcile hook whether the call happened: its verdict, or
        ``Unknown`` (why) if it has none, raises, or does not answer in time."""
        tool, hook = self.tool, self.tool.reconcile_hook
        if hook is None:
            return Unknown("the tool has no reconcile hook")
        kwargs = dict(self.kwargs)
        kwargs["idempotency_key"] = self.key
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

    async def _violation(self, recorded: EffectRecord) -> Any:
        detail = (
            f"effect #{self.idx} of message {self.m.msg_id} was recorded as {recorded.tool} with "
            f"input {recorded.input_hash[:12]}, but the replayed step asked for {self.tool.name} "
            f"with input {self.input_hash[:12]}"
        )
        if recorded.status == "aborted":
            raise DeterminismViolation(self.tool.name, recorded.key, detail)
        self.log.error("determinism_violation", detail=detail)
        if recorded.status != "quarantined":
            violation = msgspec.structs.replace(
                recorded,
                status="quarantined",
                reason=f"determinism violation: {detail}",
                history=[*recorded.history, f"was {recorded.status}; {detail}"],
                updated_at=self.cell.runtime.clock(),
            )
            self._suspend(violation.reason or detail, violation)
        self._suspend(recorded.reason or detail, None)

    def _suspend(self, reason: str, rec: EffectRecord | None) -> NoReturn:
        """Hold the step for a person: the cell parks the message with ``rec`` quarantined."""
        if rec is not None:
            rec = msgspec.structs.replace(
                rec,
                status="quarantined",
                reason=reason,
                updated_at=self.cell.runtime.clock(),
            )
            telemetry.effects_quarantined.add(1, {"tether.tool": self.tool.name})
            self.log.error("effect_quarantined", reason=reason, attempt=rec.attempts)
        self.step.suspend(f"effect {self.key} ({self.tool.name}) is quarantined: {reason}", rec)
        raise StepSuspended(self.step.suspended or reason)


def _retry_delay(tool: Tool, attempt: int, exc: Exception) -> float:
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


def _shown(value: Any, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters (a result can be large), and never raising."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - any failure of a user __repr__
        return f"(a {type(value).__name__})"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _type_name(t: Any) -> str:
    """``str``, ``Receipt``, ``list[str]``: a result type as a person reads it."""
    return t.__qualname__ if isinstance(t, type) else repr(t)
