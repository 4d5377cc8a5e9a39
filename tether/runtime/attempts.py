"""Attempts and dead letters (I7): a poison message is contained.

Every delivery attempt of a stored message is counted in the store *before* its handler runs:
a message that kills the whole process each time is still counted, and ends in the dead
letters after ``max_attempts``. To spare a commit of its own, the count rides along when it
can: in the insert of a message sent to an idle local actor (``Mail``), or as ``claim_next``
in the previous step's commit (``cell.py``); otherwise ``claim`` commits it.

A failed attempt is recorded with its error, in the same write that counts the next one; at
``max_attempts`` the message moves to the dead letters with its error history (and the actor
is told, if it accepts ``tether.DeadLettered``), and its ask fails with that history. The
actor goes on with its next message.
"""

from __future__ import annotations

import traceback

import msgspec

from tether import telemetry
from tether.actors.messages import DeadLettered
from tether.errors import JournalWriteError, MessageRejected
from tether.runtime.live_actor import LiveActor
from tether.store.records import AttemptFailed, Claim, NewMessage, StoredMessage


async def claim(cell: LiveActor, m: StoredMessage) -> bool:
    """Count the attempt about to begin (I7); False if ``m`` went to the dead letters instead:
    every counted attempt began and none finished (the process died each time)."""
    if m.attempts >= cell.runtime.max_attempts:
        why = f"delivered {m.attempts} times without finishing"
        await dead_letter(cell, m, unfinished(cell, m, m.attempts), why)
        return False
    await cell.commit(Claim(cell.actor_id, cell.fence, m.msg_id))
    m.attempts += 1
    cell.claimed.add(m.msg_id)
    if m.attempts > 1:
        telemetry.redeliveries.add(1)
    return True


async def undecodable(cell: LiveActor, m: StoredMessage, exc: msgspec.DecodeError) -> None:
    """``m``'s payload does not decode as a message of its actor: it goes to the dead letters
    at once (no attempt would decode it)."""
    errors = [
        *unfinished(cell, m, m.attempts - 1),
        f"attempt {m.attempts}: undecodable payload for {cell.actor_id!r}: {exc}",
    ]
    await dead_letter(cell, m, errors, "undecodable message")


async def failed(cell: LiveActor, m: StoredMessage, exc: Exception) -> None:
    """The handler raised: record the attempt's error, and count the next attempt in the same
    write (dead-lettering at ``max_attempts``). Its supervisor decides what the actor does."""
    telemetry.log.warning(
        "handler_failed",
        actor_id=cell.actor_id,
        msg_id=m.msg_id,
        attempt=m.attempts,
        error=repr(exc),
        traceback="".join(traceback.format_exception(exc)[-3:]),
    )
    if m.local is not None:
        cell.buffer.popleft()  # a system message is not redelivered; supervision decides
        cell.known.discard(m.msg_id)
        return
    errors = [
        *unfinished(cell, m, m.attempts - 1),
        f"attempt {m.attempts}: {type(exc).__name__}: {exc}",
    ]
    if m.attempts >= cell.runtime.max_attempts:
        await dead_letter(cell, m, errors, f"failed {m.attempts} times")
        return
    m.errors = errors
    # The same write counts the redelivery's attempt: one commit per failure, not two.
    await cell.commit(AttemptFailed(cell.actor_id, cell.fence, m.msg_id, errors, claim_again=True))
    m.attempts += 1


def commit_failed(cell: LiveActor, m: StoredMessage, exc: JournalWriteError) -> None:
    """The step of ``m``'s attempt could not be committed: said in its error history, should
    the message end in the dead letters."""
    cell.runtime.unfinished.setdefault(m.msg_id, {})[m.attempts] = (
        f"attempt {m.attempts}: its step could not be committed: {exc}"
    )


async def dead_letter(cell: LiveActor, m: StoredMessage, errors: list[str], why: str) -> None:
    """Move ``m`` to dead letters with its error history; the actor goes on (I7). An actor
    that accepts ``tether.DeadLettered`` is told, in the same transaction."""
    rt = cell.runtime
    reason = f"{why}; max_attempts={rt.max_attempts}"
    notice = _notice(cell, m, errors, reason)
    result = await cell.commit(
        AttemptFailed(
            cell.actor_id,
            cell.fence,
            m.msg_id,
            errors,
            dead_letter_reason=reason,
            now=rt.clock(),
            notice=notice,
        )
    )
    if notice is not None and notice.msg_id not in result.duplicates:
        rt.route(notice)
    if cell.buffer and cell.buffer[0] is m:
        cell.buffer.popleft()
    rt.unfinished.pop(m.msg_id, None)
    cell.known.discard(m.msg_id)
    cell.claimed.discard(m.msg_id)
    telemetry.dead_letters.add(1)
    telemetry.log.error(
        "message_dead_lettered",
        actor_id=cell.actor_id,
        msg_id=m.msg_id,
        reason=reason,
        errors=errors,
    )
    rt.reply_failed(m.msg_id, cell.actor_id, [*errors, reason])


def _notice(cell: LiveActor, m: StoredMessage, errors: list[str], reason: str) -> NewMessage | None:
    """The ``DeadLettered`` to store with ``m``'s move to the dead letters, if the actor
    accepts one (never for a notice itself: a failing notice does not beget another)."""
    spec = cell.spec
    if DeadLettered not in spec.message_types or m.type == DeadLettered.__name__:
        return None
    notice = DeadLettered(
        msg_id=m.msg_id, msg_type=m.type, payload=m.payload, reason=reason, errors=errors
    )
    prepare = cell.runtime.prepare_message
    key = f"dead-letter:{m.msg_id}"  # one notice per dead letter, whoever moves it
    try:
        return prepare(cell.actor_id, spec, notice, key)
    except MessageRejected:  # over max_message_bytes with the payload: told without it
        return prepare(cell.actor_id, spec, msgspec.structs.replace(notice, payload=b""), key)


def unfinished(cell: LiveActor, m: StoredMessage, upto: int) -> list[str]:
    """``m``'s error history, plus an entry for each counted attempt up to ``upto`` that never
    reported back: the process stopped while it ran, or its commit failed (``commit_failed``)."""
    errors = list(m.errors)
    known = cell.runtime.unfinished.get(m.msg_id) or {}
    errors.extend(
        known.get(n, f"attempt {n}: did not finish (the process stopped during delivery)")
        for n in range(len(errors) + 1, upto + 1)
    )
    return errors
