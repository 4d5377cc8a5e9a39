"""The notices an approval policy's webhooks receive, built where the change is made.

A notice is a ``WebhookNotice`` message to the notifier of its URL
(``tether.actors.guards.notifier``), stored in the same transaction as its change: the park
that holds a call for a person (``approval.requested``) or the decision, or deadline, that
closes the request (``approval.decided``). Its id — message id, dedup key and delivery id at
once — is a hash of the request, the event and the URL: a step parked again, or a decision
retried after a lost race, stores no second notice.

The body is JSON, fixed when the notice is stored::

    {"id": "ntf-…", "type": "approval.requested", "created": 1717171717.5,
     "request": {request_id, session_id, tool, args, requested_args, reason, context,
                 deadline, on_timeout, approvers_needed, approved_by, status, decisions,
                 created_at, version, fingerprint}}
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import msgspec

from tether.actors.actor import actor_spec
from tether.actors.guards.notifier import Notifier, WebhookNotice, notifier_id
from tether.store.records import ApprovalRecord, NewMessage

if TYPE_CHECKING:
    from tether.runtime.guards import Guards
    from tether.runtime.kernel import Kernel

REQUESTED = "approval.requested"
DECIDED = "approval.decided"


def notice_id(request_id: str, event: str, url: str) -> str:
    digest = hashlib.sha256(f"{request_id}\x1f{event}\x1f{url}".encode()).hexdigest()
    return f"ntf-{digest[:24]}"


def _default(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return obj.hex()
    return repr(obj)


def body(nid: str, event: str, now: float, request: dict[str, Any]) -> str:
    return msgspec.json.encode(
        {"id": nid, "type": event, "created": now, "request": request}, enc_hook=_default
    ).decode()


def notices(
    rt: Kernel, record: ApprovalRecord, event: str, request: dict[str, Any], now: float
) -> list[NewMessage]:
    """The notices of ``event`` on ``record`` (``request``: its view as builtins), one per
    webhook URL of its policy; none if it has none."""
    spec = actor_spec(Notifier)
    out: list[NewMessage] = []
    for url in record.notify:
        nid = notice_id(record.request_id, event, url)
        notice = WebhookNotice(
            notice_id=nid,
            url=url,
            session_id=record.actor_id,
            event=event,
            body=body(nid, event, now, request),
        )
        new = rt.prepare_message(notifier_id(url), spec, notice, nid)
        out.append(msgspec.structs.replace(new, msg_id=nid))  # its ledger rows are found by it
    return out


async def ensure_notifiers(guards: Guards, urls: list[str]) -> None:
    """Create the notifiers of ``urls`` that do not exist yet (before a notice is stored for
    one: a message to an actor that does not exist would never be delivered)."""
    for url in urls:
        await guards.notifier(url)


def wake(rt: Kernel, stored: list[NewMessage]) -> None:
    """After ``stored`` committed: the notifiers active here run them now (elsewhere, their
    owners' scans find them)."""
    for n in stored:
        if n.actor_id in rt.cells:
            rt.wake_actor(n.actor_id)
