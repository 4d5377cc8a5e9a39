"""What a send makes of a message: checked against its receiver, encoded, stamped.

Every send (``tell``, ``ask``, a handler's ``tell`` that joins its step's outbox, the
runtime's own notices) passes ``Mail.prepare`` before anything is stored: the receiver must
accept the type, the payload must encode, round-trip and fit ``max_message_bytes``, a delay
must be finite. The message gets its id (this runtime's random prefix and a counter: ids key
the effects ledger, so they never repeat across runtimes) and the trace it joins.
"""

from __future__ import annotations

import itertools
import math
import secrets
from collections.abc import Callable
from typing import Any

import msgspec

from tether.actors.actor import ActorSpec
from tether.actors.messages import UNENCODABLE, Message, nesting_problem
from tether.errors import ConfigError, MessageRejected
from tether.runtime import tracing
from tether.runtime.journal import decoders
from tether.runtime.step import current_step
from tether.store.records import NewMessage


class Mail:
    """The messages one runtime sends. ``own_prefix`` starts the id of each of them."""

    def __init__(
        self, encode: Callable[[Any], bytes], clock: Callable[[], float], max_bytes: int
    ) -> None:
        self._encode = encode
        self._clock = clock
        self._max_bytes = max_bytes
        self._ids = itertools.count(1)
        # 64 random bits: msg ids key the effects ledger
        self.own_prefix = f"{secrets.token_hex(8)}-"

    def prepare(
        self,
        actor_id: str,
        spec: ActorSpec,
        msg: Message,
        dedup_key: str | None,
        delay: float | None,
        *,
        wants_reply: bool,
    ) -> NewMessage:
        """The message to store, once every check a send makes has passed (``spec``: the
        receiver's, active)."""
        check_type(actor_id, spec, msg)
        if delay is not None and not (type(delay) in (float, int) and 0 <= delay < math.inf):
            _check_delay(delay)  # the usual case is checked above, cheaply
        if dedup_key is not None and not (isinstance(dedup_key, str) and dedup_key):
            raise ConfigError(f"dedup_key must be a non-empty string, not {dedup_key!r}")
        try:
            payload = self._encode(msg)
            too_deep = nesting_problem(msg, payload)
        except UNENCODABLE as exc:
            too_deep = nesting_problem(msg)
            if too_deep is None:
                raise MessageRejected(
                    actor_id,
                    f"{type(msg).__name__} that cannot be encoded ({exc})",
                    spec.accepted_names,
                ) from exc
        if too_deep is not None:
            # Refused by one limit, not where the stack of the moment runs out: a payload that
            # encodes here could fail to decode at delivery, deeper in another stack.
            raise MessageRejected(
                actor_id,
                f"{type(msg).__name__} that cannot be stored: {too_deep}",
                spec.accepted_names,
            )
        if len(payload) > self._max_bytes:
            raise MessageRejected(
                actor_id,
                f"{type(msg).__name__} of {len(payload)} bytes (limit {self._max_bytes})",
                spec.accepted_names,
            )
        try:
            # A Struct does not check its fields when it is built: decoding the payload as the
            # receiver will finds a field of the wrong type now, before anything is stored,
            # instead of at delivery. The receiver's cell here gets the decoded message.
            decoded = decoders(spec)[0].decode(payload)
        except msgspec.DecodeError as exc:  # ValidationError, or a type that does not round-trip
            raise MessageRejected(
                actor_id, f"{type(msg).__name__} with an invalid field ({exc})", spec.accepted_names
            ) from exc
        now = self._clock()
        type_name = type(msg).__name__
        # The trace the message joins (tether.runtime.tracing): a step's sends pass on its own.
        step = current_step.get()
        if step is not None and not step.closed:
            inbound = step.cell.current
            traceparent = tracing.outgoing(
                inbound.traceparent if inbound is not None else None, True, actor_id, type_name
            )
        else:
            traceparent = tracing.outgoing(None, False, actor_id, type_name)
        return NewMessage(
            msg_id=f"{self.own_prefix}{next(self._ids)}",
            actor_id=actor_id,
            type=type_name,
            payload=payload,
            deliver_at=now + delay if delay else now,
            created_at=now,
            dedup_key=dedup_key,
            wants_reply=wants_reply,
            traceparent=traceparent,
            decoded=decoded,
        )


def check_type(actor_id: str, spec: ActorSpec, msg: Message) -> None:
    if type(msg) not in spec.message_types:
        raise MessageRejected(actor_id, type(msg).__name__, spec.accepted_names)


def _check_delay(delay: object) -> None:
    """Raise ``ConfigError`` unless ``delay`` is a finite number of seconds >= 0 (infinity
    would store a message that is never delivered)."""
    if isinstance(delay, bool) or not isinstance(delay, int | float) or not (0 <= delay < math.inf):
        raise ConfigError(f"delay must be a finite number of seconds >= 0, not {delay!r}")


def due_now(new: NewMessage, clock: Callable[[], float]) -> bool:
    """Whether ``new`` may be delivered now. One sent without a delay is due at once whatever
    the clock says (as every store reads it, see ``Store.pending``): no clock read for it."""
    return new.deliver_at == new.created_at or new.deliver_at <= clock()
