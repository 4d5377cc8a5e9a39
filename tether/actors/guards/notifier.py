"""The notifier: posts an approval policy's webhook notices through the effects ledger.

One ``Notifier`` per webhook URL (id ``notify:<hash of the URL>``), a child of the
``tether.guards`` supervisor. A notice is a ``WebhookNotice`` message, stored in the same
transaction as the change it announces — the park that creates an approval request, the
decision that closes it (``tether.runtime.notices``) — so a crash never loses one.

The notifier's step POSTs the notice as an effect of a ``recovery="retry"`` tool: the intent
is committed before the POST, and a crash before the receipt posts again on recovery, with
the same ``Tether-Delivery`` id (the notice's id, derived by the runtime from the request,
the event and the URL), which the receiver deduplicates on. A round of attempts that all
fail (the webhook's ``RetryPolicy``) fails the step: its message is delivered again later (a
new round, the same delivery id), and after the runtime's ``max_attempts`` it is
dead-lettered, where a person can retry it. Nothing is sent under a new id, and nothing is
dropped without a record.

The secret is never stored: the notice holds the URL, and the runtime delivering it finds
the ``Webhook`` in the approval policy of the request's session (or its own).
"""

from __future__ import annotations

import hashlib

import msgspec

from tether.actors.actor import Actor
from tether.actors.guards.webhook import Webhook, post
from tether.actors.messages import Event, Message
from tether.actors.tool import Tool
from tether.errors import ToolFailed

NOTIFY_PREFIX = "notify:"
TOOL_NAME = "tether.webhook"


def notifier_id(url: str) -> str:
    """The id of the notifier that posts to ``url``: one per receiver, so a receiver that is
    down delays only its own notices, each in order."""
    return f"{NOTIFY_PREFIX}{hashlib.sha256(url.encode()).hexdigest()[:16]}"


class WebhookNotice(Message):
    """A notice to post. Its message id is ``notice_id``, which is also its dedup key and its
    delivery id: stored once, however often the change that makes it is retried."""

    notice_id: str
    url: str
    session_id: str  # whose approval policy holds the webhook's secret
    event: str  # "approval.requested" | "approval.decided"
    body: str  # the JSON to post, fixed when the notice was stored


class NotifierState(msgspec.Struct, frozen=True):
    delivered: int = 0


class NoticeDelivered(Event):
    notice_id: str
    status: int


class Notifier(Actor[NotifierState]):
    """Posts the notices for one webhook URL, one at a time, each through the ledger."""

    initial_state = NotifierState()

    def __init__(self, url: str) -> None:
        self.url = url
        self._tools: dict[Webhook, Tool[..., int]] = {}

    def apply(self, state: NotifierState, event: NoticeDelivered) -> NotifierState:
        return NotifierState(delivered=state.delivered + 1)

    async def handle(self, msg: WebhookNotice) -> int:
        runtime = self._tether_cell.runtime
        webhook: Webhook = await runtime.approvals.webhook(msg.session_id, msg.url)
        deliver = self._tool(webhook)
        # Each earlier round of this notice that failed is in the ledger (a failure is
        # replayed, never called again): replay them, then make one new round after them.
        rows = await runtime.store.effects_of(self.id, msg.notice_id)
        rounds = sum(1 for r in rows if r.status == "failed")
        n = 0
        while True:
            try:
                status: int = await self.effect(
                    deliver,
                    url=msg.url,
                    body=msg.body,
                    delivery_id=msg.notice_id,
                    event=msg.event,
                    round_no=n,
                )
            except ToolFailed:
                if n >= rounds:
                    raise  # this round failed: the message is delivered again, later
                n += 1
                continue
            self.persist(NoticeDelivered(notice_id=msg.notice_id, status=status))
            return status

    def _tool(self, webhook: Webhook) -> Tool[..., int]:
        """The delivery tool of ``webhook``: its secret in a closure, never in the ledger."""
        tool = self._tools.get(webhook)
        if tool is None:

            async def deliver(
                url: str, body: str, delivery_id: str, event: str, round_no: int
            ) -> int:
                return await post(webhook, body, delivery_id, event, TOOL_NAME)

            tool = Tool(
                deliver,
                name=TOOL_NAME,
                recovery="retry",  # the receiver deduplicates on the delivery id
                timeout=webhook.timeout + 5.0,
                retry=webhook.retry,
                breaker=None,  # a failed round is retried by redelivery; no breaker in between
                loop_guard=False,
                defer_receipt=False,
            )
            self._tools[webhook] = tool
        return tool

    def summary(self) -> str:
        """One line for ``rt.tree()``."""
        return f"posts to {self.url}; {self.state.delivered} notice(s) delivered"
