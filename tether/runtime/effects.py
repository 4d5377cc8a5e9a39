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

A new call passes, in order, the loop detector and the breaker (``admission.py``), then the
approval gate (``gate.py``), then the ledger (here); an ambiguous or interrupted call, and a
determinism violation, go to the tool's recovery policy (``recovery.py``). Each part is typed
against the protocol of what it touches of the call (``AdmittedCall``, ``GatedCall``,
``RecoveringCall``), which ``_Effect`` meets.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import TYPE_CHECKING, Any

import msgspec

from tether import telemetry
from tether.actors.messages import UNENCODABLE, nesting_problem
from tether.actors.tool import Tool, classify
from tether.errors import ConfigError, EffectAborted, StepSuspended, ToolFailed, ToolUnavailable
from tether.runtime import gate
from tether.runtime.admission import admit, observe_result, record_outcome, watch_loops
from tether.runtime.effect_host import EffectCell
from tether.runtime.interrupts import CallInterrupted, Interruptible
from tether.runtime.kernel import Staged
from tether.runtime.recovery import (
    ambiguous,
    describe,
    interrupted,
    retry_delay,
    shown,
    suspend,
    type_name,
    violation,
)
from tether.runtime.step import Step
from tether.store.records import EffectRecord, EffectWrite

if TYPE_CHECKING:
    from tether.runtime.guards import BreakerGuard, LoopWatch
    from tether.store.records import StoredMessage


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
    step.last_key = step.modified_args = None
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
            await violation(self, recorded)
        if recorded is not None and recorded.args != self.args_blob:
            gate.ran_with(self, recorded.args)  # a person modified the call its row records
        if recorded is None or recorded.status in ("pending", "retry"):
            # About to call: loop detector -> breaker -> gate -> ledger (DESIGN §6). The loop
            # detector sees each call once (a replay of its slot is not a new call, and a
            # call a person was asked about was seen before it was held); the breaker admits
            # each attempt; the gate decides whether the call waits for a person, and with
            # which arguments it runs (as approved, perhaps modified).
            asked = await gate.approval_for(self)
            if recorded is None and asked is None:
                await watch_loops(self)
            self.breaker = await self.cell.runtime.guards.breaker(self.tool)
            await gate.judge(self, asked)
        if recorded is None:
            return await self.call(self._record("pending", attempts=1), first=True)
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
                suspend(self, recorded.reason or "quarantined", None)
            case "retry":
                self.log.info("effect_retry_approved", attempt=recorded.attempts + 1)
                return await self.call(self.next_attempt(recorded, "retry approved"))
            case _:  # "pending": the intent is recorded, the outcome is not
                why = f"attempt {recorded.attempts} did not report back (the process stopped)"
                return await ambiguous(self, recorded, why)

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

    def next_attempt(self, rec: EffectRecord, note: str) -> EffectRecord:
        return msgspec.structs.replace(
            rec,
            status="pending",
            attempts=rec.attempts + 1,
            history=[*rec.history, note],
            updated_at=self.cell.runtime.clock(),
        )

    async def write(self, rec: EffectRecord) -> None:
        """Commit ``rec``, together with the guard events decided since the last write."""
        guards = [g.submit() for g in self.pending]  # submitted first: the same batch
        self.pending = []
        await self.cell.commit_effect(EffectWrite(self.cell.fence, rec), *guards)
        if self.step.ledger is not None:  # else not read yet: the store has it now
            self.step.ledger[self.idx] = rec

    async def flush(self) -> None:
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

    # -- outcomes ----------------------------------------------------------------------------

    def _replay_done(self, rec: EffectRecord) -> Any:
        """The recorded result of a call that happened. One that does not decode as the tool's
        result type (a result a person marked done from a process that could not check it, a
        tool whose return type changed, a damaged row) is held for a person, unless the tool is
        a "retry" one (as in ``receipt``): the call did happen, so neither calling again nor
        failing the step is the runtime's to decide, and failing would only spend the message's
        attempts on the same row."""
        try:
            value = self.tool.decode_result(rec.result or b"\xc0")
        except msgspec.DecodeError as exc:
            why = (
                f"its recorded result does not decode as {type_name(self.tool.result_type)}: {exc}"
            )
            if self.tool.recovery != "retry":
                held = msgspec.structs.replace(rec, history=[*rec.history, f"held: {why}"])
                suspend(self, why, held)
            self._mark_replayed(rec)
            raise ToolFailed(self.tool.name, self.key, why, rec.attempts) from None
        self._mark_replayed(rec)
        return value

    def _mark_replayed(self, rec: EffectRecord) -> None:
        self.replayed = True
        self.attempt = rec.attempts
        telemetry.effects_replayed.add(1, {"tether.tool": self.tool.name})
        self.log.info("effect_replayed", status=rec.status, attempt=rec.attempts)

    async def call(self, rec: EffectRecord, *, first: bool = False) -> Any:
        """Commit the intent of attempt ``rec.attempts``, call, commit the receipt; retry
        outcomes that say the call was not carried out, under the tool's retry policy."""
        tool = self.tool
        while True:
            try:
                token = admit(self)
            except ToolUnavailable as refused:
                await self.flush()
                if not first:
                    await self.refused_retry(rec, refused)
                raise
            await self.write(rec)  # I4: the intent is durable before the call
            first = False
            self.attempt = rec.attempts
            telemetry.effects_run.add(1, {"tether.tool": tool.name})
            started = time.monotonic()
            try:
                value = await self._invoke()
            except CallInterrupted as exc:  # neither a success nor a failure for the breaker
                record_outcome(self, token, asyncio.CancelledError(), started)
                return await interrupted(self, rec, exc)
            except BaseException as exc:
                record_outcome(self, token, exc, started)
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
                    await self.cell.runtime.time.sleep(retry_delay(tool, rec.attempts, exc))
                    rec = msgspec.structs.replace(
                        rec,
                        attempts=rec.attempts + 1,
                        history=history,
                        updated_at=self.cell.runtime.clock(),
                    )
                    continue
                if outcome == "maybe_done" and tool.recovery != "retry":
                    return await ambiguous(
                        self, msgspec.structs.replace(rec, history=history), error
                    )
                await self.write(
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
            record_outcome(self, token, None, started)
            return await self.receipt(rec, value)

    async def refused_retry(self, rec: EffectRecord, refused: ToolUnavailable) -> None:
        """Attempt ``rec.attempts`` (not the first) was refused by the open breaker: it was
        not made, nor any since the last one recorded. The row says "retry", so that a
        redelivery of the step calls again instead of taking the last attempt for ambiguous.
        If the step commits instead (its handler went on without the call), nothing would
        ever make or settle it: its commit settles the row as failed, in the same transaction
        (I2), saying why (``Step.refused_retries``)."""
        await self.write(msgspec.structs.replace(rec, status="retry"))
        refused.key = self.key
        error = (
            f"attempt {rec.attempts} was not made: the breaker of tool {self.tool.name!r} was "
            "open; the step went on without the call"
        )
        self.step.add_refused_retry(
            msgspec.structs.replace(
                rec,
                status="failed",
                attempts=rec.attempts - 1,  # the attempts made
                error=error,
                history=[*rec.history, f"attempt {rec.attempts} refused: {refused.reason}"],
                updated_at=self.cell.runtime.clock(),
            )
        )

    async def _invoke(self) -> Any:
        kwargs = dict(self.kwargs)
        if self.tool.takes_key:
            kwargs["idempotency_key"] = self.key
        with Interruptible(self.cell, self.tool.timeout) as call:
            return await self.tool.fn(**kwargs)
        raise call.cut_short()  # reached only when its scope cancelled the call

    async def receipt(self, rec: EffectRecord, value: Any, note: str | None = None) -> Any:
        now = self.cell.runtime.clock()
        history = rec.history if note is None else [*rec.history, note]
        try:
            blob = self.tool.encode_result(value)
            problem = self._unstorable(value, blob)
            # What the step sees is what a replay will see: the recorded form of the result.
            result = self.tool.decode_result(blob) if problem is None else None
        except (*UNENCODABLE, msgspec.DecodeError) as exc:
            problem = f"cannot be recorded as {type_name(self.tool.result_type)}: "
            problem += nesting_problem(value) or str(exc)
        if problem is not None:
            # The call happened (or the reconcile hook says so), but what it returned cannot
            # be recorded: nothing of it is, rather than a part.
            observe_result(self, None)
            what = f"result {shown(value)} {problem}"
            if self.tool.recovery != "retry":
                # A call with an unknown side effect: failing the step would tell the handler
                # "not done" about a call that was made, and a handler that then tries another
                # way does it twice. A person decides (mark it done with a result that fits,
                # retry it, or abort it).
                why = f"the call was made, but its {what}"
                held = msgspec.structs.replace(rec, history=[*history, f"held: {why}"])
                suspend(self, why, held)
            # A "retry" tool may be called again at no risk (its receiver honors the key; the
            # model has no side effect): a failure, recorded, that the handler is told of.
            error = what[0].upper() + what[1:]
            await self.write(
                msgspec.structs.replace(
                    rec, status="failed", error=error, history=history, updated_at=now
                )
            )
            raise ToolFailed(self.tool.name, self.key, error, rec.attempts) from None
        observe_result(self, blob)
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
            await self.write(done)
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
