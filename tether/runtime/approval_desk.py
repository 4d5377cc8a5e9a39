"""``rt.approvals``: the desk where held calls are listed and decided (rules: ``approvals.py``).

Every decision goes through ``decide``, whoever makes it — an attached handler, the CLI, the
console, the application's own code — so fingerprints, versions, deadlines, quorums, the
audit log and the outcome's notices are enforced and written in one place. A decision and
its audit row (and its notices) are one store transaction (``Store.update_approval``); a
refused attempt is audited on its own (``tether.runtime.audit``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from tether import telemetry
from tether.actors.actor import import_class, import_object
from tether.actors.guards.webhook import Webhook
from tether.errors import (
    AlreadyApproved,
    ApprovalChanged,
    ApprovalClosed,
    ApprovalNotFound,
    ConfigError,
    NotPermitted,
    ToolInputError,
)
from tether.runtime import notices, tracing
from tether.runtime.approvals import (
    ApprovalPolicy,
    ApprovalRequest,
    Approve,
    Decision,
    Handler,
    Modify,
    Reject,
    approval_refused,
    approvals_counted,
    current_fingerprint,
    decided,
    report_corrupt,
    timed_out,
    view,
)
from tether.runtime.audit import Identity, check_identity, entry, refused
from tether.store.records import ApprovalRecord, AuditRecord, NewMessage

if TYPE_CHECKING:
    from tether.actors.tool import Tool
    from tether.runtime.kernel import Kernel

#: What a refused decision raises; each is audited before it is raised.
_REFUSALS = (
    ApprovalNotFound,
    ApprovalClosed,
    ApprovalChanged,
    NotPermitted,
    ConfigError,
    ToolInputError,
)


class Approvals:
    """The runtime's approvals desk (``rt.approvals``)."""

    def __init__(self, runtime: Kernel) -> None:
        self._rt = runtime
        self._handlers: list[Handler] = []
        self._offered: set[str] = set()

    def attach(self, handler: Handler) -> None:
        """Call ``handler(request)`` for every request held in this runtime (and, at once, for
        those already pending); a returned decision is applied with ``decide`` (``via``
        ``"policy"``). A handler that returns None leaves the request for someone else."""
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

    async def decide(
        self,
        request_id: str,
        decision: Decision,
        *,
        identity: Identity | None = None,
        expected_version: int | None = None,
    ) -> ApprovalRequest:
        """Record ``decision``; when it completes the request, the held step runs again.

        ``identity``: who decides and through what, as an authentication layer established
        it (``decision.by`` must be its name). Without one, the decision is the application's
        own code's (``via="app"``), which vouches for ``decision.by``. ``expected_version``:
        the request's ``version`` the decider read; if it changed since (another decision,
        a modification), ``ApprovalChanged`` is raised and nothing is decided.

        Every attempt is audited: an allowed one in the decision's own transaction, a
        refused one (``ApprovalNotFound``, ``ApprovalClosed``, ``ApprovalChanged``,
        ``NotPermitted``, a ``ConfigError`` or ``ToolInputError`` naming the problem) before
        its error is raised."""
        if not isinstance(decision, Approve | Reject | Modify):
            raise ConfigError(
                f"a decision is tether.Approve, tether.Reject or tether.Modify, not {decision!r}"
            )
        if identity is None:
            if not (isinstance(decision.by, str) and decision.by.strip()):
                # a blank name counted as one more distinct approver towards a quorum
                raise ConfigError(f"a decision must say who made it (by=...), not {decision.by!r}")
            who = Identity(name=decision.by)
        else:
            who = check_identity(identity)
            if decision.by != who.name:
                raise ConfigError(
                    f"decision.by ({decision.by!r}) is not the deciding identity's name "
                    f"({who.name!r}): a decision is made by whoever was authenticated"
                )
        if expected_version is not None and (
            type(expected_version) is not int or expected_version < 0
        ):
            raise ConfigError(f"expected_version must be an int >= 0, not {expected_version!r}")
        action = type(decision).__name__.lower()
        for _ in range(20):  # compare-and-swap against concurrent deciders
            now = self._rt.clock()
            row = entry(who, action, str(request_id), now)
            try:
                record = await self._load(request_id)
                row = entry(
                    who,
                    action,
                    record.request_id,
                    now,
                    actor_id=record.actor_id,
                    version_before=record.version,
                    fingerprint=current_fingerprint(record),
                )
                new = self._apply(record, decision, who, now, expected_version)
            except _REFUSALS as exc:
                await refused(self._rt, row, exc)
                raise
            allowed = msgspec.structs.replace(
                row,
                version_after=new.version,
                fingerprint=current_fingerprint(new),
                detail=_outcome(new),
            )
            stored = self._outcome_notices(new)
            if await self._swap(new, record, allowed, stored, decision, who):
                self._decided(record, new, decision, who)
                notices.wake(self._rt, stored)
                return view(new)
        closed = ApprovalClosed(str(request_id), "too many concurrent decisions; try again")
        await refused(self._rt, entry(who, action, str(request_id), self._rt.clock()), closed)
        raise closed

    def _apply(
        self,
        record: ApprovalRecord,
        decision: Decision,
        who: Identity,
        now: float,
        expected_version: int | None,
    ) -> ApprovalRecord:
        """``record`` with the decision applied, or the refusal raised."""
        if who.forbidden is not None:
            raise NotPermitted(who.name, who.forbidden)
        if record.status != "pending":
            raise ApprovalClosed(record.request_id, f"it was already {record.status}")
        if now >= record.deadline:
            raise ApprovalClosed(
                record.request_id,
                f"its deadline passed {now - record.deadline:.0f} s ago "
                f"(on_timeout={record.on_timeout})",
            )
        if expected_version is not None and record.version != expected_version:
            raise ApprovalChanged(record.request_id, expected_version, record.version)
        if isinstance(decision, Approve):
            why = approval_refused(record, who)
            if why is not None:
                raise AlreadyApproved(why)
        tool = _import_tool(record) if isinstance(decision, Modify) else None
        return decided(record, decision, now, tool, who)

    async def _swap(
        self,
        new: ApprovalRecord,
        old: ApprovalRecord,
        audit: AuditRecord,
        stored: list[NewMessage],
        decision: Decision,
        who: Identity,
    ) -> bool:
        store = self._rt.store
        if not telemetry.tracing_enabled():
            return await store.update_approval(new, old.version, audit=audit, notices=stored)
        attributes = {
            "tether.approval_id": new.request_id,
            "tether.session_id": new.actor_id,
            "tether.tool": new.tool,
            "tether.decision": type(decision).__name__.lower(),
            "tether.decided_by": who.name,
            "tether.decided_via": who.via,
            "tether.status": new.status,
        }
        with tracing.span_in_trace_of("tether.approval.decide", old.traceparent, attributes):
            return await store.update_approval(new, old.version, audit=audit, notices=stored)

    def _outcome_notices(self, record: ApprovalRecord) -> list[NewMessage]:
        if record.status == "pending" or not record.notify:
            return []
        request = msgspec.to_builtins(view(record))
        return notices.notices(self._rt, record, notices.DECIDED, request, self._rt.clock())

    async def record_timeout(self, record: ApprovalRecord, now: float) -> ApprovalRecord | None:
        """Apply ``record``'s default outcome, its deadline having passed (the gate calls this
        when the session looks at it again): stored with its audit row (``via="policy"``) and
        its notices, in one transaction. The new record, or None if it was decided meanwhile."""
        expired = timed_out(record, now)
        row = entry(
            Identity(name="timeout", via="policy"),
            "timeout",
            record.request_id,
            now,
            actor_id=record.actor_id,
            version_before=record.version,
            version_after=expired.version,
            fingerprint=current_fingerprint(expired),
            detail=f"deadline passed: {_outcome(expired)}",
        )
        stored = self._outcome_notices(expired)
        if not await self._rt.store.update_approval(
            expired, record.version, audit=row, notices=stored
        ):
            return None
        notices.wake(self._rt, stored)
        return expired

    async def webhook(self, session_id: str, url: str) -> Webhook:
        """The ``Webhook`` for ``url`` in the approval policy of session ``session_id`` (its
        class's ``approval_policy``) or in this runtime's: where the notifier finds the secret
        to sign a notice with. ``ConfigError`` if neither has it (a policy that changed since
        the notice was stored: the notice waits in dead letters until it can be signed)."""
        policies: list[ApprovalPolicy] = []
        rec = await self._rt.store.get_actor(session_id)
        if rec is not None:
            policy = getattr(import_class(rec.class_path), "approval_policy", None)
            if isinstance(policy, ApprovalPolicy):
                policies.append(policy)
        policies.append(self._rt.approval_policy)
        for policy in policies:
            for hook in policy.webhooks():
                if hook.url == url:
                    return hook
        raise ConfigError(
            f"no tether.Webhook for {url} in the approval policy of session {session_id!r} "
            "nor in the runtime's: this runtime cannot sign its notice"
        )

    def _decided(
        self, old: ApprovalRecord, new: ApprovalRecord, decision: Decision, who: Identity
    ) -> None:
        kind = type(decision).__name__.lower()
        telemetry.approval_decisions.add(1, {"tether.decision": kind})
        telemetry.log.info(
            "approval_decided",
            request_id=new.request_id,
            session_id=new.actor_id,
            tool=new.tool,
            decision=kind,
            by=who.name,
            via=who.via,
            authenticated=who.authenticated,
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
        telemetry.escalations.add(1, {"tether.tool": record.tool})
        telemetry.guard_event(
            "approval_requested",
            "info",  # by design: a person decides
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
                    request = await self.decide(request_id, decision, identity=_policy(decision))
                except (ApprovalClosed, ApprovalChanged, ConfigError, ToolInputError) as exc:
                    telemetry.log.error(
                        "approval_handler_decision_refused", request_id=request_id, error=str(exc)
                    )
                    continue
                if request.status != "pending":
                    return
        finally:
            self._offered.discard(request_id)


def _policy(decision: object) -> Identity | None:
    """The identity of a handler's decision: its ``by``, through a policy (None when that is
    not a name: ``decide`` then refuses the decision by name)."""
    by = getattr(decision, "by", None)
    if isinstance(by, str) and by.strip():
        return Identity(name=by, via="policy")
    return None


def _outcome(record: ApprovalRecord) -> str:
    """What a decision left, for the audit log."""
    if record.status == "pending":
        return f"pending: {approvals_counted(record)} of {record.quorum} approval(s)"
    last = record.decisions[-1] if record.decisions else None
    if record.status == "rejected" and last is not None and last.reason:
        return f"rejected: {last.reason}"
    return record.status


def _import_tool(record: ApprovalRecord) -> Tool | None:
    from tether.actors.tool import Tool

    if not record.tool_path:
        return None
    try:
        found = import_object(record.tool_path, "tool")
    except ConfigError as exc:
        # the reason, and how to make the tool importable here, beat "cannot be imported"
        raise ConfigError(f"cannot validate modified arguments: {exc}") from exc
    return found if isinstance(found, Tool) else None
