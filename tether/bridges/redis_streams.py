"""A Redis Streams consumer group feeding session mailboxes (``pip install 'tether[redis]'``).

Each entry is told to its session with the entry id as the dedup key, and ``XACK``-ed only after
``tell`` returned. An entry the bridge took but never acknowledged (it was killed, its host
lost) stays in the group's pending list: a restarted bridge with the same consumer name reads
its own pending entries first, and any bridge claims (``XAUTOCLAIM``) the entries another
consumer has left idle longer than ``claim_idle``. tether stores each once, whoever tells it.

Poison entries (see ``tether.bridges.ingest``) are copied to the dead-letter stream with the
reason, and acknowledged, in one ``MULTI``/``EXEC`` transaction: both or neither, so a crash
leaves no entry acknowledged without its dead letter, and no dead letter twice.
"""

from __future__ import annotations

import inspect
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from tether.bridges.ingest import (
    BridgeStats,
    Decode,
    Inbound,
    Ingest,
    Poison,
    check_batch_size,
    check_names,
    check_seconds,
)
from tether.errors import ConfigError
from tether.runtime.runtime import Runtime
from tether.telemetry import log

# Dead-letter fields added to a copy of the entry's own fields.
REASON_FIELD = "tether-reason"
SOURCE_STREAM_FIELD = "tether-source-stream"
SOURCE_ID_FIELD = "tether-source-id"
SESSION_FIELD = "tether-session"

_Entry = tuple[Any, Mapping[Any, Any]]


