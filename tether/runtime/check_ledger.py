"""``tether check``, across actors: the effects ledger (I4, I5), approvals (I9), the mailbox
and the dead letters.

* Every ledger row is its own call's: its key is the key of (actor, message, index, tool,
  input) (I5), and no two rows carry one key (a key executed twice). A receipt holds its
  outcome: ``done`` a result, ``failed`` an error.
* No intent is left that nothing will settle: a ``pending`` row (the call may have happened,
  no receipt) is fine while its message is still in the mailbox (its actor settles it when
  it next runs it: a live owner now, or whoever activates it) or in the dead letters (a
  person retries or discards it); otherwise it is a violation. A ``quarantined`` row is the
  quarantine entry itself. A ``retry`` row records a call known not to have been carried
  out (the breaker refused its next attempt, or a person ordered it again) that its step
  makes when it runs again: fine under the same conditions as a ``pending`` one, a violation
  otherwise (a step that goes on without the call settles it as failed when it commits).
* Every call of a tool declared ``requires_approval=True``, and every call whose place has an
  approval request (an escalation), ran under an approved request at its place, for the same
  call (fingerprint) and with the arguments approved. Whether a tool requires approval is read
  from the tool itself, found through the actor's class (its ``tools``, or its module's
  names) or an approval request's import path; a tool found nowhere is listed as unchecked.
* A message is not both in the mailbox and in the dead letters; mail waits only for actors
  the store holds; a message parked for good has a quarantined effect or a pending approval
  that will wake it.
"""

from __future__ import annotations

import contextlib
import sys
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import msgspec

from tether.actors.actor import import_class, import_object
from tether.actors.tool import Tool
from tether.errors import CorruptRecordError
from tether.runtime.approvals import fingerprint, request_id_for
from tether.runtime.check_report import CheckReport
from tether.runtime.effects import effect_key
from tether.store.protocol import Store
from tether.store.records import PARKED, ActorRecord, ApprovalRecord, EffectRecord, MessageCursor

_SCAN_PAGE = 10_000


def check_effects(
    effects: list[EffectRecord],
    approvals: list[ApprovalRecord],
    actors: dict[str, ActorRecord],
    waiting: set[str],
    dead: set[str],
    report: CheckReport,
) -> None:
    """The ledger's rows, and the approvals their calls ran under. ``waiting``: ids of the
    messages in the mailbox; ``dead``: of the dead letters."""
    by_key: dict[str, list[EffectRecord]] = defaultdict(list)
    requests = {a.request_id: a for a in approvals}
    rules = _ApprovalRules(actors, approvals, report)
    for e in effects:
        by_key[e.key].append(e)
        ids: dict[str, str | None] = {"actor_id": e.actor_id, "key": e.key, "msg_id": e.msg_id}
        if e.key != effect_key(e.actor_id, e.msg_id, e.idx, e.tool, e.input_hash):
            report.add(
                "effect_key_mismatch",
                f"effect {e.key} of {e.actor_id!r} (message {e.msg_id}, #{e.idx}, tool "
                f"{e.tool}) does not carry its own call's key",
                **ids,
            )
        if (e.status == "done" and e.result is None) or (e.status == "failed" and not e.error):
            report.add(
                "receipt_incomplete",
                f"effect {e.key} of {e.actor_id!r} is {e.status} without its "
                f"{'result' if e.status == 'done' else 'error'}",
                **ids,
            )
        if e.status == "pending" and e.msg_id not in waiting and e.msg_id not in dead:
            report.add(
                "intent_without_receipt",
                f"effect {e.key} of {e.actor_id!r} ({e.tool}) is pending: the call may have "
                f"happened, and its message {e.msg_id} is in neither the mailbox nor the dead "
                "letters, so nothing will settle it",
                **ids,
            )
        if e.status == "retry" and e.msg_id not in waiting and e.msg_id not in dead:
            report.add(
                "retry_left_behind",
                f"effect {e.key} of {e.actor_id!r} ({e.tool}) is retry: it is to be called "
                f"again when its step runs again, and its message {e.msg_id} is in neither the "
                "mailbox nor the dead letters, so nothing will make or settle it",
                **ids,
            )
        _check_approval(e, requests, rules, report)
    for key, rows in by_key.items():
        if len(rows) > 1:
            places = ", ".join(f"{r.actor_id!r} {r.msg_id} #{r.idx}" for r in rows)
            report.add(
                "key_executed_twice",
                f"idempotency key {key} is held by {len(rows)} ledger rows: {places}",
                actor_id=rows[0].actor_id,
                key=key,
            )


def _check_approval(
    e: EffectRecord,
    requests: dict[str, ApprovalRecord],
    rules: _ApprovalRules,
    report: CheckReport,
) -> None:
    rid = request_id_for(e.actor_id, e.msg_id, e.idx)
    request = requests.get(rid)
    ids: dict[str, str | None] = {"actor_id": e.actor_id, "key": e.key, "request_id": rid}
    if request is None:
        if rules.requires_approval(e):
            report.add(
                "unapproved_call",
                f"effect {e.key} of {e.actor_id!r} calls {e.tool}, which requires approval, "
                f"and no approval request {rid} exists for it",
                **ids,
            )
        return
    if e.status == "aborted":  # a person said not to call: nothing ran
        return
    if request.status != "approved":
        report.add(
            "unapproved_call",
            f"effect {e.key} of {e.actor_id!r} ({e.tool}) is {e.status}, but its approval "
            f"request {rid} is {request.status}",
            **ids,
        )
    elif request.fingerprint != fingerprint(e.tool, e.input_hash):
        report.add(
            "approval_mismatch",
            f"effect {e.key} of {e.actor_id!r} ({e.tool}) is not the call approval request "
            f"{rid} was asked for (fingerprint {request.fingerprint})",
            **ids,
        )
    elif request.approved_args is None:
        report.add(
            "approval_incomplete",
            f"approval request {rid} is approved without the arguments it approved",
            **ids,
        )
    elif not _same_args(request.approved_args, e.args):
        report.add(
            "approval_mismatch",
            f"effect {e.key} of {e.actor_id!r} ({e.tool}) ran with arguments other than "
            f"those approved by request {rid}",
            **ids,
        )


