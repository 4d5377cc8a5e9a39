"""``rt.dead_letters``: list, retry and discard messages that could not be processed (I7).

Every retry and discard, allowed or refused, is audited (``tether.runtime.audit``): an
allowed one in the transaction that moves or deletes the dead letter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from tether import telemetry
from tether.errors import (
    ActorStopped,
    ConfigError,
    CorruptRecordError,
    DeadLetterNotFound,
    NotPermitted,
)
from tether.runtime.audit import Identity, check_identity, entry, refused
from tether.store.records import DeadLetter

if TYPE_CHECKING:
    from tether.runtime.kernel import Kernel


def check_filter(actor_id: object) -> None:
    """A listing's ``actor_id`` filter: a string or None. Any other value (``5``, a ref)
    matched nothing and answered an empty list, as if there were nothing to see."""
    if actor_id is not None and not isinstance(actor_id, str):
        raise ConfigError(f"actor_id must be an actor id (a string) or None, not {actor_id!r}")


def _report_corrupt(msg_id: str, exc: CorruptRecordError) -> None:
    telemetry.report_corrupt("dead_letter_corrupt", msg_id, exc, msg_id=msg_id)


class DeadLetters:
    """The dead-letter store of one Runtime. Nothing is dropped without a record here."""

    def __init__(self, runtime: Kernel) -> None:
        self._rt = runtime

    async def list(
        self,
        actor_id: str | None = None,
        *,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[DeadLetter]:
        """Dead letters, oldest first, each with its payload, attempts and error history.

        A row damaged in the store is left out and reported as ``on_corrupt(msg_id, error)``
        (without it, logged once as ``dead_letter_corrupt``): the others are still listed."""
        check_filter(actor_id)
        return await self._rt.store.dead_letters(actor_id, on_corrupt=on_corrupt or _report_corrupt)

    async def retry(self, msg_id: str, *, identity: Identity | None = None) -> None:
        """Put the message back at the end of its actor's mailbox with a fresh attempt count.

        ``identity``: who does it, as authenticated (default: the application's own code)."""
        who = _who(identity)
        row = entry(who, "dead_letter.retry", str(msg_id), self._rt.clock())
        try:
            letter = await self._rt.store.dead_letter(msg_id)
            if letter is None:
                raise DeadLetterNotFound(msg_id)
            row = msgspec.structs.replace(row, actor_id=letter.actor_id)
            if who.forbidden is not None:
                raise NotPermitted(who.name, who.forbidden)
            rec = await self._rt.store.get_actor(letter.actor_id)
            if rec is not None and rec.status == "stopped":
                raise ActorStopped(letter.actor_id, rec.stop_reason)
            if rec is not None and letter.created_at < rec.created_at:
                # Dead-lettered before the actor now under this id was created: it was meant
                # for a predecessor (its id was given to a new actor by add_child), whose
                # ledger is gone.
                raise ActorStopped(
                    letter.actor_id,
                    "the actor it was sent to was replaced by a new actor under the same id; "
                    "the dead letter stays as a record, and its payload can be sent to the new one",
                )
            audit = msgspec.structs.replace(row, detail=f"back in the mailbox of {letter.actor_id}")
            if (
                await self._rt.store.retry_dead_letter(msg_id, self._rt.clock(), audit=audit)
                is None
            ):
                raise DeadLetterNotFound(msg_id)
        except (DeadLetterNotFound, ActorStopped, NotPermitted) as exc:
            await refused(self._rt, row, exc)
            raise
        telemetry.log.info("dead_letter_retried", msg_id=msg_id, actor_id=letter.actor_id)
        self._rt.wake_actor(letter.actor_id)

    async def discard(self, msg_id: str, *, identity: Identity | None = None) -> None:
        """Delete a dead letter for good."""
        who = _who(identity)
        row = entry(who, "dead_letter.discard", str(msg_id), self._rt.clock())
        try:
            letter = await self._rt.store.dead_letter(msg_id)
            if letter is None:
                raise DeadLetterNotFound(msg_id)
            row = msgspec.structs.replace(row, actor_id=letter.actor_id, detail="discarded")
            if who.forbidden is not None:
                raise NotPermitted(who.name, who.forbidden)
            if not await self._rt.store.discard_dead_letter(msg_id, audit=row):
                raise DeadLetterNotFound(msg_id)
        except (DeadLetterNotFound, NotPermitted) as exc:
            await refused(self._rt, row, exc)
            raise
        telemetry.log.info("dead_letter_discarded", msg_id=msg_id)


def _who(identity: Identity | None) -> Identity:
    return Identity(name="app") if identity is None else check_identity(identity)
