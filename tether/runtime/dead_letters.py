"""``rt.dead_letters``: list, retry and discard messages that could not be processed (I7)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tether.errors import ActorStopped, ConfigError, CorruptRecordError, DeadLetterNotFound
from tether.runtime import telemetry
from tether.runtime.store import DeadLetter

if TYPE_CHECKING:
    from tether.runtime.runtime import Runtime


def check_filter(actor_id: object) -> None:
    """A listing's ``actor_id`` filter: a string or None. Any other value (``5``, a ref)
    matched nothing and answered an empty list, as if there were nothing to see."""
    if actor_id is not None and not isinstance(actor_id, str):
        raise ConfigError(f"actor_id must be an actor id (a string) or None, not {actor_id!r}")


def _report_corrupt(msg_id: str, exc: CorruptRecordError) -> None:
    telemetry.report_corrupt("dead_letter_corrupt", msg_id, exc, msg_id=msg_id)


class DeadLetters:
    """The dead-letter store of one Runtime. Nothing is dropped without a record here."""

    def __init__(self, runtime: Runtime) -> None:
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

    async def retry(self, msg_id: str) -> None:
        """Put the message back at the end of its actor's mailbox with a fresh attempt count."""
        letter = await self._rt.store.dead_letter(msg_id)
        if letter is None:
            raise DeadLetterNotFound(msg_id)
        rec = await self._rt.store.get_actor(letter.actor_id)
        if rec is not None and rec.status == "stopped":
            raise ActorStopped(letter.actor_id, rec.stop_reason)
        if await self._rt.store.retry_dead_letter(msg_id, self._rt.clock()) is None:
            raise DeadLetterNotFound(msg_id)
        telemetry.log.info("dead_letter_retried", msg_id=msg_id, actor_id=letter.actor_id)
        self._rt.wake_actor(letter.actor_id)

    async def discard(self, msg_id: str) -> None:
        """Delete a dead letter for good."""
        if not await self._rt.store.discard_dead_letter(msg_id):
            raise DeadLetterNotFound(msg_id)
        telemetry.log.info("dead_letter_discarded", msg_id=msg_id)
