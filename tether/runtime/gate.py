"""The approval gate of an effect (I9): a call that needs a person waits, durably, for one.

``judge`` runs on the effect path after the loop watch and the breaker: a call whose tool
requires approval, or that a guard or the session escalates, parks its step with a request
(``approvals.new_request``) and its deadline; on the step's redelivery the stored request
decides: still pending (wait on), expired (its default outcome), rejected (raise, so that the
agent hears why), or approved, when exactly the approved call runs (``Modify``: the arguments
as modified). The gate's decisions are journaled in the session's ``Gate`` actor, with the
session's next commit.

``GatedCall`` is what the gate reads and sets of the call it judges. A call that runs with
arguments a person modified says so to its handler (``ran_with``: ``Step.modified_args``), on
its first run and on every replay of its ledger row.
"""

from __future__ import annotations

from typing import Any, NoReturn, Protocol

import msgspec

from tether.actors.guards.actors import ApprovalRequested, ApprovalSettled
from tether.actors.tool import Tool
from tether.errors import ApprovalRejected, DeterminismViolation, StepSuspended
from tether.runtime import approvals, notices, tracing
from tether.runtime.effect_host import EffectCell
from tether.runtime.kernel import Staged
from tether.runtime.step import Step
from tether.store.records import ApprovalRecord, NewMessage, StoredMessage


class GatedCall(Protocol):
    """What the gate reads and sets of the call it judges (``effects._Effect``)."""

    cell: EffectCell
    step: Step
    m: StoredMessage
    tool: Tool
    idx: int
    input_hash: str
    kwargs: dict[str, Any]  # the call that runs: as approved (perhaps modified)
    args_blob: bytes

    @property
    def log(self) -> Any: ...

    def journal(self, staged: Staged | None) -> None: ...


async def judge(call: GatedCall, record: ApprovalRecord | None) -> None:
    """Hold the call for a person when it needs approval; on approval, run exactly the
    approved call (``call.kwargs`` / ``call.args_blob``); on rejection, raise.

    Invariant: a request recorded for this call's place (``record``: same message, same
    effect index) decides the call whatever escalates it now. The reason is looked for
    only when there is no request: a replay may not find it again (the loop detector
    takes a replayed slot for no new call, a run of failures is counted in memory and
    lost with the process, ``escalation_reason`` may answer otherwise), and a rejection
    that held only while its reason was found again let the rejected call run on the
    step's redelivery, unheard by the agent."""
    cell, tool = call.cell, call.tool
    rt = cell.runtime
    rid = approvals.request_id_for(cell.actor_id, call.m.msg_id, call.idx)
    now = rt.clock()
    if record is None:
        reason = _escalation(call)
        if reason is None:
            return
        await _hold(call, rid, reason, now)
    if record.fingerprint != approvals.fingerprint(tool.name, call.input_hash):
        raise DeterminismViolation(
            tool.name,
            rid,
            f"approval {rid} was asked for another call at effect #{call.idx}; "
            "what was approved is the only thing that may run there",
        )
    if record.status == "pending":
        if now < record.deadline:
            call.step.suspend(f"call {tool.name} waits for approval {rid}", until=record.deadline)
            raise StepSuspended(call.step.suspended or rid)
        expired = await rt.approvals.record_timeout(record, now)
        if expired is not None:
            record = expired
            call.log.warning("approval_timed_out", request_id=rid, outcome=record.status)
        else:  # decided meanwhile: take what is stored
            record = (await rt.store.find_approvals(request_id=rid))[0]
    await _settled(call, record, now)
    if record.status == "rejected":
        last = record.decisions[-1] if record.decisions else None
        raise ApprovalRejected(
            tool.name,
            rid,
            last.by if last else "unknown",
            (last.reason if last else None) or "rejected",
        )
    if record.status != "approved" or record.approved_args is None:
        raise DeterminismViolation(tool.name, rid, f"approval {rid} is {record.status}")
    if record.approved_args != call.args_blob:
        approved = tool.prepare(msgspec.msgpack.decode(record.approved_args, type=dict))
        ran_with(call, approved.args_blob)
        call.kwargs, call.args_blob = approved.kwargs, approved.args_blob
    call.log.info("approval_applied", request_id=rid, modified=record.approved_args != record.args)


