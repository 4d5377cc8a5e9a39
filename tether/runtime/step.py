"""What one handler invocation stages before it commits, and how a cell's run ends.

A ``Step`` gathers what a handler produced — events, outbox, a late reply, its effects' ledger
rows, why it must wait for a person — until the cell commits it as one ``StepCommit`` (I2) or
parks it. ``current_step`` is the step running in this task: a ``tell`` inside a handler joins
its outbox instead of being sent at once.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from tether.runtime.kernel import ActiveCell
from tether.store.records import PARKED, ApprovalRecord, EffectRecord, JournalRow, NewMessage

current_step: ContextVar[Step | None] = ContextVar("tether_current_step", default=None)


class Step:
    """What one handler invocation has produced so far."""

    __slots__ = (
        "cell",
        "closed",
        "escalate",
        "escalations",
        "events",
        "last_key",
        "late_replies",
        "ledger",
        "modified_args",
        "next_effect",
        "outbox",
        "park_approval",
        "park_effect",
        "park_notices",
        "park_until",
        "refused_retries",
        "reply_deferred",
        "stop_reason",
        "suspended",
    )

    def __init__(self, cell: ActiveCell) -> None:
        # The collections start as shared empty tuples and become lists on their first add:
        # most steps add to one of them or none, and every object a step allocates lives
        # until its commit, long enough for the cycle collector to walk it, often twice.
        self.cell = cell
        self.events: list[JournalRow] | tuple[()] = ()
        self.outbox: list[NewMessage] | tuple[()] = ()
        self.stop_reason: str | None = None
        self.escalate: str | None = None
        self.closed = False
        self.reply_deferred = False  # this message's ask is answered by a later step
        # (msg id of an earlier ask, answer)
        self.late_replies: list[tuple[str, Any]] | tuple[()] = ()
        self.next_effect = 0  # the index of the step's next effect (I5)
        self.last_key: str | None = None  # the latest effect's idempotency key
        # The arguments the latest effect ran with (msgpack), when a person modified them on
        # approval; None when it ran as its handler asked (``Actor.last_effect_modified_args``).
        self.modified_args: bytes | None = None
        # effect index -> why it must wait for a person (set by guards, e.g. a loop)
        self.escalations: dict[int, str] | None = None
        self.ledger: dict[int, EffectRecord] | None = None  # this message's ledger rows
        # Set when the step must wait for a person: it is parked instead of committed.
        self.suspended: str | None = None
        self.park_effect: EffectRecord | None = None
        self.park_approval: ApprovalRecord | None = None
        self.park_notices: list[NewMessage] | tuple[()] = ()  # a new request's notices
        self.park_until = PARKED
        # Ledger rows of retries the breaker refused, as the step's commit settles them:
        # failed, never made (``effects._Effect.refused_retry``). Until then they say "retry".
        self.refused_retries: list[EffectRecord] | tuple[()] = ()

    def add_event(self, row: JournalRow) -> None:
        if isinstance(self.events, list):
            self.events.append(row)
        else:
            self.events = [row]

    def add_outbox(self, new: NewMessage) -> None:
        if isinstance(self.outbox, list):
            self.outbox.append(new)
        else:
            self.outbox = [new]

    def add_late_reply(self, msg_id: str, value: Any) -> None:
        if isinstance(self.late_replies, list):
            self.late_replies.append((msg_id, value))
        else:
            self.late_replies = [(msg_id, value)]

    def add_refused_retry(self, settled: EffectRecord) -> None:
        if isinstance(self.refused_retries, list):
            self.refused_retries.append(settled)
        else:
            self.refused_retries = [settled]

    def suspend(
        self,
        reason: str,
        effect: EffectRecord | None = None,
        *,
        until: float = PARKED,
        approval: ApprovalRecord | None = None,
        notices: list[NewMessage] | tuple[()] = (),
    ) -> None:
        """Make this step wait: whatever the handler does next, it is parked, not committed."""
        if self.suspended is None:
            self.suspended = reason
            self.park_effect = effect
            self.park_approval = approval
            self.park_notices = notices
            self.park_until = until


class Exit(Exception):
    """Supervision decided this instance leaves memory (to be restarted by its supervisor)."""


class SupervisorFailed(Exception):
    """A supervisor gave up (intensity exceeded or an escalated failure): its parent decides."""


class Deactivate(Exception):
    """The cell lost its lease or its actor was stopped elsewhere: leave without committing."""
