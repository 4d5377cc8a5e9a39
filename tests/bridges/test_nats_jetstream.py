"""``JetStreamBridge`` against a real NATS server with JetStream: a durable pull consumer into
session mailboxes, acked after ``tell``, poison published to the dead-letter subject. The
crash tests are in test_crash.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import NoStreamResponseError

import tether
from tests.bridges.brokers import NatsWorld
from tests.bridges.programs import Tally, decode, envelope, journal, payload
from tether.bridges.nats_jetstream import JetStreamBridge


def bridge(rt: tether.Runtime, world: NatsWorld, **kw: Any) -> JetStreamBridge:
    options: dict[str, Any] = {
        "durable": world.durable,
        "decode": decode,
        "dead_letter_subject": world.dead_letter_subject,
        **kw,
    }
    return JetStreamBridge(rt, world.js, stream=world.stream, **options)


@pytest.mark.anyio
async def test_messages_are_stored_in_order_per_session_then_acknowledged(
    rt: tether.Runtime, nats_world: NatsWorld
) -> None:
    seqs = await nats_world.publish([payload(f"s-{i % 2}", i) for i in range(7)])
    consumer = bridge(rt, nats_world, batch_size=3)

    stats = await consumer.drain(idle=0.2)

    assert (stats.received, stats.stored, stats.redelivered, stats.dead_lettered) == (7, 7, 0, 0)
    assert await journal(rt, "s-0") == [0, 2, 4, 6]
    assert await journal(rt, "s-1") == [1, 3, 5]
    assert await nats_world.unacked() == 0
    assert await nats_world.undelivered() == 0
    info = await nats_world.js.consumer_info(nats_world.stream, nats_world.durable)
    assert info.config.ack_policy == AckPolicy.EXPLICIT
    # The key names the stream's incarnation: a stream made again restarts its sequences.
    key = consumer.dedup_key(int(seqs[0]))
    assert key == await nats_world.dedup_key(seqs[0])
    assert await rt.store.find_dedup("s-0", key) is not None


@pytest.mark.anyio
async def test_drain_returns_only_once_the_consumer_holds_nothing_whatever_its_fetches_wait(
    rt: tether.Runtime, nats_world: NatsWorld
) -> None:
    """A fetch that comes back empty says nothing on a loaded machine: the server's answer
    may be on its way. ``drain`` ends when the server says the consumer holds no message,
    delivered or not, so ``idle`` is only how long each fetch waits."""
    await nats_world.publish([payload("s-0", i) for i in range(5)])

    stats = await bridge(rt, nats_world, batch_size=2).drain(idle=0.0001)

    assert (stats.received, stats.stored) == (5, 5)
    assert await journal(rt, "s-0") == [0, 1, 2, 3, 4]
    assert (await nats_world.unacked(), await nats_world.undelivered()) == (0, 0)


@pytest.mark.anyio
async def test_poison_is_published_to_the_dead_letter_subject_with_its_reason_then_acked(
    rt: tether.Runtime, nats_world: NatsWorld
) -> None:

    bad = [
        (b"{oops", "cannot decode: DecodeError: JSON is malformed"),
        (envelope("nobody", {"type": "Add", "i": 1}), "no actor with id 'nobody'"),
        (envelope("s-0", {"type": "Unwanted"}), "actor 's-0' does not accept Unwanted"),
    ]
    seqs = await nats_world.publish([payload("s-0", 0), *(data for data, _ in bad)])

    stats = await bridge(rt, nats_world).drain(idle=0.2)

    assert (stats.received, stats.stored, stats.dead_lettered) == (4, 1, 3)
    assert await journal(rt, "s-0") == [0]
    assert await nats_world.unacked() == 0
    letters = await nats_world.dead_letters()
    assert len(letters) == 3
    for (data, reason), seq, (body, headers) in zip(bad, seqs[1:], letters, strict=True):
        assert body == data
        assert reason in headers["Tether-Reason"], headers
        assert headers["Tether-Source-Stream"] == nats_world.stream
        assert headers["Tether-Source-Sequence"] == seq
        assert headers["Nats-Msg-Id"] == await nats_world.dedup_key(seq)
    assert letters[1][1]["Tether-Session"] == "nobody"


@pytest.mark.anyio
async def test_poison_with_no_stream_for_its_dead_letters_stays_unacknowledged(
    rt: tether.Runtime, nats_world: NatsWorld
) -> None:
    """Publishing the dead letter fails: the message is not acknowledged into oblivion, it
    waits to be delivered again."""
    await nats_world.publish([b"{oops"])

    with pytest.raises(NoStreamResponseError):
        await bridge(rt, nats_world, dead_letter_subject="tether-test.nowhere").drain(idle=0.2)

    assert await nats_world.unacked() == 1


@pytest.mark.anyio
async def test_a_redelivery_older_than_the_dedup_retention_is_dead_lettered(
    tmp_path: Path, nats_world: NatsWorld
) -> None:
    """Delivered once and never acked, then delivered again after the runtime's retention:
    its dedup key may be gone, so it is held in the dead letters, not stored again."""
    await nats_world.js.add_consumer(
        nats_world.stream,
        ConsumerConfig(
            durable_name=nats_world.durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=0.3
        ),
    )
    await nats_world.publish([payload("s-0", 0)])
    dying = await nats_world.js.pull_subscribe_bind(
        durable=nats_world.durable, stream=nats_world.stream
    )
    (taken,) = await dying.fetch(1, timeout=5)
    assert taken.metadata.num_delivered == 1  # and never acked: its consumer died
    await anyio.sleep(0.6)

    async with tether.Runtime(tmp_path / "store.db", retention=0.5) as rt:
        await rt.spawn(Tally, "s-0")
        stats = await bridge(rt, nats_world).drain(idle=2.0)

        assert (stats.received, stats.redelivered, stats.dead_lettered) == (1, 1, 1)
        assert await journal(rt, "s-0") == []
    ((_, headers),) = await nats_world.dead_letters()
    assert "beyond the runtime's dedup retention" in headers["Tether-Reason"]
    assert await nats_world.unacked() == 0


@pytest.mark.anyio
async def test_an_existing_consumer_without_explicit_acks_is_refused(
    rt: tether.Runtime, nats_world: NatsWorld
) -> None:
    await nats_world.js.add_consumer(
        nats_world.stream,
        ConsumerConfig(durable_name=nats_world.durable, ack_policy=AckPolicy.NONE),
    )
    with pytest.raises(tether.ConfigError, match="a bridge needs explicit acks"):
        await bridge(rt, nats_world).drain(idle=0.2)


@pytest.mark.anyio
async def test_run_consumes_messages_as_they_come_until_cancelled(
    rt: tether.Runtime, nats_world: NatsWorld
) -> None:
    consumer = bridge(rt, nats_world, fetch_timeout=0.1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer.run)
        await nats_world.publish([payload("s-0", 0)])
        await nats_world.publish([payload("s-1", 1)])
        with anyio.fail_after(30):
            while consumer.stats.stored < 2:
                await anyio.sleep(0.02)
            # A message is acked after it is stored, and the ack reaches the server a moment
            # later: cancelled at once, the consumer could leave the second one unacked.
            while await nats_world.unacked() != 0:
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    assert await journal(rt, "s-0") == [0]
    assert await journal(rt, "s-1") == [1]
    assert await nats_world.unacked() == 0


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"stream": ""}, "stream must be a non-empty string"),
        ({"dead_letter_subject": None}, "dead_letter_subject must be a non-empty string"),
        ({"filter_subject": ""}, "filter_subject must be a non-empty string"),
        ({"batch_size": 2.5}, "batch_size must be a positive integer"),
        ({"ack_wait": 0}, "ack_wait must be a positive number of seconds"),
        ({"decode": None}, "decode must be a callable"),
    ],
)
@pytest.mark.anyio
async def test_bad_settings_are_refused_naming_them(
    tmp_path: Path, nats_world: NatsWorld, options: dict[str, Any], problem: str
) -> None:
    settings: dict[str, Any] = {
        "stream": "ORDERS",
        "durable": "bridge",
        "decode": decode,
        "dead_letter_subject": "orders.dead",
        **options,
    }
    with pytest.raises(tether.ConfigError, match=problem):
        JetStreamBridge(tether.Runtime(tmp_path / "x.db"), nats_world.js, **settings)