def ran_with(call: GatedCall, args_blob: bytes) -> None:
    """The call runs (or ran: its ledger row says so) with ``args_blob``, not with the
    arguments its handler gave: a person modified it on approval. Told to the handler
    (``Actor.last_effect_modified_args``), so that an agent session records, and tells its
    model, the call that ran. Arguments equal as values are no modification, nor is a row
    whose arguments do not decode (what they were cannot be told)."""
    if args_blob == call.args_blob:
        return
    try:
        if msgspec.msgpack.decode(args_blob, type=dict) == msgspec.msgpack.decode(call.args_blob):
            return
    except msgspec.DecodeError:
        return
    call.step.modified_args = args_blob


async def _hold(call: GatedCall, rid: str, reason: str, now: float) -> NoReturn:
    """Hold the call for a person: a new request (``rid``) for its place, stored with the park
    of its step, with its notices; the gate journals that it held it."""
    cell, tool = call.cell, call.tool
    rt = cell.runtime
    instance = cell.instance
    context = instance.approval_context(tool.name, dict(call.kwargs)) if instance else {}
    policy = getattr(instance, "approval_policy", None) or rt.approval_policy
    record = approvals.new_request(
        actor_id=cell.actor_id,
        msg_id=call.m.msg_id,
        idx=call.idx,
        tool=tool,
        args_blob=call.args_blob,
        input_hash=call.input_hash,
        reason=reason,
        context=context,
        policy=policy,
        now=now,
        traceparent=tracing.current() or call.m.traceparent,
    )
    stored = await _notices(call, record)
    await _gate_event(
        call,
        ApprovalRequested(
            request_id=rid,
            tool=tool.name,
            reason=reason,
            fingerprint=record.fingerprint,
            deadline=record.deadline,
            at=now,
        ),
    )
    call.step.suspend(
        f"call {tool.name} waits for approval {rid}: {reason}",
        until=record.deadline,
        approval=record,
        notices=stored,
    )
    raise StepSuspended(call.step.suspended or reason)


async def _notices(call: GatedCall, record: ApprovalRecord) -> list[NewMessage]:
    """The ``approval.requested`` notices of a new request, stored with its park."""
    if not record.notify:
        return []
    rt = call.cell.runtime
    await notices.ensure_notifiers(rt.guards, record.notify)
    request = msgspec.to_builtins(approvals.view(record))
    return notices.notices(rt, record, notices.REQUESTED, request, record.created_at)


async def _gate_event(call: GatedCall, event: Any) -> None:
    """Journal ``event`` in the session's gate, with the session's next commit."""
    gate = await call.cell.runtime.guards.gate(call.cell)
    if gate is not None:
        call.journal(gate.stage_events([event]))


async def _settled(call: GatedCall, record: ApprovalRecord, now: float) -> None:
    """The first time the session sees its request decided, the gate journals how."""
    gate = await call.cell.runtime.guards.gate(call.cell)
    if gate is None or record.request_id not in gate.state.pending:
        return
    last = record.decisions[-1] if record.decisions else None
    call.journal(
        gate.stage_events(
            [
                ApprovalSettled(
                    request_id=record.request_id,
                    status=record.status,
                    by=last.by if last else "unknown",
                    reason=(last.reason if last else None) or "",
                    at=now,
                )
            ]
        )
    )


def _escalation(call: GatedCall) -> str | None:
    """Why this call must wait for a person, or None."""
    if call.tool.requires_approval:
        return f"tool {call.tool.name} requires approval"
    escalations = call.step.escalations
    forced = escalations.get(call.idx) if escalations else None
    if forced is not None:
        return forced
    instance = call.cell.instance
    limit = getattr(instance, "escalate_after_failures", None)
    failed = call.cell.tool_failures.get(call.tool.name, 0)
    if limit is not None and failed >= limit:
        return f"tool {call.tool.name} failed {failed} times in a row in this session"
    if instance is not None:
        return instance.escalation_reason(call.tool.name, dict(call.kwargs))
    return None


async def approval_for(call: GatedCall) -> ApprovalRecord | None:
    """The request made for this call's place on an earlier run of the step, if any."""
    if call.m.attempts <= 1 and call.m.parks == 0:
        return None  # a message that never waited has no request yet
    rid = approvals.request_id_for(call.cell.actor_id, call.m.msg_id, call.idx)
    rows = await call.cell.runtime.store.find_approvals(request_id=rid)
    return rows[0] if rows else None