class RedisStreamsBridge:
    """Consumes ``stream`` as ``consumer`` of ``group`` into session mailboxes.

    Args:
        runtime: an open ``tether.Runtime``; its ``retention`` is the dedup window, and must
            exceed the longest time an entry can stay pending (``docs/bridges.md``).
        client: a ``redis.asyncio.Redis`` client (``decode_responses`` either way).
        stream: the stream to read.
        group: the consumer group (created at ``start_id``, with the stream, if missing).
        decode: turns an ``Inbound`` into ``Routed(session_id, message)``; whatever it raises
            makes the entry poison. ``Inbound.data`` is the ``payload_field`` value, and
            ``Inbound.headers`` the entry's other fields.
        consumer: this bridge's name in the group: stable across restarts (so a restart
            re-reads its own pending entries) and distinct between bridges running at once.
            Default: the host name.
        dead_letter_stream: where poison entries go; default ``<stream>:dead-letters``.
        payload_field: the entry field holding the payload.
        start_id: where a newly created group starts: ``"0"`` (default) takes the entries
            already in the stream, ``"$"`` only those added later.
        batch_size: entries read per ``XREADGROUP`` / ``XAUTOCLAIM``.
        block: seconds one ``XREADGROUP`` waits for new entries (an entry that arrives ends
            the wait at once: this only sets how often a quiet bridge reads again). It must be
            shorter than the client's ``socket_timeout``, or the blocking read fails as a
            timeout; default: 5 s, or half the client's ``socket_timeout`` if that is shorter
            (redis-py 8 gives every client a ``socket_timeout`` of 5 s).
        claim_idle: seconds an entry must have been pending with another consumer before this
            one claims it; longer than the bridge ever takes between reading and acknowledging.
        ids_carry_time: whether entry ids are Redis's own (``XADD *``: milliseconds first), so
            that a redelivery older than the runtime's retention is recognised and held as
            poison. False for a stream whose producers choose ids of another meaning.
    """

    def __init__(
        self,
        runtime: Runtime,
        client: Redis,
        *,
        stream: str,
        group: str,
        decode: Decode,
        consumer: str | None = None,
        dead_letter_stream: str | None = None,
        payload_field: str = "payload",
        start_id: str = "0",
        batch_size: int = 100,
        block: float | None = None,
        claim_idle: float = 60.0,
        ids_carry_time: bool = True,
    ) -> None:
        consumer = socket.gethostname() if consumer is None else consumer
        dead_letter_stream = (
            f"{stream}:dead-letters" if dead_letter_stream is None else dead_letter_stream
        )
        check_names(
            stream=stream,
            group=group,
            consumer=consumer,
            dead_letter_stream=dead_letter_stream,
            payload_field=payload_field,
            start_id=start_id,
        )
        if dead_letter_stream == stream:
            raise ConfigError("dead_letter_stream must differ from stream: poison would loop")
        check_batch_size(batch_size)
        block = _block(client, block)
        check_seconds(block=block, claim_idle=claim_idle)
        self.client = client
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.dead_letter_stream = dead_letter_stream
        self.payload_field = payload_field
        self.start_id = start_id
        self.batch_size = batch_size
        self.block = block
        self.claim_idle = claim_idle
        self.ids_carry_time = ids_carry_time
        self._ingest = Ingest(runtime, decode, key_prefix="redis")
        self._group_ready = False

    @property
    def stats(self) -> BridgeStats:
        return self._ingest.stats

    def dedup_key(self, entry_id: str) -> str:
        """The dedup key an entry of this stream is told with: ``redis:<stream>:<entry id>``."""
        return self._ingest.dedup_key(self.stream, entry_id)

    async def run(self) -> None:
        """Consume until cancelled: own pending entries first, then new ones, claiming stale
        entries of other consumers every ``claim_idle / 2`` seconds. A failure that is not a
        message's (the store, the runtime, the connection) ends it with that error, leaving the
        entries it was handling pending for the next run."""
        await self._recover()
        next_claim = time.monotonic() + self.claim_idle / 2
        while True:
            if time.monotonic() >= next_claim:
                await self._claim_stale()
                next_claim = time.monotonic() + self.claim_idle / 2
            wait = max(0.001, min(self.block, next_claim - time.monotonic()))
            await self._read_new(block=wait)

    async def drain(self) -> BridgeStats:
        """Handle everything there is now, then return: own pending entries, other consumers'
        stale ones, and new ones until a read finds none. For batch jobs and tests."""
        await self._recover()
        while await self._read_new(block=None):
            pass
        return self.stats

    # -- reading ------------------------------------------------------------------------------

    async def _recover(self) -> None:
        await self._ensure_group()
        await self._read_own_pending()
        await self._claim_stale()

    async def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            await self.client.xgroup_create(
                self.stream, self.group, id=self.start_id, mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):  # the group exists: keep its position
                raise
        self._group_ready = True

    async def _read_own_pending(self) -> None:
        """Entries delivered to this consumer name and never acknowledged: a previous run of
        this bridge died between reading and ``XACK``. Some may be stored already."""
        after = "0"
        while True:
            reply = await self.client.xreadgroup(
                self.group, self.consumer, {self.stream: after}, count=self.batch_size
            )
            entries = _entries(reply)
            if not entries:
                return
            await self._handle(entries, redelivered=True)
            after = _str(entries[-1][0])

    async def _claim_stale(self) -> None:
        """Claim the entries other consumers have left pending longer than ``claim_idle``."""
        start = "0-0"
        while True:
            reply = await self.client.xautoclaim(
                self.stream,
                self.group,
                self.consumer,
                min_idle_time=int(self.claim_idle * 1000),
                start_id=start,
                count=self.batch_size,
            )
            start, entries = _str(reply[0]), list(reply[1])
            deleted = [_str(d) for d in reply[2]] if len(reply) > 2 else []
            for entry_id in deleted:
                # Trimmed or XDEL-ed while pending: Redis dropped it from the pending list as it
                # answered. Its content is gone; what remains is this record that it existed.
                await self.client.xadd(
                    self.dead_letter_stream,
                    {
                        REASON_FIELD: "deleted from the stream while pending: never stored",
                        SOURCE_STREAM_FIELD: self.stream,
                        SOURCE_ID_FIELD: entry_id,
                    },
                )
                log.warning("bridge_entry_deleted", source=self.stream, broker_id=entry_id)
            if entries:
                await self._handle(entries, redelivered=True)
            if start == "0-0":
                return

    async def _read_new(self, *, block: float | None) -> bool:
        reply = await self.client.xreadgroup(
            self.group,
            self.consumer,
            {self.stream: ">"},
            count=self.batch_size,
            block=None if block is None else int(block * 1000),
        )
        entries = _entries(reply)
        if entries:
            await self._handle(entries, redelivered=False)
        return bool(entries)

    # -- handling -----------------------------------------------------------------------------

    async def _handle(self, entries: Sequence[_Entry], *, redelivered: bool) -> None:
        inbounds: list[Inbound] = []
        gone: list[Inbound] = []
        for raw_id, raw_fields in entries:
            entry_id = _str(raw_id)
            fields = {_str(k): _bytes(v) for k, v in (raw_fields or {}).items()}
            inbound = Inbound(
                source=self.stream,
                broker_id=entry_id,
                data=fields.pop(self.payload_field, b""),
                headers={k: v.decode("utf-8", "replace") for k, v in fields.items()},
                published_at=_entry_time(entry_id) if self.ids_carry_time else None,
                redelivered=redelivered,
            )
            # An entry has at least one field; none means it was deleted while pending.
            (inbounds if raw_fields else gone).append(inbound)
        outcomes = await self._ingest.batch(inbounds)
        poison = [(i, o) for i, o in zip(inbounds, outcomes, strict=True) if isinstance(o, Poison)]
        poison += [(i, Poison("deleted from the stream while pending: never stored")) for i in gone]
        if poison:
            await self._dead_letter(poison)
        stored = [
            i.broker_id
            for i, o in zip(inbounds, outcomes, strict=True)
            if not isinstance(o, Poison)
        ]
        if stored:  # only now: each of them is durably in its session's mailbox (I1)
            await self.client.xack(self.stream, self.group, *stored)

    async def _dead_letter(self, poison: Sequence[tuple[Inbound, Poison]]) -> None:
        async with self.client.pipeline(transaction=True) as tx:
            for inbound, why in poison:
                record: dict[str, str | bytes] = {**inbound.headers}
                if inbound.data:
                    record[self.payload_field] = inbound.data
                record[REASON_FIELD] = why.reason
                record[SOURCE_STREAM_FIELD] = self.stream
                record[SOURCE_ID_FIELD] = inbound.broker_id
                if why.session_id is not None:
                    record[SESSION_FIELD] = why.session_id
                tx.xadd(self.dead_letter_stream, record)  # type: ignore[arg-type]
            tx.xack(self.stream, self.group, *(inbound.broker_id for inbound, _ in poison))
            await tx.execute()
        for inbound, why in poison:
            self._ingest.dead_lettered(inbound, why)


