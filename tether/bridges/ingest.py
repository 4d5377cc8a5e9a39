"""What every broker bridge shares: turn a delivered broker message into one stored tether
message, or into a reason it can never be stored.

A broker delivers at least once: a consumer that dies after taking a message but before
acknowledging it gets the message again, or another consumer does. Exactly-once *effects* come
from the state boundary, not from the broker: ``tell`` with ``dedup_key`` set to the broker's
own id for the message (I1) stores it once however often it arrives, and the broker is
acknowledged only after ``tell`` returned. The broker adapters (``redis_streams``,
``nats_jetstream``) do the reading and acknowledging; this module does the deciding:

- ``stored``: ``tell`` returned, so the message is durably in the session's mailbox (or was
  already, under the same key): acknowledge it.
- ``poison``: it can never be stored as it is (undecodable, an unknown or stopped session, a
  type the session refuses, or redelivered after its dedup key may have been forgotten): send
  it to the dead-letter stream with this reason, then acknowledge it. Never acknowledged into
  oblivion, never retried forever.
- anything else (the store failing, the runtime closed, cancellation) says nothing about the
  message: it propagates, the message stays unacknowledged, and the broker delivers it again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Union

import anyio
import msgspec

from tether.actors.messages import Message
from tether.errors import ActorNotFound, ActorStopped, ConfigError, MessageRejected
from tether.runtime.runtime import Runtime
from tether.telemetry import log

# What a send can raise that is about the message itself, so delivering it again would fail
# the same way: an unknown or malformed session id, a stopped session, a type it refuses or a
# message too large for it. Everything else a send raises is about the runtime or the store.
_REFUSALS = (ActorNotFound, ActorStopped, MessageRejected, ConfigError)


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message as the broker delivered it.

    Attributes:
        source: the stream it was read from.
        broker_id: the broker's id for it within ``source`` (a Redis stream entry id, a
            JetStream stream sequence): the same on every redelivery.
        data: its payload.
        headers: its other fields (Redis) or headers (NATS), decoded as UTF-8.
        published_at: when it entered the stream, in seconds since the epoch, by the broker's
            clock; None if the broker does not say.
        redelivered: whether the broker delivered it before (so it may be stored already).
    """

    source: str
    broker_id: str
    data: bytes
    headers: Mapping[str, str]
    published_at: float | None
    redelivered: bool


class Routed(NamedTuple):
    """What a decoder makes of a broker message: the session it is for, and the message."""

    session_id: str
    message: Message


Decode = Callable[[Inbound], Routed]
"""A pure function of the broker message. Whatever it raises makes the message poison: it is
dead-lettered with the error as the reason. It must not do I/O that can fail transiently."""


@dataclass(frozen=True, slots=True)
class Stored:
    """``tell`` returned: the message is durably stored, once, under ``dedup_key``."""

    session_id: str
    dedup_key: str


@dataclass(frozen=True, slots=True)
class Poison:
    """The message can never be stored as it is; ``reason`` says why."""

    reason: str
    session_id: str | None = None


Outcome = Stored | Poison


@dataclass(slots=True)
class BridgeStats:
    """Counts since the bridge was made. ``stored`` counts messages ``tell`` accepted, a
    redelivered one that tether found stored already under its key included."""

    received: int = 0
    redelivered: int = 0
    stored: int = 0
    dead_lettered: int = 0


def check_names(**names: object) -> None:
    """Raise ``ConfigError`` naming the first setting that is not a non-empty string."""
    for name, value in names.items():
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{name} must be a non-empty string, not {value!r}")


def check_batch_size(batch_size: object) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, not {batch_size!r}")


def check_seconds(**durations: object) -> None:
    """Raise ``ConfigError`` naming the first duration that is not a positive number."""
    for name, seconds in durations.items():
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
            raise ConfigError(f"{name} must be a positive number of seconds, not {seconds!r}")


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    session: str
    message: msgspec.Raw


def json_envelope(*message_types: type[Message]) -> Decode:
    """A decoder for JSON payloads ``{"session": ID, "message": {"type": NAME, ...fields}}``.

    ``NAME`` is the class name of one of ``message_types`` (tether messages are tagged by class
    name) and the fields are checked against its annotations, so a payload that is not JSON,
    names no known type or has a field of the wrong type is refused here, naming the problem.
    """
    if not message_types or not all(
        isinstance(t, type) and issubclass(t, Message) for t in message_types
    ):
        raise ConfigError(f"json_envelope needs tether.Message classes, not {message_types!r}")
    envelope = msgspec.json.Decoder(_Envelope)
    # One type decodes with or without its tag; several decode as a union tagged by class name.
    target: Any = message_types[0] if len(message_types) == 1 else Union.__getitem__(message_types)
    body: msgspec.json.Decoder[Message] = msgspec.json.Decoder(target)

    def decode(inbound: Inbound) -> Routed:
        outer = envelope.decode(inbound.data)
        return Routed(outer.session, body.decode(outer.message))

    return decode


