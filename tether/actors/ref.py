"""``ActorRef``: the only handle to an actor, valid whether the actor is active or passivated."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol

from tether.actors.messages import Message


class Router(Protocol):
    """Where refs send to. Implemented by the Runtime."""

    async def tell(
        self, actor_id: str, msg: Message, *, dedup_key: str | None, delay: float | None
    ) -> None: ...

    async def ask(
        self, actor_id: str, msg: Message, *, timeout: float, dedup_key: str | None
    ) -> Any: ...

    async def stop(self, actor_id: str, reason: str) -> None: ...


class ActorRef:
    """Address of one actor. Cheap to create; equal refs address the same actor id."""

    __slots__ = ("_router", "id")

    def __init__(self, router: Router, actor_id: str) -> None:
        self._router = router
        self.id = actor_id

    # tell and ask hand back the runtime's own coroutine: one coroutine per send, not two.
    def tell(
        self, msg: Message, *, dedup_key: str | None = None, delay: float | None = None
    ) -> Coroutine[Any, Any, None]:
        """Enqueue ``msg``; returns once it is durably stored (I1).

        Args:
            msg: a message of a type the actor accepts (else ``MessageRejected``, nothing stored).
            dedup_key: makes the send idempotent: the same key twice stores one message, for as
                long as the runtime's retention keeps the key.
            delay: deliver no earlier than this many seconds from now; survives restarts.

        From inside a handler the message joins the step's outbox instead, and is stored in the
        same transaction as the step (I2).
        """
        return self._router.tell(self.id, msg, dedup_key=dedup_key, delay=delay)

    def ask(
        self, msg: Message, *, timeout: float, dedup_key: str | None = None
    ) -> Coroutine[Any, Any, Any]:
        """Enqueue ``msg`` and wait for the handler's return value.

        Raises ``AskTimeout`` after ``timeout`` seconds (the message stays queued and is still
        processed) and ``MessageDeadLettered`` if the message fails ``max_attempts`` times.
        Asking again with the same ``dedup_key`` waits for (or returns) the first reply.
        """
        return self._router.ask(self.id, msg, timeout=timeout, dedup_key=dedup_key)

    async def stop(self, reason: str = "stopped") -> None:
        """Stop the actor for good: it finishes its current message, then takes no more."""
        await self._router.stop(self.id, reason)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorRef) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"ActorRef({self.id!r})"
