"""The real brokers the bridge tests run against, seen from outside the bridge.

Each test gets streams of its own (a random name) and deletes them afterwards, so parallel runs
and a dirty server never meet. A broker that is not reachable skips the test with the reason,
unless ``TETHER_REQUIRE_BROKERS=1`` (CI), where it fails it.

``RedisWorld`` and ``NatsWorld`` answer the same questions from the broker's own state — what
is delivered and not acknowledged, what is not delivered yet, what is in the dead-letter
stream — so the crash tests run unchanged on both.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

import anyio
import nats
import pytest
import redis.asyncio
from nats.aio.client import Client as NatsClient
from nats.js.api import StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError

REDIS_URL = os.environ.get("TETHER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
NATS_URL = os.environ.get("TETHER_TEST_NATS_URL", "nats://127.0.0.1:4222")


def unreachable(broker: str, url: str, exc: BaseException) -> None:
    """Skip (or, with TETHER_REQUIRE_BROKERS=1, fail) a test whose broker is not running."""
    why = f"{broker} is not reachable at {url} ({type(exc).__name__}: {exc})"
    if os.environ.get("TETHER_REQUIRE_BROKERS") == "1":
        pytest.fail(f"{why}; TETHER_REQUIRE_BROKERS=1 requires it")
    pytest.skip(f"{why}; start it, or set TETHER_REQUIRE_BROKERS=1 to make this a failure")


class World(Protocol):
    broker: str

    async def publish(self, payloads: Sequence[bytes]) -> list[str]: ...

    async def unacked(self) -> int: ...

    async def undelivered(self) -> int: ...

    async def dead_letters(self) -> list[tuple[bytes, dict[str, str]]]: ...

    def child_config(self, *, consumer: str, batch_size: int) -> dict[str, Any]: ...

    async def dedup_key(self, broker_id: str) -> str:
        """The key the bridge tells the message with this broker id under."""
        ...

    async def wait_claimable(self) -> None:
        """Wait until another consumer may take what a dead one left unacknowledged."""
        ...

    async def close(self) -> None: ...


class RedisWorld:
    broker = "redis"

    def __init__(self, client: redis.asyncio.Redis) -> None:
        self.client = client
        self.stream = f"tether-test:{secrets.token_hex(6)}"
        self.group = "bridge"
        self.dead_letter_stream = f"{self.stream}:dead-letters"

    @classmethod
    async def connect(cls) -> RedisWorld:
        client = redis.asyncio.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        try:
            await client.ping()
        except (redis.ConnectionError, OSError) as exc:
            await client.aclose()
            unreachable("Redis", REDIS_URL, exc)
        return cls(client)

    async def close(self) -> None:
        await self.client.delete(self.stream, self.dead_letter_stream)
        await self.client.aclose()

    async def publish(self, payloads: Sequence[bytes]) -> list[str]:
        ids: list[Any] = [await self.client.xadd(self.stream, {"payload": p}) for p in payloads]
        return [i.decode() for i in ids]

    async def pending(self) -> list[tuple[str, str, int]]:
        """(entry id, consumer, times delivered) of every entry not acknowledged."""
        rows: Any = await self.client.xpending_range(self.stream, self.group, "-", "+", 10_000)
        return [
            (r["message_id"].decode(), r["consumer"].decode(), r["times_delivered"]) for r in rows
        ]

    async def unacked(self) -> int:
        return len(await self.pending())

    async def undelivered(self) -> int:
        groups: Any = await self.client.xinfo_groups(self.stream)
        for group in groups:
            if group["name"].decode() == self.group:
                return int(group["lag"])
        return int(await self.client.xlen(self.stream))

    async def dead_letters(self) -> list[tuple[bytes, dict[str, str]]]:
        out = []
        entries: Any = await self.client.xrange(self.dead_letter_stream)
        for _, fields in entries:
            decoded = {k.decode(): v for k, v in fields.items()}
            body = decoded.pop("payload", b"")
            out.append((body, {k: v.decode() for k, v in decoded.items()}))
        return out

    async def dedup_key(self, broker_id: str) -> str:
        return f"redis:{self.stream}:{broker_id}"

    async def wait_claimable(self) -> None:
        await self.wait_idle(CLAIM_IDLE)

    async def wait_idle(self, seconds: float) -> None:
        """Wait until Redis itself counts every pending entry idle for longer than ``seconds``,
        so that an ``XAUTOCLAIM`` with that ``min_idle_time`` takes them all. Judged on
        Redis's clock, in its whole milliseconds, not by a sleep on this process's clock."""
        with anyio.fail_after(30):
            while True:
                rows: Any = await self.client.xpending_range(
                    self.stream, self.group, "-", "+", 10_000
                )
                if all(r["time_since_delivered"] > seconds * 1000 for r in rows):
                    return
                await anyio.sleep(0.005)

    def child_config(self, *, consumer: str, batch_size: int) -> dict[str, Any]:
        return {
            "broker": "redis",
            "url": REDIS_URL,
            "stream": self.stream,
            "group": self.group,
            "consumer": consumer,
            "batch_size": batch_size,
            "claim_idle": CLAIM_IDLE,
        }


CLAIM_IDLE = 0.3  # seconds: how long a dead consumer's entries wait before another claims them
ACK_WAIT = 1.0  # seconds: how long JetStream waits for an ack before delivering again


class NatsWorld:
    broker = "nats"

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream()
        tag = secrets.token_hex(6)
        self.stream = f"TETHER_TEST_{tag}"
        self.dead_letter_stream = f"TETHER_TEST_{tag}_DEAD"
        self.subject = f"tether-test.{tag}.in"
        self.dead_letter_subject = f"tether-test.{tag}.dead"
        self.durable = "bridge"

    @classmethod
    async def connect(cls) -> NatsWorld:
        # nats-py retries a refused first connection forever: ask the port first.
        url = urlsplit(NATS_URL)
        try:
            with anyio.fail_after(2):
                stream = await anyio.connect_tcp(url.hostname or "127.0.0.1", url.port or 4222)
            await stream.aclose()
        except (OSError, TimeoutError) as exc:
            unreachable("NATS", NATS_URL, exc)
        with anyio.fail_after(10):
            nc = await nats.connect(NATS_URL, connect_timeout=2, allow_reconnect=False)
        world = cls(nc)
        await world.js.add_stream(StreamConfig(name=world.stream, subjects=[world.subject]))
        await world.js.add_stream(
            StreamConfig(name=world.dead_letter_stream, subjects=[world.dead_letter_subject])
        )
        return world

    async def close(self) -> None:
        for stream in (self.stream, self.dead_letter_stream):
            with contextlib.suppress(NotFoundError):
                await self.js.delete_stream(stream)
        await self.nc.close()

    async def publish(self, payloads: Sequence[bytes]) -> list[str]:
        return [str((await self.js.publish(self.subject, p)).seq) for p in payloads]

    async def _consumer(self) -> Any:
        try:
            return await self.js.consumer_info(self.stream, self.durable)
        except NotFoundError:
            return None

    async def unacked(self) -> int:
        info = await self._consumer()
        return 0 if info is None else int(info.num_ack_pending)

    async def undelivered(self) -> int:
        info = await self._consumer()
        if info is None:
            return int((await self.js.stream_info(self.stream)).state.messages)
        return int(info.num_pending)

    async def dead_letters(self) -> list[tuple[bytes, dict[str, str]]]:
        state = (await self.js.stream_info(self.dead_letter_stream)).state
        out = []
        for seq in range(state.first_seq, state.last_seq + 1) if state.messages else ():
            msg = await self.js.get_msg(self.dead_letter_stream, seq)
            out.append((msg.data or b"", dict(msg.headers or {})))
        return out

    async def dedup_key(self, broker_id: str) -> str:
        created = (await self.js.stream_info(self.stream)).created
        if created is None:
            raise AssertionError("the server did not say when the stream was created")
        return f"nats:{self.stream}@{created.isoformat()}:{broker_id}"

    async def wait_claimable(self) -> None:
        """Nothing to wait for here: the next bridge's fetches wait out the ack_wait."""

    def child_config(self, *, consumer: str, batch_size: int) -> dict[str, Any]:
        return {
            "broker": "nats",
            "url": NATS_URL,
            "stream": self.stream,
            "durable": self.durable,  # every bridge process binds the one durable consumer
            "dead_subject": self.dead_letter_subject,
            "batch_size": batch_size,
            "ack_wait": ACK_WAIT,
        }
