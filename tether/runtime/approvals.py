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
* ``ApprovalPolicy(approvers=N)``: N distinct people must approve; one rejection rejects.
* ``ApprovalPolicy(timeout=..., on_timeout=...)``: past the deadline the default outcome
  applies (reject unless configured), even if the runtime was down when the deadline passed.
* A decision on an unknown request raises ``ApprovalNotFound``; on a decided or expired one,
  ``ApprovalClosed``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from tether.actors.actor import import_object
from tether.errors import (
    ApprovalClosed,
    ApprovalNotFound,
    ConfigError,
    CorruptRecordError,
    ToolInputError,
)
from tether.runtime import telemetry
from tether.runtime.store import ApprovalDecision, ApprovalRecord

if TYPE_CHECKING:
    from tether.actors.tool import Tool
    from tether.runtime.runtime import Runtime


class ApprovalPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How a held call is decided: a deadline with a default outcome, and a quorum."""

    timeout: float = 24 * 3600.0
    on_timeout: Literal["reject", "approve"] = "reject"
    approvers: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.timeout, bool) or not (
            isinstance(self.timeout, int | float) and self.timeout > 0
        ):
            raise ConfigError(f"ApprovalPolicy.timeout must be > 0 seconds, not {self.timeout!r}")
        if self.on_timeout not in ("reject", "approve"):
            raise ConfigError(
                f"ApprovalPolicy.on_timeout must be 'reject' or 'approve', not {self.on_timeout!r}"
            )
        if isinstance(self.approvers, bool) or not (
            isinstance(self.approvers, int) and self.approvers >= 1
        ):
            raise ConfigError(
                f"ApprovalPolicy.approvers must be an int >= 1, not {self.approvers!r}"
            )


class Approve(msgspec.Struct, frozen=True, kw_only=True):
    """Run the call as requested (or as last modified)."""

    by: str


class Reject(msgspec.Struct, frozen=True, kw_only=True):
    """Do not run it. ``reason`` goes back to the agent as an instruction."""

    by: str
    reason: str


class Modify(msgspec.Struct, frozen=True, kw_only=True):
    """Run it with these arguments instead (validated against the tool's schema)."""

    by: str
    args: dict[str, Any]


Decision = Approve | Reject | Modify
Handler = Callable[["ApprovalRequest"], Awaitable[Decision | None]]


class ApprovalRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a reviewer needs to decide in 30 seconds."""

    request_id: str
    session_id: str
    tool: str
    args: dict[str, Any]  # the call that will run if approved (as last modified)
    requested_args: dict[str, Any]  # the call as the agent asked for it
    reason: str  # why it was escalated
    context: dict[str, Any]  # the session's goal, what happens if rejected, ...
    deadline: float
    on_timeout: str
    approvers_needed: int
    approved_by: list[str]
    status: str
    decisions: list[dict[str, Any]]
    created_at: float


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
) -> ApprovalRecord:
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
        quorum=policy.approvers,
        created_at=now,
    )


def decided(
    record: ApprovalRecord, decision: Decision, now: float, tool: Tool | None
) -> ApprovalRecord:
    """``record`` with ``decision`` applied: pure, so that it can be retried on a conflict."""
    if isinstance(decision, Reject):
        # A reason that is not text was stored and made the record undecodable; a blank one
        # told the agent nothing.
        if not (isinstance(decision.reason, str) and decision.reason.strip()):
            raise ConfigError(
                f"a rejection needs a reason (text): it goes back to the agent, not {decision.reason!r}"
            )
        entry = ApprovalDecision(kind="reject", by=decision.by, at=now, reason=decision.reason)
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
        entry = ApprovalDecision(kind="modify", by=decision.by, at=now, args=call.args_blob)
        record = msgspec.structs.replace(
            record,
            decisions=[*record.decisions, entry],
            approved_args=call.args_blob,
            approved_fingerprint=fingerprint(record.tool, call.input_hash),
            version=record.version + 1,
        )
    else:
        entry = ApprovalDecision(kind="approve", by=decision.by, at=now)
        record = msgspec.structs.replace(
            record, decisions=[*record.decisions, entry], version=record.version + 1
        )
    if len(approvers(record)) >= record.quorum:
        record = msgspec.structs.replace(
            record,
            status="approved",
            approved_args=record.approved_args if record.approved_args is not None else record.args,
            approved_fingerprint=record.approved_fingerprint or record.fingerprint,
            decided_at=now,
        )
    return record


def approvers(record: ApprovalRecord) -> list[str]:
    """The distinct people whose approval counts for the call as it now stands: a
    modification starts the count again, with its author as the first approver."""
    names: list[str] = []
    for d in record.decisions:
        if d.kind == "modify":
            names = [d.by]
        elif d.kind == "approve" and d.by not in names:
            names.append(d.by)
    return names


def timed_out(record: ApprovalRecord, now: float) -> ApprovalRecord:
    """The default outcome, once the deadline has passed."""
    entry = ApprovalDecision(
        kind=record.on_timeout,
        by="timeout",
        at=now,
        reason=f"no decision within the deadline; policy on_timeout={record.on_timeout!r}",
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


class Approvals:
    """The runtime's approvals desk (``rt.approvals``)."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self._handlers: list[Handler] = []
        self._offered: set[str] = set()

    def attach(self, handler: Handler) -> None:
        """Call ``handler(request)`` for every request held in this runtime (and, at once, for
        those already pending); a returned decision is applied with ``decide``. A handler that
        returns None leaves the request for someone else."""
        if not callable(handler):
            raise ConfigError(f"an approval handler must be an async callable, not {handler!r}")
        self._handlers.append(handler)
        if self._rt.is_open:
            self._rt.start_soon(self.offer_pending)

    async def pending(
        self, session_id: str | None = None, *, include_expired: bool = False
    ) -> list[ApprovalRequest]:
        """Every request waiting for a decision (of one session, if given), oldest first.

        A request whose deadline has passed takes no decision any more; its default outcome
        applies when its session next runs. It is left out unless ``include_expired``.
        A request whose stored record cannot be decoded is left out too, and logged (once per
        process) as ``approval_record_corrupt`` naming it."""
        rows = await self._rt.store.find_approvals(
            status="pending", actor_id=session_id, on_corrupt=report_corrupt
        )
        now = self._rt.clock()
        return [view(r) for r in rows if include_expired or r.deadline > now]

    async def get(self, request_id: str) -> ApprovalRequest:
        return view(await self._load(request_id))

    async def decide(self, request_id: str, decision: Decision) -> ApprovalRequest:
        """Record ``decision``; when it completes the request, the held step runs again."""
        if not isinstance(decision, Approve | Reject | Modify):
            raise ConfigError(
                f"a decision is tether.Approve, tether.Reject or tether.Modify, not {decision!r}"
            )
        if not (isinstance(decision.by, str) and decision.by.strip()):
            # a blank name counted as one more distinct approver towards a quorum
            raise ConfigError(f"a decision must say who made it (by=...), not {decision.by!r}")
        for _ in range(20):  # compare-and-swap against concurrent deciders
            record = await self._load(request_id)
            now = self._rt.clock()
            if record.status != "pending":
                raise ApprovalClosed(request_id, f"it was already {record.status}")
            if now >= record.deadline:
                raise ApprovalClosed(
                    request_id,
                    f"its deadline passed {now - record.deadline:.0f} s ago "
                    f"(on_timeout={record.on_timeout})",
                )
            if isinstance(decision, Approve) and decision.by in approvers(record):
                raise ConfigError(f"{decision.by!r} has already approved request {request_id}")
            tool = _import_tool(record) if isinstance(decision, Modify) else None
            new = decided(record, decision, now, tool)
            if not telemetry.tracing_enabled():
                swapped = await self._rt.store.update_approval(new, record.version)
            else:
                attributes = {
                    "tether.approval_id": request_id,
                    "tether.session_id": record.actor_id,
                    "tether.tool": record.tool,
                    "tether.decision": type(decision).__name__.lower(),
                    "tether.decided_by": decision.by,
                    "tether.status": new.status,
                }
                with telemetry.tracer.start_as_current_span(
                    "tether.approval.decide", attributes=attributes
                ):
                    swapped = await self._rt.store.update_approval(new, record.version)
            if swapped:
                self._decided(record, new, decision)
                return view(new)
        raise ApprovalClosed(request_id, "too many concurrent decisions; try again")

    def _decided(self, old: ApprovalRecord, new: ApprovalRecord, decision: Decision) -> None:
        kind = type(decision).__name__.lower()
        telemetry.approval_decisions.add(1, {"decision": kind})
        telemetry.log.info(
            "approval_decided",
            request_id=new.request_id,
            session_id=new.actor_id,
            tool=new.tool,
            decision=kind,
            by=decision.by,
            status=new.status,
        )
        if new.status != "pending":
            telemetry.approval_latency.record(max(0.0, (new.decided_at or 0.0) - old.created_at))
            if new.actor_id in self._rt.cells:  # elsewhere, the owner's scan finds it
                self._rt.wake_actor(new.actor_id)

    async def _load(self, request_id: str) -> ApprovalRecord:
        if not isinstance(request_id, str) or not request_id:
            # None is "no filter" to the store: it found every request, and decide() then
            # decided the oldest one, of whichever session
            raise ApprovalNotFound(request_id)
        rows = await self._rt.store.find_approvals(request_id=request_id)
        if not rows:
            raise ApprovalNotFound(request_id)
        return rows[0]

    # -- inside the runtime ------------------------------------------------------------------

    def requested(self, record: ApprovalRecord) -> None:
        """A step was just parked on ``record``: offer it to the attached handlers."""
        telemetry.escalations.add(1, {"tool": record.tool})
        telemetry.guard_event(
            "approval_requested",
            request_id=record.request_id,
            session_id=record.actor_id,
            tool=record.tool,
            reason=record.reason,
            deadline=record.deadline,
        )
        if self._handlers:
            self._rt.start_soon(self._offer, record.request_id)

    async def offer_pending(self) -> None:
        """Offer every pending request to the attached handlers: those held before this
        runtime started (their sessions may be passivated until their deadline), and those
        held by other runtimes on the store. Deciding twice is harmless: the first decision
        wins and the second is refused (``ApprovalClosed``), so several runtimes with
        handlers may offer the same request. A request that cannot be decoded is logged and
        skipped: this runs on every orphan scan of the scheduler, which must go on to its
        other work."""
        if not self._handlers:
            return
        now = self._rt.clock()
        for record in await self._rt.store.find_approvals(
            status="pending", on_corrupt=report_corrupt
        ):
            if record.deadline > now and record.request_id not in self._offered:
                self._rt.start_soon(self._offer, record.request_id)

    async def _offer(self, request_id: str) -> None:
        if request_id in self._offered:
            return
        self._offered.add(request_id)
        try:
            for handler in list(self._handlers):
                request = await self.get(request_id)
                if request.status != "pending":
                    return
                try:
                    decision = await handler(request)
                except Exception as exc:  # noqa: BLE001 - a broken handler must not stop others
                    telemetry.log.error(
                        "approval_handler_failed", request_id=request_id, error=repr(exc)
                    )
                    continue
                if decision is None:
                    continue
                try:
                    request = await self.decide(request_id, decision)
                except (ApprovalClosed, ConfigError, ToolInputError) as exc:
                    telemetry.log.error(
                        "approval_handler_decision_refused", request_id=request_id, error=str(exc)
                    )
                    continue
                if request.status != "pending":
                    return
        finally:
            self._offered.discard(request_id)


def _import_tool(record: ApprovalRecord) -> Tool | None:
    from tether.actors.tool import Tool

    if not record.tool_path:
        return None
    try:
        found = import_object(record.tool_path)
    except ConfigError:
        return None
    return found if isinstance(found, Tool) else None
