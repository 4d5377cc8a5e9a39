"""``RedisStreamsBridge`` against a real Redis: stream entries into session mailboxes, acked
after ``tell``, poison to the dead-letter stream, other consumers' stale entries claimed.
The crash tests are in test_crash.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
import redis.asyncio

import tether
from tests.bridges.brokers import REDIS_URL, RedisWorld
from tests.bridges.programs import Tally, decode, envelope, journal, payload
from tether.bridges import Inbound, Routed
from tether.bridges.redis_streams import RedisStreamsBridge


def bridge(rt: tether.Runtime, world: RedisWorld, **kw: Any) -> RedisStreamsBridge:
    options: dict[str, Any] = {"consumer": "c1", "decode": decode, **kw}
    return RedisStreamsBridge(rt, world.client, stream=world.stream, group=world.group, **options)


async def take_as(world: RedisWorld, consumer: str, *, idle: float = 0.001) -> list[str]:
    """Read every new entry as ``consumer`` and never acknowledge: a consumer that died.
    Returns once Redis counts the entries idle for longer than ``idle`` seconds, so that a
    bridge with that ``claim_idle`` claims them (Redis counts idle time in whole
    milliseconds, on its own clock)."""
    await world.client.xgroup_create(world.stream, world.group, id="0", mkstream=True)
    reply: Any = await world.client.xreadgroup(world.group, consumer, {world.stream: ">"})
    await world.wait_idle(idle)
    return [entry_id.decode() for entry_id, _ in reply[0][1]]


@pytest.mark.anyio
async def test_entries_are_stored_in_order_per_session_then_acknowledged(
    rt: tether.Runtime, redis_world: RedisWorld
) -> None:
    """Entries already in the stream when the group is made are consumed too (start_id "0")."""
    ids = await redis_world.publish([payload(f"s-{i % 2}", i) for i in range(7)])

    stats = await bridge(rt, redis_world, batch_size=3).drain()

    assert (stats.received, stats.stored, stats.redelivered, stats.dead_lettered) == (7, 7, 0, 0)
    assert await journal(rt, "s-0") == [0, 2, 4, 6]
    assert await journal(rt, "s-1") == [1, 3, 5]
    assert await redis_world.pending() == []
    assert await redis_world.undelivered() == 0
    key = bridge(rt, redis_world).dedup_key(ids[0])
    assert key == f"redis:{redis_world.stream}:{ids[0]}"
    assert await rt.store.find_dedup("s-0", key) is not None


@pytest.mark.anyio
async def test_a_group_started_at_dollar_takes_only_later_entries(
    rt: tether.Runtime, redis_world: RedisWorld
) -> None:
    await redis_world.publish([payload("s-0", 0)])
    late = bridge(rt, redis_world, start_id="$")
    await late.drain()
    await redis_world.publish([payload("s-0", 1)])
    await late.drain()
    assert await journal(rt, "s-0") == [1]


@pytest.mark.anyio
async def test_poison_entries_go_to_the_dead_letter_stream_with_their_reason_then_are_acked(
    rt: tether.Runtime, redis_world: RedisWorld
) -> None:

    bad = [
        (b"{oops", "cannot decode: DecodeError: JSON is malformed"),
        (envelope("nobody", {"type": "Add", "i": 1}), "no actor with id 'nobody'"),
        (envelope("s-0", {"type": "Unwanted"}), "actor 's-0' does not accept Unwanted"),
        (envelope("s-0", {"type": "Refund", "i": 1}), "Invalid value 'Refund'"),
    ]
    ids = await redis_world.publish([payload("s-0", 0), *(data for data, _ in bad)])
    await redis_world.client.xadd(redis_world.stream, {"other": "no payload field"})

    stats = await bridge(rt, redis_world).drain()

    assert (stats.received, stats.stored, stats.dead_lettered) == (6, 1, 5)
    assert await journal(rt, "s-0") == [0]
    assert await redis_world.pending() == []  # every entry acknowledged, poison included
    letters = await redis_world.dead_letters()
    assert len(letters) == 5
    for (data, reason), entry_id, (body, fields) in zip(bad, ids[1:], letters, strict=False):
        assert body == data  # the payload is kept as it came
        assert reason in fields["tether-reason"], fields
        assert fields["tether-source-stream"] == redis_world.stream
        assert fields["tether-source-id"] == entry_id
    assert letters[1][1]["tether-session"] == "nobody"
    body, fields = letters[4]
    assert body == b""
    assert fields["other"] == "no payload field"  # the entry's other fields are kept too
    assert "cannot decode" in fields["tether-reason"]


@pytest.mark.anyio
async def test_entries_a_dead_consumer_left_pending_are_claimed_once_idle_for_claim_idle(
    rt: tether.Runtime, redis_world: RedisWorld
) -> None:
    ids = await redis_world.publish([payload("s-0", i) for i in range(3)])
    await take_as(redis_world, "dead")

    # Not idle long enough: left with their consumer, which may still be working on them.
    patient = await bridge(rt, redis_world, claim_idle=3600).drain()
    assert patient.received == 0
    assert [c for _, c, _ in await redis_world.pending()] == ["dead"] * 3

    await redis_world.wait_idle(0.05)
    claimed = await bridge(rt, redis_world, claim_idle=0.05).drain()

    assert (claimed.received, claimed.redelivered, claimed.stored) == (3, 3, 3)
    assert await journal(rt, "s-0") == [0, 1, 2]
    assert await redis_world.pending() == []
    assert len(ids) == 3


@pytest.mark.anyio
async def test_an_entry_deleted_while_pending_is_recorded_as_a_dead_letter(
    rt: tether.Runtime, redis_world: RedisWorld
) -> None:
    """Trimmed or deleted before it was acknowledged: its content is gone, and the dead-letter
    stream says so, whether its own consumer re-reads it or another claims it."""
    ids = await redis_world.publish([payload("s-0", i) for i in range(4)])
    await take_as(redis_world, "c1")
    await redis_world.client.xdel(redis_world.stream, ids[0])
    # Entry 3 goes to another consumer that dies, and is deleted too.
    await redis_world.client.xclaim(redis_world.stream, redis_world.group, "x", 0, [ids[3]])
    await redis_world.client.xdel(redis_world.stream, ids[3])

    await bridge(rt, redis_world, consumer="c1", claim_idle=0.001).drain()

    assert await journal(rt, "s-0") == [1, 2]
    assert await redis_world.pending() == []
    letters = sorted(
        (f["tether-source-id"], f["tether-reason"]) for _, f in await redis_world.dead_letters()
    )
    assert letters == [
        (ids[0], "deleted from the stream while pending: never stored"),
        (ids[3], "deleted from the stream while pending: never stored"),
    ]


@pytest.mark.anyio
async def test_a_redelivery_older_than_the_dedup_retention_is_dead_lettered(
    tmp_path: Path, redis_world: RedisWorld
) -> None:
    """An entry added long ago (its id says when) and pending since: its dedup key may be gone,
    so it is held in the dead-letter stream instead of risking a second store."""
    async with tether.Runtime(tmp_path / "store.db", retention=3600.0) as rt:
        await rt.spawn(Tally, "s-0")
        await redis_world.client.xadd(
            redis_world.stream, {"payload": payload("s-0", 0)}, id="1000-0"
        )
        await take_as(redis_world, "dead")
        old_first_delivery = "2000-0"
        await redis_world.client.xadd(
            redis_world.stream, {"payload": payload("s-0", 1)}, id=old_first_delivery
        )

        await bridge(rt, redis_world, claim_idle=0.001).drain()

        assert await journal(rt, "s-0") == [1]  # never delivered before: safe, stored
        ((_, fields),) = await redis_world.dead_letters()
        assert fields["tether-source-id"] == "1000-0"
        assert "beyond the runtime's dedup retention (3600 s)" in fields["tether-reason"]
        assert await redis_world.pending() == []


@pytest.mark.anyio
async def test_a_stream_whose_ids_are_not_times_is_not_judged_by_them(
    tmp_path: Path, redis_world: RedisWorld
) -> None:
    async with tether.Runtime(tmp_path / "store.db", retention=3600.0) as rt:
        await rt.spawn(Tally, "s-0")
        await redis_world.client.xadd(redis_world.stream, {"payload": payload("s-0", 0)}, id="7-0")
        await take_as(redis_world, "dead")

        stats = await bridge(rt, redis_world, claim_idle=0.001, ids_carry_time=False).drain()

        # Claimed, told and stored: not left pending, not held as poison. (Checked in this
        # order, so that a failure says which of them did not happen.)
        counts = (stats.received, stats.redelivered, stats.stored, stats.dead_lettered)
        pending = await redis_world.pending()
        assert counts == (1, 1, 1, 0), pending
        assert pending == []
        assert await redis_world.dead_letters() == []
        assert await journal(rt, "s-0") == [0]


@pytest.mark.anyio
async def test_a_failure_that_is_not_the_entrys_leaves_it_pending_and_ends_the_bridge(
    tmp_path: Path, redis_world: RedisWorld
) -> None:
    async with tether.Runtime(tmp_path / "store.db") as rt:
        await rt.spawn(Tally, "s-0")
    await redis_world.publish([payload("s-0", 0), payload("s-0", 1)])

    with pytest.raises(tether.RuntimeClosed):
        await bridge(rt, redis_world).drain()

    assert len(await redis_world.pending()) == 2  # delivered again to the next run
    assert await redis_world.dead_letters() == []


@pytest.mark.anyio
async def test_run_consumes_entries_as_they_come_until_cancelled(
    rt: tether.Runtime, redis_world: RedisWorld
) -> None:
    """``run`` blocks on new entries, and claims a dead consumer's entry once it is stale."""
    await redis_world.publish([payload("s-1", 2)])
    await take_as(redis_world, "dead")
    consumer = bridge(rt, redis_world, block=0.05, claim_idle=0.3)
    async with anyio.create_task_group() as tg:
        tg.start_soon(consumer.run)
        await redis_world.publish([payload("s-0", 0)])
        await redis_world.publish([payload("s-0", 1)])
        with anyio.fail_after(30):
            while consumer.stats.stored < 3:
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    assert await journal(rt, "s-0") == [0, 1]
    assert await journal(rt, "s-1") == [2]
    assert await redis_world.pending() == []
    assert consumer.stats.redelivered == 1