def _same_args(a: bytes, b: bytes) -> bool:
    try:
        return bool(msgspec.msgpack.decode(a) == msgspec.msgpack.decode(b))
    except msgspec.DecodeError:
        return a == b


class _ApprovalRules:
    """Whether a ledger row's tool requires approval, read from the tool itself."""

    def __init__(
        self, actors: dict[str, ActorRecord], approvals: list[ApprovalRecord], report: CheckReport
    ) -> None:
        self.actors = actors
        self.report = report
        self.paths = {a.tool: a.tool_path for a in approvals if a.tool_path}
        self.known: dict[tuple[str, str], bool | None] = {}

    def requires_approval(self, e: EffectRecord) -> bool:
        rec = self.actors.get(e.actor_id)
        class_path = rec.class_path if rec is not None else ""
        found = self.known.get((class_path, e.tool), ...)
        if found is ...:
            found = self.known[class_path, e.tool] = self._find(class_path, e.tool)
            if found is None:
                self.report.unchecked.append(
                    f"calls of tool {e.tool!r} by {e.actor_id!r}: the tool is not found here "
                    "(not in its class's tools nor its module), so whether it requires "
                    "approval is not known"
                )
        return bool(found)

    def _find(self, class_path: str, name: str) -> bool | None:
        candidates: list[Any] = []
        path = self.paths.get(name)
        if path:
            with contextlib.suppress(Exception):  # not importable here: look elsewhere
                candidates.append(import_object(path, "tool"))
        try:
            cls = import_class(class_path) if class_path else None
        except Exception:  # noqa: BLE001 - the class does not import here
            cls = None
        if cls is not None:
            # A session's own tools, and its model (a tool of its class's making).
            candidates.extend(getattr(cls, "tools", ()) or ())
            candidates.append(getattr(cls, "_model_tool", None))
            module = sys.modules.get(cls.__module__)
            candidates.extend(vars(module).values() if module is not None else ())
        for tool in _tools(candidates):
            if tool.name == name:
                return bool(tool.requires_approval)
        return None


def _tools(objects: Iterable[Any]) -> Iterable[Tool[Any, Any]]:
    return (o for o in objects if isinstance(o, Tool))


async def _actors_with_mail(store: Store) -> set[str]:
    """Every actor id the mailbox holds a message for, known to the registry or not: the
    message scan from the store's beginning, with every message due (parked ones too)."""
    found: set[str] = set()
    cursor: MessageCursor | None = None
    while True:
        page = await store.scan_messages(cursor, PARKED, _SCAN_PAGE)
        found.update(m.actor_id for m in page.messages)
        cursor = page.cursor
        if not page.more:
            return found


async def check_mail(
    store: Store,
    actors: dict[str, ActorRecord],
    effects: list[EffectRecord],
    approvals: list[ApprovalRecord],
    dead: set[str],
    report: CheckReport,
    *,
    limit: int,
) -> set[str]:
    """Each actor's mailbox against the dead letters, the registry, and what will wake a parked
    message; the ids of the messages in the mailbox."""
    waiting: set[str] = set()
    quarantined = {e.msg_id for e in effects if e.status == "quarantined"}
    asked = {a.msg_id for a in approvals if a.status == "pending"}
    try:
        with_mail = await _actors_with_mail(store)
    except CorruptRecordError as exc:
        report.add("storage_damaged", f"the mailbox cannot be scanned: {exc}")
        with_mail = set()
    for actor_id in sorted(with_mail):
        try:
            messages = await store.list_messages(actor_id, limit, on_corrupt=report.on_corrupt)
        except CorruptRecordError as exc:
            report.add("unreadable_row", f"mailbox of {actor_id!r}: {exc}", actor_id=actor_id)
            continue
        for m in messages:
            waiting.add(m.msg_id)
            ids: dict[str, str | None] = {"actor_id": actor_id, "msg_id": m.msg_id}
            if m.msg_id in dead:
                report.add(
                    "message_also_dead_lettered",
                    f"message {m.msg_id} of {actor_id!r} is in the mailbox and in the dead letters",
                    **ids,
                )
            if actor_id not in actors:
                report.add(
                    "mail_for_unknown_actor",
                    f"message {m.msg_id} waits for {actor_id!r}, which the store does not hold",
                    **ids,
                )
            if m.deliver_at >= PARKED and m.msg_id not in quarantined | asked:
                report.add(
                    "parked_without_reason",
                    f"message {m.msg_id} of {actor_id!r} is parked for good, and no "
                    "quarantined effect or pending approval of it will wake it",
                    **ids,
                )
    return waiting