def _first_leaf(group: BaseExceptionGroup[Exception]) -> Exception:
    first = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


class Ingest:
    """Decides, for a batch of broker messages, which are stored and which are poison.

    Messages of one session are told one after another in broker order; different sessions'
    are told at once, so that one group commit holds many of them.
    """

    def __init__(self, runtime: Runtime, decode: Decode, *, key_prefix: str) -> None:
        if not callable(decode):
            raise ConfigError(f"decode must be a callable taking an Inbound, not {decode!r}")
        self.runtime = runtime
        self.decode = decode
        self.key_prefix = key_prefix
        self.stats = BridgeStats()

    def dedup_key(self, source: str, broker_id: str) -> str:
        """The broker's own id, named by broker and stream: the same on every redelivery, and
        distinct between two streams feeding one session."""
        return f"{self.key_prefix}:{source}:{broker_id}"

    async def batch(self, inbounds: Sequence[Inbound]) -> list[Outcome]:
        """The outcome of each message, in order. Raises (nothing to acknowledge) if a send
        fails for a reason that is not the message's."""
        outcomes: list[Outcome | None] = [None] * len(inbounds)
        by_session: dict[str, list[tuple[int, Routed]]] = {}
        for i, inbound in enumerate(inbounds):
            self.stats.received += 1
            self.stats.redelivered += inbound.redelivered
            routed = self._route(inbound)
            if isinstance(routed, Poison):
                outcomes[i] = routed
            else:
                by_session.setdefault(routed.session_id, []).append((i, routed))

        async def tell_in_order(items: list[tuple[int, Routed]]) -> None:
            for i, routed in items:
                outcomes[i] = await self._tell(inbounds[i], routed)

        try:
            async with anyio.create_task_group() as tg:
                for items in by_session.values():
                    tg.start_soon(tell_in_order, items)
        except ExceptionGroup as group:
            # One session's send failed (the store, the runtime) and the others were cancelled
            # by it: raise that failure itself, as a single send would have.
            raise _first_leaf(group) from group
        done = [o for o in outcomes if o is not None]
        if len(done) != len(inbounds):  # every index is set above or by a finished task
            raise RuntimeError("a bridge batch finished with a message undecided")
        for outcome in done:
            if isinstance(outcome, Stored):
                self.stats.stored += 1
        return done

    def _route(self, inbound: Inbound) -> Routed | Poison:
        try:
            returned: object = self.decode(inbound)  # a user's function: checked, not trusted
        except Exception as exc:  # noqa: BLE001 - the decoder's verdict on this message
            return Poison(f"cannot decode: {type(exc).__name__}: {exc}")
        if not (
            isinstance(returned, tuple)
            and len(returned) == 2
            and isinstance(returned[0], str)
            and isinstance(returned[1], Message)
        ):
            return Poison(f"the decoder returned {returned!r}, not Routed(session_id, message)")
        routed = Routed(*returned)
        horizon = self.runtime.retention
        if (
            inbound.redelivered
            and inbound.published_at is not None
            and self.runtime.clock() - inbound.published_at > horizon
        ):
            # Its dedup key was written no earlier than it was published; older than the
            # runtime's retention, the key may be purged, and a second store would apply it
            # twice. Only a person can tell: it is held, not guessed.
            return Poison(
                f"redelivered {self.runtime.clock() - inbound.published_at:.0f} s after it was "
                f"published, beyond the runtime's dedup retention ({horizon:.0f} s): it may be "
                "stored already and would be stored twice",
                routed.session_id,
            )
        return routed

    async def _tell(self, inbound: Inbound, routed: Routed) -> Outcome:
        key = self.dedup_key(inbound.source, inbound.broker_id)
        try:
            await self.runtime.ref(routed.session_id).tell(routed.message, dedup_key=key)
        except _REFUSALS as exc:
            return Poison(str(exc), routed.session_id)
        return Stored(routed.session_id, key)

    def dead_lettered(self, inbound: Inbound, poison: Poison) -> None:
        """Count and log a message the adapter moved to its dead-letter stream."""
        self.stats.dead_lettered += 1
        log.warning(
            "bridge_dead_lettered",
            source=inbound.source,
            broker_id=inbound.broker_id,
            session_id=poison.session_id,
            reason=poison.reason,
        )