@pytest.mark.anyio
async def test_run_outlasts_a_quiet_stream_on_a_client_with_a_socket_timeout(
    rt: tether.Runtime, redis_world: RedisWorld
) -> None:
    """A blocking read never waits as long as the client's socket timeout (redis-py 8 gives
    every client one of 5 s, the default ``block``): ``run`` on a quiet stream would end with
    the client's TimeoutError after that long."""
    client = redis.asyncio.Redis.from_url(REDIS_URL, socket_timeout=0.4)
    consumer = RedisStreamsBridge(
        rt, client, stream=redis_world.stream, group=redis_world.group, decode=decode
    )
    assert consumer.block < 0.4
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer.run)
            await anyio.sleep(1.2)  # three socket timeouts without an entry
            await redis_world.publish([payload("s-0", 0)])
            with anyio.fail_after(30):
                while consumer.stats.stored < 1:
                    await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    finally:
        await client.aclose()
    assert await journal(rt, "s-0") == [0]


def test_a_block_as_long_as_the_clients_socket_timeout_is_refused(tmp_path: Path) -> None:
    client = redis.asyncio.Redis.from_url(REDIS_URL, socket_timeout=2.0)
    with pytest.raises(tether.ConfigError, match=r"block \(2.0 s\) must be shorter than"):
        RedisStreamsBridge(
            tether.Runtime(tmp_path / "x.db"),
            client,
            stream="orders",
            group="g",
            decode=decode,
            block=2.0,
        )