_DEFAULT_BLOCK = 5.0  # seconds


def _block(client: Redis, block: float | None) -> float:
    """The blocking read's wait: ``block``, or the default (see the class docstring); a wait
    that the client's socket timeout would cut short is refused."""
    timeout = socket_timeout(client)
    if block is None:
        return _DEFAULT_BLOCK if timeout is None else min(_DEFAULT_BLOCK, timeout / 2)
    if timeout is not None and _is_seconds(block) and block >= timeout:
        raise ConfigError(
            f"block ({block} s) must be shorter than the client's socket_timeout ({timeout} s): "
            "a blocking XREADGROUP would fail as a timeout when the stream is quiet"
        )
    return block


def _is_seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def socket_timeout(client: Redis) -> float | None:
    """The seconds the client's connections wait for a reply; None for no limit, or a client
    that does not say (no connection pool, e.g. a cluster client). Read from the pool's
    connection settings, else the connection class's default (which redis-py 8 made 5 s):
    no connection is made."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(kwargs, Mapping):
        return None
    if "socket_timeout" in kwargs:
        timeout = kwargs["socket_timeout"]
    else:
        timeout = None
        for cls in getattr(getattr(pool, "connection_class", None), "__mro__", ()):
            try:
                param = inspect.signature(cls.__init__).parameters.get("socket_timeout")
            except (TypeError, ValueError):  # a signature Python cannot read: look further up
                continue
            if param is not None:
                timeout = param.default
                break
    return float(timeout) if _is_seconds(timeout) and timeout > 0 else None


def _entries(reply: Any) -> list[_Entry]:
    """The entries of an ``XREADGROUP`` reply for one stream (RESP2 list or RESP3 map)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        (found,) = reply.values()
        return list(found[0] if found and isinstance(found[0], list) else found)
    return list(reply[0][1])


def _entry_time(entry_id: str) -> float | None:
    """When Redis added the entry: an auto-generated id starts with its milliseconds."""
    ms, _, _ = entry_id.partition("-")
    return int(ms) / 1000 if ms.isdigit() else None


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
