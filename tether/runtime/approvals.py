"""``rt.approvals``: calls held for a person, and the decisions that release them (I9).

A call is held when its tool has ``requires_approval=True`` (or a loop or policy escalates it).
The step that asked for it is parked — durably, with the request and its deadline — and the
actor goes on with other messages. A decision can come from anywhere that opens the same store:
a handler attached in this process, the ``tether approvals`` CLI, a web hook calling
``decide``. When the decision completes the request, the parked step is delivered again and
the call runs — exactly the call that was approved, once.

Rules:

* A request is bound to a fingerprint of the exact call (tool + canonical arguments).
  ``Modify`` replaces the arguments, which are validated against the tool's schema and
  re-fingerprinted; approvals given before a modification do not count for the new call.
* ``ApprovalPolicy(approvers_needed=N)``: N distinct people must approve; one rejection rejects.
* ``ApprovalPolicy(timeout=..., on_timeout=...)``: past the deadline the default outcome
  applies (reject unless configured), even if the runtime was down when the deadline passed.
* A decision on an unknown request raises ``ApprovalNotFound``; on a decided or expired one,
  ``ApprovalClosed``; on one that changed since the decider read it (``expected_version``),
  ``ApprovalChanged``; by an identity that may only look, ``NotPermitted``.
* Every decision says who made it and through what (``tether.Identity``): a quorum counts
  distinct authenticated people, and names nobody checked (the CLI's ``--by``) count as one
  approver together. Every attempt, allowed or refused, is audited (``tether.runtime.audit``).
* ``ApprovalPolicy(notify=Webhook(url, secret))``: each new request and its outcome are
  posted, signed, through the effects ledger (``tether.runtime.notices``).

The desk itself (``rt.approvals``) is in ``approval_desk.py``; this module holds the records'
pure functions, so that the gate, the desk and the CLI share them. The values an actor declares
and a person gives (``ApprovalPolicy``, ``Approve``, ``Reject``, ``Modify``, ``ApprovalRequest``)
live with the other guard policies in ``tether.actors.guards.gate`` and are re-exported here.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import msgspec

from tether import telemetry
from tether.actors.actor import warn_if_main
from tether.actors.guards.gate import ApprovalPolicy as ApprovalPolicy
from tether.actors.guards.gate import ApprovalRequest as ApprovalRequest
from tether.actors.guards.gate import Approve as Approve
from tether.actors.guards.gate import Decision as Decision
from tether.actors.guards.gate import Handler as Handler
from tether.actors.guards.gate import Modify as Modify
from tether.actors.guards.gate import Reject as Reject
from tether.errors import ConfigError, CorruptRecordError, ToolInputError
from tether.runtime.audit import Identity
from tether.store.records import ApprovalDecision, ApprovalRecord

if TYPE_CHECKING:
    from tether.actors.tool import Tool


def request_id_for(actor_id: str, msg_id: str, idx: int) -> str:
    """Requests are named by their call's place, so every replay of the step finds its own."""
    digest = hashlib.sha256(f"{actor_id}\x1f{msg_id}\x1f{idx}".encode()).hexdigest()
    return f"apr-{digest[:16]}"


def fingerprint(tool: str, input_hash: str) -> str:
    return hashlib.sha256(f"{tool}\x1f{input_hash}".encode()).hexdigest()[:32]


def new_request(
    *,
    actor_id: str,
    msg_id: str,
    idx: int,
    tool: Tool,
    args_blob: bytes,
    input_hash: str,
    reason: str,
    context: dict[str, Any],
    policy: ApprovalPolicy,
    now: float,
    traceparent: str | None = None,
) -> ApprovalRecord:
    if tool.path:  # another process validates a Modify decision by importing the tool
        warn_if_main(tool.path, "tool")
    return ApprovalRecord(
        request_id=request_id_for(actor_id, msg_id, idx),
        actor_id=actor_id,
        msg_id=msg_id,
        idx=idx,
        tool=tool.name,
        tool_path=tool.path or "",
        args=args_blob,
        fingerprint=fingerprint(tool.name, input_hash),
        reason=reason,
        context=msgspec.msgpack.encode(context),
        deadline=now + policy.timeout,
        on_timeout=policy.on_timeout,
        quorum=policy.approvers_needed,
        created_at=now,
        notify=[w.url for w in policy.webhooks()],
        traceparent=traceparent,
    )


def decided(
    record: ApprovalRecord,
    decision: Decision,
    now: float,
    tool: Tool | None,
    identity: Identity | None = None,
) -> ApprovalRecord:
    """``record`` with ``decision`` by ``identity`` applied (default: ``decision.by``, as the
    application's code says): pure, so that it can be retried on a conflict."""
    who = identity if identity is not None else Identity(name=decision.by)

    def mark(kind: str, reason: str | None = None, args: bytes | None = None) -> ApprovalDecision:
        return ApprovalDecision(
            kind=kind,
            by=who.name,
            at=now,
            reason=reason,
            args=args,
            authenticated=who.authenticated,
            via=who.via,
        )

    if isinstance(decision, Reject):
        # A reason that is not text was stored and made the record undecodable; a blank one
        # told the agent nothing.
        if not (isinstance(decision.reason, str) and decision.reason.strip()):
            raise ConfigError(
                f"a rejection needs a reason (text): it goes back to the agent, not {decision.reason!r}"
            )
        entry = mark("reject", decision.reason)
        return msgspec.structs.replace(
            record,
            status="rejected",
            decisions=[*record.decisions, entry],
            version=record.version + 1,
            decided_at=now,
        )
    if isinstance(decision, Modify):
        if tool is None:
            raise ConfigError(
                f"cannot validate modified arguments: tool {record.tool!r} "
                f"({record.tool_path or 'no import path'}) cannot be imported here"
            )
        if not isinstance(decision.args, dict):
            # dict(None) or dict("x") raised a bare TypeError or ValueError, which crashed the
            # runtime when an attached handler returned it
            raise ToolInputError(
                record.tool,
                f"Modify.args must be a dict of argument names to values, not {decision.args!r}",
            )
        call = tool.prepare(dict(decision.args))  # ToolInputError names the field
        entry = mark("modify", _comment(decision.comment), call.args_blob)
        record = msgspec.structs.replace(
            record,
            decisions=[*record.decisions, entry],
            approved_args=call.args_blob,
            approved_fingerprint=fingerprint(record.tool, call.input_hash),
            version=record.version + 1,
        )
    else:
        entry = mark("approve", _comment(decision.comment))
        record = msgspec.structs.replace(
            record, decisions=[*record.decisions, entry], version=record.version + 1
        )
    if approvals_counted(record) >= record.quorum:
        record = msgspec.structs.replace(
            record,
            status="approved",
            approved_args=record.approved_args if record.approved_args is not None else record.args,
            approved_fingerprint=record.approved_fingerprint or record.fingerprint,
            decided_at=now,
        )
    return record


