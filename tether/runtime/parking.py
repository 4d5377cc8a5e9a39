"""Parking: a step that must wait is set aside, and its actor goes on with the next message.

A step waits when it cannot go on before something outside it happens: a person must decide a
held call (the approval gate, I9) or a quarantined effect, or an open breaker admits no call
before ``retry_at``. Its handler is unwound (``StepSuspended``), its state rolled back, and its
message *parked*: it stays in the mailbox, due again at the wait's end (or never, until it is
resolved), with the attempt it used given back. A new approval request, the quarantined
effect and the notices of the request are stored in the same write. When the wait is over
the message is delivered again and the step replays from the start, its earlier effects
answered from the ledger.
"""

from __future__ import annotations

from tether import telemetry
from tether.errors import ConfigError
from tether.runtime import notices
from tether.runtime.live_actor import LiveActor
from tether.runtime.step import Step
from tether.store.records import PARKED, Park, StoredMessage


async def park(cell: LiveActor, m: StoredMessage, step: Step) -> None:
    """Set ``m`` aside until ``step``'s wait is resolved; the actor goes on with the next."""
    if m.local is not None:
        raise ConfigError(f"{cell.actor_id}: a system message cannot wait for a person")
    await cell.commit(
        Park(
            cell.actor_id,
            cell.fence,
            m.msg_id,
            step.park_until,
            step.park_effect,
            step.park_approval,
            step.park_notices,
        )
    )
    cell.buffer.popleft()
    cell.known.discard(m.msg_id)
    cell.claimed.discard(m.msg_id)
    rt = cell.runtime
    if step.park_until <= rt.clock():
        # The wait was over before the park was stored (a breaker's open period ran out during
        # the commit): the due scans may have passed its end before the row was there, and a
        # scan that saw the stored row saw it while this cell still held the message. Either
        # way no scan will find it again, so the cell looks at its mailbox itself.
        cell.rescan_requested = True
        cell.wake.set()
    elif step.park_until < PARKED:
        rt.wake_at(step.park_until)
    if step.park_approval is not None:
        rt.approvals.requested(step.park_approval)
        notices.wake(rt, list(step.park_notices))
    telemetry.log.info("step_parked", actor_id=cell.actor_id, msg_id=m.msg_id, why=step.suspended)