@pytest.mark.anyio
async def test_a_client_that_decodes_responses_works_the_same(
    rt: tether.Runtime, redis_world: RedisWorld
) -> None:
    text_client = redis.asyncio.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        await redis_world.publish([payload("s-0", 0)])
        seen: list[Inbound] = []

        def keep(inbound: Inbound) -> Routed:
            seen.append(inbound)
            return decode(inbound)

        await RedisStreamsBridge(
            rt, text_client, stream=redis_world.stream, group="g", consumer="c", decode=keep
        ).drain()
    finally:
        await text_client.aclose()
    assert await journal(rt, "s-0") == [0]
    assert seen[0].data == payload("s-0", 0)
    assert isinstance(seen[0].published_at, float)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"stream": ""}, "stream must be a non-empty string"),
        ({"consumer": 5}, "consumer must be a non-empty string"),
        ({"dead_letter_stream": "orders"}, "dead_letter_stream must differ from stream"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"claim_idle": -1}, "claim_idle must be a positive number of seconds"),
        ({"block": True}, "block must be a positive number of seconds"),
        ({"decode": "json"}, "decode must be a callable"),
    ],
)
def test_bad_settings_are_refused_naming_them(
    tmp_path: Path, options: dict[str, Any], problem: str
) -> None:
    settings: dict[str, Any] = {"stream": "orders", "group": "g", "decode": decode, **options}
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    with pytest.raises(tether.ConfigError, match=problem):
        RedisStreamsBridge(tether.Runtime(tmp_path / "x.db"), client, **settings)
