"""A NATS JetStream durable pull consumer feeding session mailboxes
(``pip install 'tether[nats]'``).

Each message is told to its session with the stream sequence as the dedup key, and
acknowledged (``ack_sync``: the server confirms) only after ``tell`` returned. A message the
bridge fetched but never acknowledged is delivered again by the server once the consumer's
``ack_wait`` has passed, to this bridge or to any other bound to the same durable consumer;
tether stores it once.

Poison messages (see ``tether.bridges.ingest``) are published to the dead-letter subject with
the reason in headers and ``Nats-Msg-Id`` set to their dedup key, so the stream capturing that
subject keeps one copy even if the bridge dies between publishing and acknowledging (within
that stream's duplicate window); then they are acknowledged. If no stream captures the
subject, publishing fails and the message stays unacknowledged: nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

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

REASON_HEADER = "Tether-Reason"
SOURCE_STREAM_HEADER = "Tether-Source-Stream"
SOURCE_SEQUENCE_HEADER = "Tether-Source-Sequence"
SESSION_HEADER = "Tether-Session"


class JetStreamBridge:
    """Consumes ``stream`` through the durable pull consumer ``durable`` into session mailboxes.

    Args:
        runtime: an open ``tether.Runtime``; its ``retention`` is the dedup window, and must
            exceed the longest time a message can wait for redelivery (``docs/bridges.md``).
        js: a JetStream context (``nc.jetstream()``).
        stream: the stream to consume.
        durable: the durable consumer's name. Created if missing (explicit acks, ``ack_wait``,
            ``filter_subject``, from the start of the stream); an existing one is used as it is
            configured, and must have explicit acks.
        decode: turns an ``Inbound`` into ``Routed(session_id, message)``; whatever it raises
            makes the message poison. ``Inbound.data`` is the message body, ``headers`` its
            headers.
        dead_letter_subject: where poison goes; a stream must capture it.
        filter_subject: the subjects of ``stream`` a new consumer takes; None: all.
        batch_size: messages per fetch.
        fetch_timeout: seconds one fetch waits for messages.
        ack_wait: seconds a new consumer waits for an ack before delivering again.
    """

    def __init__(
        self,
        runtime: Runtime,
        js: JetStreamContext,
        *,
        stream: str,
        durable: str,
        decode: Decode,
        dead_letter_subject: str,
        filter_subject: str | None = None,
        batch_size: int = 100,
        fetch_timeout: float = 5.0,
        ack_wait: float = 60.0,
    ) -> None:
        check_names(stream=stream, durable=durable, dead_letter_subject=dead_letter_subject)
        if filter_subject is not None:
            check_names(filter_subject=filter_subject)
        check_batch_size(batch_size)
        check_seconds(fetch_timeout=fetch_timeout, ack_wait=ack_wait)
        self.js = js
        self.stream = stream
        self.durable = durable
        self.dead_letter_subject = dead_letter_subject
        self.filter_subject = filter_subject
        self.batch_size = batch_size
        self.fetch_timeout = fetch_timeout
        self.ack_wait = ack_wait
        self._ingest = Ingest(runtime, decode, key_prefix="nats")
        self._sub: JetStreamContext.PullSubscription | None = None
        self._source = stream  # the stream's name and creation time, once known

    @property
    def stats(self) -> BridgeStats:
        return self._ingest.stats

    def dedup_key(self, sequence: int) -> str:
        """The dedup key a message of this stream is told with:
        ``nats:<stream>@<created>:<sequence>``. A stream deleted and made again numbers its
        messages from 1 again; its creation time keeps their keys apart from the old ones."""
        return self._ingest.dedup_key(self._source, str(sequence))

    async def run(self) -> None:
        """Consume until cancelled. A failure that is not a message's (the store, the runtime,
        the connection) ends it with that error; the messages it was handling are delivered
        again after ``ack_wait``."""
        while True:
            await self._fetch(self.fetch_timeout)

    async def drain(self, *, idle: float = 0.5) -> BridgeStats:
        """Handle everything the consumer holds, then return: the messages not delivered yet,
        and those delivered and not acknowledged (a dead consumer's come back after their
        ``ack_wait``). For batch jobs and tests.

        Each fetch waits up to ``idle`` seconds. An empty fetch alone ends nothing: on a
        loaded machine the server's answer may still be on its way (nats-py keeps what
        arrives late for the next fetch), so the drain ends once the server says the consumer
        has no message pending or awaiting an ack."""
        while True:
            if await self._fetch(idle):
                continue
            info = await self.js.consumer_info(self.stream, self.durable)
            if info.num_pending == 0 and info.num_ack_pending == 0:
                return self.stats

    async def _subscription(self) -> JetStreamContext.PullSubscription:
        if self._sub is not None:
            return self._sub
        info = await self.js.stream_info(self.stream)
        if info.created is not None:
            self._source = f"{self.stream}@{info.created.isoformat()}"
        try:
            consumer = await self.js.consumer_info(self.stream, self.durable)
        except NotFoundError:
            consumer = await self.js.add_consumer(
                self.stream,
                ConsumerConfig(
                    durable_name=self.durable,
                    ack_policy=AckPolicy.EXPLICIT,
                    ack_wait=self.ack_wait,
                    deliver_policy=DeliverPolicy.ALL,
                    filter_subject=self.filter_subject,
                ),
            )
        if consumer.config.ack_policy != AckPolicy.EXPLICIT:
            raise ConfigError(
                f"consumer {self.durable!r} of stream {self.stream!r} has ack policy "
                f"{consumer.config.ack_policy}: a bridge needs explicit acks, or the server "
                "forgets a message before it is stored"
            )
        self._sub = await self.js.pull_subscribe_bind(durable=self.durable, stream=self.stream)
        return self._sub

    async def _fetch(self, timeout: float) -> bool:
        sub = await self._subscription()
        try:
            msgs = await sub.fetch(self.batch_size, timeout=timeout)
        except TimeoutError:
            # Nothing arrived in time. nats-py says so with its own TimeoutError on most paths
            # and with asyncio's (the builtin) on some (a deadline spent before its lingering
            # pull request, under load): the former is a subclass of the latter.
            return False
        await self._handle(msgs)
        return bool(msgs)

    async def _handle(self, msgs: Sequence[Msg]) -> None:
        inbounds = []
        for msg in msgs:
            meta = msg.metadata
            inbounds.append(
                Inbound(
                    source=self._source,
                    broker_id=str(meta.sequence.stream),
                    data=msg.data,
                    headers=dict(msg.headers or {}),
                    published_at=meta.timestamp.timestamp(),
                    redelivered=meta.num_delivered > 1,
                )
            )
        outcomes = await self._ingest.batch(inbounds)
        for msg, inbound, outcome in zip(msgs, inbounds, outcomes, strict=True):
            if isinstance(outcome, Poison):
                await self._dead_letter(inbound, outcome)
            # Only now: the message is durably in its session's mailbox (I1), or dead-lettered.
            await msg.ack_sync()
            if isinstance(outcome, Poison):
                self._ingest.dead_lettered(inbound, outcome)

    async def _dead_letter(self, inbound: Inbound, why: Poison) -> None:
        headers = {
            **inbound.headers,
            # The duplicate window of the dead-letter stream drops a second copy.
            "Nats-Msg-Id": self._ingest.dedup_key(inbound.source, inbound.broker_id),
            REASON_HEADER: _one_line(why.reason),
            SOURCE_STREAM_HEADER: self.stream,
            SOURCE_SEQUENCE_HEADER: inbound.broker_id,
        }
        if why.session_id is not None:
            headers[SESSION_HEADER] = _one_line(why.session_id)
        await self.js.publish(self.dead_letter_subject, inbound.data, headers=headers)


def _one_line(text: str) -> str:
    """A header value cannot hold a line break."""
    return " ".join(text.split())
