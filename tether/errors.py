"""Every error tether raises, in one tree.

::

    TetherError
    ├── ConfigError (ValueError)            a bad actor class, spawn argument or runtime setting
    ├── MessageRejected (TypeError)         a message of a type the actor does not accept
    ├── ActorNotFound (LookupError)         no actor with that id in the store
    ├── DeadLetterNotFound (LookupError)    no dead letter with that message id
    ├── ActorStopped                        the actor was stopped; it takes no more messages
    ├── AskTimeout (TimeoutError)           no reply within the ask's timeout
    ├── MessageDeadLettered                 the asked message failed max_attempts times
    ├── RuntimeClosed                       the Runtime is not open
    └── StoreError                          the store could not do what was asked
        ├── StoreOpenError                  the store file cannot be opened or created
        ├── SchemaVersionError              the store was written by an unknown schema version
        ├── CorruptRecordError              a stored row cannot be decoded
        ├── StaleLeaseError                 a commit carried a fencing token that is no longer current
        └── JournalWriteError               a commit failed; its outcome is unknown

Cancellation is never wrapped or swallowed: anyio's cancellation exceptions pass through
every layer untouched.
"""

from __future__ import annotations

from collections.abc import Sequence


class TetherError(Exception):
    """The root of every error tether raises."""


class ConfigError(TetherError, ValueError):
    """A bad actor class definition, spawn argument or runtime setting."""


class MessageRejected(TetherError, TypeError):
    """A message of a type the actor does not accept; nothing was stored."""

    def __init__(self, actor_id: str, message_type: str, accepted: Sequence[str]) -> None:
        self.actor_id = actor_id
        self.message_type = message_type
        self.accepted = tuple(accepted)
        super().__init__(
            f"actor {actor_id!r} does not accept {message_type}; "
            f"it accepts: {', '.join(self.accepted) or 'nothing'}"
        )


class ActorNotFound(TetherError, LookupError):
    """No actor with this id exists in the store."""

    def __init__(self, actor_id: str) -> None:
        self.actor_id = actor_id
        super().__init__(f"no actor with id {actor_id!r} in this store")


class DeadLetterNotFound(TetherError, LookupError):
    """No dead letter with this message id."""

    def __init__(self, msg_id: str) -> None:
        self.msg_id = msg_id
        super().__init__(f"no dead letter with message id {msg_id!r}")


class ActorStopped(TetherError):
    """The actor was stopped and takes no more messages."""

    def __init__(self, actor_id: str, reason: str | None) -> None:
        self.actor_id = actor_id
        self.reason = reason
        super().__init__(f"actor {actor_id!r} is stopped ({reason or 'no reason given'})")


class AskTimeout(TetherError, TimeoutError):
    """No reply arrived within the ask's timeout. The message stays queued and is processed."""

    def __init__(self, actor_id: str, message_type: str, timeout: float) -> None:
        self.actor_id = actor_id
        self.message_type = message_type
        self.timeout = timeout
        super().__init__(f"no reply from {actor_id!r} to {message_type} within {timeout} s")


class MessageDeadLettered(TetherError):
    """The asked message failed ``max_attempts`` times and was moved to the dead letters."""

    def __init__(self, actor_id: str, msg_id: str, errors: Sequence[str]) -> None:
        self.actor_id = actor_id
        self.msg_id = msg_id
        self.errors = tuple(errors)
        last = self.errors[-1] if self.errors else "unknown error"
        super().__init__(
            f"message {msg_id} to {actor_id!r} was dead-lettered after "
            f"{len(self.errors)} attempt(s); last error: {last}"
        )


class RuntimeClosed(TetherError):
    """The Runtime is not open (use ``async with tether.Runtime(...)``)."""


class StoreError(TetherError):
    """The store could not do what was asked."""


class StoreOpenError(StoreError):
    """The store file cannot be opened or created."""


class SchemaVersionError(StoreError):
    """The store was written by a schema version this tether does not know."""


class CorruptRecordError(StoreError):
    """A stored row cannot be decoded."""


class StaleLeaseError(StoreError):
    """A commit carried a fencing token that is no longer current: another owner took over."""

    def __init__(self, actor_id: str, fence: int) -> None:
        self.actor_id = actor_id
        self.fence = fence
        super().__init__(
            f"commit for {actor_id!r} rejected: fencing token {fence} is stale "
            "(another runtime owns this actor now)"
        )


class JournalWriteError(StoreError):
    """A commit failed. Its outcome is unknown, so the step is never resumed in place."""