def _comment(text: str | None) -> str | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ConfigError(f"a comment is text, not {text!r}")
    return text.strip() or None


def _approvals(record: ApprovalRecord) -> list[ApprovalDecision]:
    """The approvals of the call as it now stands: a modification starts them again, as the
    first of them."""
    current: list[ApprovalDecision] = []
    for d in record.decisions:
        if d.kind == "modify":
            current = [d]
        elif d.kind == "approve":
            current.append(d)
    return current


def approvers(record: ApprovalRecord) -> list[str]:
    """The distinct names that approved the call as it now stands."""
    return list(dict.fromkeys(d.by for d in _approvals(record)))


def approvals_counted(record: ApprovalRecord) -> int:
    """How many approvers the call as it now stands has, towards its quorum: each distinct
    authenticated person once, and every name nobody checked (the CLI's ``--by``) together
    once, as such names cannot be told apart: one person typing two names is one approver."""
    checked = {d.by for d in _approvals(record) if d.authenticated}
    unchecked = {d.by for d in _approvals(record) if not d.authenticated} - checked
    return len(checked) + (1 if unchecked else 0)


def approval_refused(record: ApprovalRecord, who: Identity) -> str | None:
    """Why ``who`` may not approve ``record`` now (it would not count), or None."""
    names = approvers(record)
    if who.name in names:
        return f"{who.name!r} has already approved request {record.request_id}"
    if not who.authenticated:
        unchecked = [d.by for d in _approvals(record) if not d.authenticated]
        if unchecked:
            return (
                f"{who.name!r} is a name nobody checked, and request {record.request_id} "
                f"already has an approval by such a name ({unchecked[0]!r}): they count as "
                "one approver together; the quorum needs distinct authenticated people"
            )
    return None


def current_fingerprint(record: ApprovalRecord) -> str:
    """The fingerprint of the call that runs if ``record`` is approved as it stands."""
    return record.approved_fingerprint or record.fingerprint


def timed_out(record: ApprovalRecord, now: float) -> ApprovalRecord:
    """The default outcome, once the deadline has passed."""
    entry = ApprovalDecision(
        kind=record.on_timeout,
        by="timeout",
        at=now,
        reason=f"no decision within the deadline; policy on_timeout={record.on_timeout!r}",
        via="policy",
    )
    approved = record.on_timeout == "approve"
    return msgspec.structs.replace(
        record,
        status="approved" if approved else "rejected",
        decisions=[*record.decisions, entry],
        approved_args=(record.approved_args or record.args) if approved else None,
        approved_fingerprint=(record.approved_fingerprint or record.fingerprint)
        if approved
        else None,
        version=record.version + 1,
        decided_at=now,
    )


def view(record: ApprovalRecord) -> ApprovalRequest:
    args_now = record.approved_args if record.approved_args is not None else record.args
    return ApprovalRequest(
        request_id=record.request_id,
        session_id=record.actor_id,
        tool=record.tool,
        args=_decode_args(args_now),
        requested_args=_decode_args(record.args),
        reason=record.reason,
        context=_decode_args(record.context),
        deadline=record.deadline,
        on_timeout=record.on_timeout,
        approvers_needed=record.quorum,
        approved_by=approvers(record),
        status=record.status,
        decisions=[
            {k: v for k, v in msgspec.to_builtins(d).items() if k != "args"}
            | ({"args": _decode_args(d.args)} if d.args is not None else {})
            for d in record.decisions
        ],
        created_at=record.created_at,
        version=record.version,
        fingerprint=current_fingerprint(record),
        approvals_counted=approvals_counted(record),
    )


# Request ids whose undecodable record this process has already logged: listings run again and
# again (every orphan scan offers the pending requests to the handlers), and one error naming
# the request is enough; addressing it by id still raises CorruptRecordError every time.
_reported_corrupt: set[str] = set()


def report_corrupt(request_id: str, error: CorruptRecordError) -> None:
    """Log, once per process, a request that a listing left out because it cannot be decoded."""
    if request_id in _reported_corrupt:
        return
    _reported_corrupt.add(request_id)
    telemetry.log.error("approval_record_corrupt", request_id=request_id, error=str(error))


def _decode_args(blob: bytes) -> dict[str, Any]:
    try:
        return msgspec.msgpack.decode(blob, type=dict[str, Any])
    except msgspec.DecodeError:
        return {"(undecodable)": blob.hex()}
