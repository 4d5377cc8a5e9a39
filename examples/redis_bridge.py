"""Messages from a Redis stream into session mailboxes: at-least-once in, stored exactly once.

Run: python examples/redis_bridge.py   (needs Redis; REDIS_URL, default redis://127.0.0.1:6379/0)

A producer adds deposits to a stream. A first consumer takes two of them, tells them to their
accounts, and dies before its ``XACK``: Redis still lists them as pending. A
``RedisStreamsBridge`` then claims them (``XAUTOCLAIM``) and tells them again, under the same
dedup key (the stream entry id), so tether stores them once; it reads the rest, acknowledges
each entry only after ``tell`` returned, and sends the two malformed entries to the
dead-letter stream with the reason. docs/bridges.md explains the pattern.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import redis.asyncio as redis

import tether
from tether.bridges import json_envelope
from tether.bridges.redis_streams import RedisStreamsBridge

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
DB = "redis-bridge.db"


class Deposit(tether.Message):
    amount: int


class GetBalance(tether.Message):
    pass


class Deposited(tether.Event):
    amount: int


class AccountState(msgspec.Struct):
    balance: int = 0


class Account(tether.Actor[AccountState]):
    initial_state = AccountState()

    def apply(self, state: AccountState, event: Deposited) -> AccountState:
        return AccountState(balance=state.balance + event.amount)

    async def handle(self, msg: Deposit | GetBalance) -> int | None:
        match msg:
            case Deposit(amount=a):
                self.persist(Deposited(amount=a))
            case GetBalance():
                return self.state.balance
        return None


decode = json_envelope(Deposit)  # {"session": ..., "message": {"type": "Deposit", ...}}


def deposit(account: str, amount: int) -> dict[Any, Any]:
    body = {"session": account, "message": {"type": "Deposit", "amount": amount}}
    return {"payload": json.dumps(body)}


def fresh_store() -> None:
    """Start from an empty store on every run."""
    for suffix in ("", "-wal", "-shm"):
        Path(DB + suffix).unlink(missing_ok=True)


async def main() -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        await client.ping()
    except (redis.ConnectionError, OSError) as exc:
        sys.exit(
            f"this example needs Redis at {REDIS_URL} ({exc}).\n"
            "Start one (redis-server --port 6379) or set REDIS_URL."
        )
    stream = f"tether-example:deposits:{secrets.token_hex(4)}"  # a stream of this run's own
    dead_letters = f"{stream}:dead-letters"
    try:
        async with tether.Runtime(DB) as rt:
            await rt.spawn(Account, "acct-1")
            await rt.spawn(Account, "acct-2")

            # The producer: four deposits and two messages that can never be stored.
            for account, amount in [("acct-1", 500), ("acct-2", 70), ("acct-1", 25), ("acct-2", 5)]:
                await client.xadd(stream, deposit(account, amount))
            await client.xadd(stream, {"payload": "{not json"})
            await client.xadd(stream, deposit("acct-9", 1_000))

            bridge = RedisStreamsBridge(
                rt,
                client,
                stream=stream,
                group="bridge",
                consumer="worker-b",
                decode=decode,
                claim_idle=0.1,
            )

            # A first consumer takes two entries, tells them, and dies before XACK.
            await client.xgroup_create(stream, "bridge", id="0")
            reply: Any = await client.xreadgroup("bridge", "worker-a", {stream: ">"}, count=2)
            for entry_id, fields in reply[0][1]:
                body = json.loads(fields[b"payload"])
                await rt.ref(body["session"]).tell(
                    Deposit(amount=body["message"]["amount"]),
                    dedup_key=bridge.dedup_key(entry_id.decode()),  # the entry id, as the bridge
                )
            pending: Any = await client.xpending(stream, "bridge")
            print(f"worker-a told 2 deposits and died before XACK: {pending['pending']} pending")

            # The bridge claims what worker-a left (idle > claim_idle), then reads the rest.
            await anyio.sleep(0.2)
            stats = await bridge.drain()
            print(
                f"bridge: {stats.received} received ({stats.redelivered} claimed from worker-a), "
                f"{stats.stored} stored, {stats.dead_lettered} dead-lettered"
            )

            for account in ("acct-1", "acct-2"):
                balance = await rt.ref(account).ask(GetBalance(), timeout=10)
                print(f"{account}: balance {balance}")  # 525 and 75: each deposit once
            pending = await client.xpending(stream, "bridge")
            print(f"pending after the bridge: {pending['pending']}")
            letters: Any = await client.xrange(dead_letters)
            for _, fields in letters:
                reason = fields[b"tether-reason"].decode()
                print(f"dead letter {fields[b'tether-source-id'].decode()}: {reason}")
    finally:
        await client.delete(stream, dead_letters)
        await client.aclose()


if __name__ == "__main__":
    fresh_store()
    anyio.run(main)
