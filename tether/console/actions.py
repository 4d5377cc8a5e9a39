"""The changes a person makes from the console — decisions, resolutions, retries — made
through the runtime's desks (``rt.approvals``, ``rt.quarantine``, ``rt.dead_letters``), which
enforce and audit them, and the HTTP status each refusal maps to (the API's and the pages').
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

import tether
from tether.console.auth import Principal
from tether.console.views import tool_of
from tether.runtime.approvals import fingerprint


class Refusal(Exception):
    """A change refused: its HTTP status, a short code, and what to tell the person."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__(message)


#: Errors of the desks, by the status they answer with (the first match wins).
_STATUSES: tuple[tuple[type[BaseException], int, str], ...] = (
    (tether.NotPermitted, 403, "forbidden"),
    (tether.ApprovalNotFound, 404, "not_found"),
    (tether.EffectNotFound, 404, "not_found"),
    (tether.DeadLetterNotFound, 404, "not_found"),
    (tether.ActorNotFound, 404, "not_found"),
    (tether.ApprovalChanged, 409, "changed"),
    (tether.AlreadyApproved, 409, "already_approved"),
    (tether.ActorStopped, 409, "actor_stopped"),
    (tether.ApprovalClosed, 410, "closed"),
    (tether.ToolInputError, 422, "invalid_arguments"),
    (tether.ConfigError, 422, "invalid"),
)


def refusal(exc: BaseException) -> Refusal | None:
    """The refusal ``exc`` stands for, or None (a failure that is not the person's)."""
    for kind, status, code in _STATUSES:
        if isinstance(exc, kind):
            return Refusal(status, code, str(exc))
    return None


READ_ONLY = Refusal(403, "read_only", "this console is read-only: it changes nothing")


@contextmanager
def refusals() -> Iterator[None]:
    """Raise the desks' refusals as ``Refusal``; anything else passes unchanged."""
    try:
        yield
    except tether.TetherError as exc:
        found = refusal(exc)
        if found is None:
            raise
        raise found from exc


async def decide(
    rt: tether.Runtime,
    who: Principal,
    via: str,
    request_id: str,
    kind: str,
    *,
    comment: str | None = None,
    reason: str | None = None,
    args: Any = None,
    version: int | None = None,
    read_only: bool,
) -> tether.ApprovalRequest:
    """Approve, reject or modify as ``who`` (through ``via``: console or api), or raise the
    ``Refusal``. The identity is the authenticated one; nothing in the request names it."""
    if read_only:
        raise READ_ONLY  # nothing is written, not even an audit row: the console is read-only
    identity = who.identity(via, read_only=False)
    decision: tether.Approve | tether.Reject | tether.Modify
    # A rejection without a reason, or arguments that are not the tool's, are decisions the
    # desk refuses: it audits them (as refused, with why) before it raises.
    if kind == "approve":
        decision = tether.Approve(by=identity.name, comment=comment or None)
    elif kind == "reject":
        text = reason.strip() if isinstance(reason, str) else reason
        decision = tether.Reject(by=identity.name, reason=text)  # type: ignore[arg-type]
    elif kind == "modify":
        decision = tether.Modify(by=identity.name, args=args, comment=comment or None)
    else:
        raise Refusal(404, "not_found", f"no decision {kind!r}: approve, reject or modify")
    try:
        with refusals():
            return await rt.approvals.decide(
                request_id, decision, identity=identity, expected_version=version
            )
    except Refusal as refused:
        raise _said_plainly(refused, kind, reason, args) from refused


def _said_plainly(refused: Refusal, kind: str, reason: Any, args: Any) -> Refusal:
    """The desk's refusal of a malformed decision, in the words of the form or body the
    person sent (the audit log keeps the desk's)."""
    if refused.status != 422:
        return refused
    if kind == "reject" and not (isinstance(reason, str) and reason.strip()):
        return Refusal(422, "reason_required", "a rejection needs a reason: the agent is told it")
    if kind == "modify" and not isinstance(args, dict):
        return Refusal(
            422,
            "invalid_arguments",
            "the new arguments must be a JSON object of the tool's arguments",
        )
    return refused


async def check_modification(rt: tether.Runtime, request_id: str, args: Any) -> dict[str, Any]:
    """Validate new arguments against the tool's schema without deciding anything: the
    arguments as the tool takes them and the fingerprint of the call they make, or the
    ``Refusal`` naming the problem."""
    records = await rt.store.find_approvals(request_id=request_id)
    if not records:
        raise Refusal(404, "not_found", f"no approval request {request_id!r}")
    record = records[0]
    tool = tool_of(record)
    if tool is None:
        raise Refusal(
            422,
            "tool_not_importable",
            f"tool {record.tool!r} ({record.tool_path or 'no import path'}) cannot be imported "
            "by this console: start it with --app-dir pointing at the application",
        )
    if not isinstance(args, dict):
        raise Refusal(422, "invalid_arguments", "the arguments must be a JSON object")
    try:
        call = tool.prepare(dict(args))
    except tether.ToolInputError as exc:
        raise Refusal(422, "invalid_arguments", str(exc)) from exc
    return {
        "args": msgspec.msgpack.decode(call.args_blob),
        "fingerprint": fingerprint(record.tool, call.input_hash),
        "was": record.approved_fingerprint or record.fingerprint,
    }


async def resolve(
    rt: tether.Runtime,
    who: Principal,
    key: str,
    how: str,
    *,
    result: Any = None,
    reason: str | None = None,
    read_only: bool,
) -> None:
    """Resolve a quarantined effect (done / retry / abort) as ``who``."""
    if read_only:
        raise READ_ONLY
    identity = who.identity("console", read_only=False)
    with refusals():
        if how == "done":
            await rt.quarantine.mark_done(key, result, identity=identity)
        elif how == "retry":
            await rt.quarantine.retry(key, identity=identity)
        elif how == "abort":
            await rt.quarantine.abort(key, reason or "", identity=identity)
        else:
            raise Refusal(422, "invalid", f"resolve with done, retry or abort, not {how!r}")


async def dead_letter(
    rt: tether.Runtime, who: Principal, msg_id: str, how: str, *, read_only: bool
) -> None:
    """Retry or discard a dead letter as ``who``."""
    if read_only:
        raise READ_ONLY
    identity = who.identity("console", read_only=False)
    with refusals():
        if how == "retry":
            await rt.dead_letters.retry(msg_id, identity=identity)
        elif how == "discard":
            await rt.dead_letters.discard(msg_id, identity=identity)
        else:
            raise Refusal(422, "invalid", f"retry or discard, not {how!r}")
