"""The actors the bridge tests feed, and the bridge process the crash tests SIGKILL.

Run as ``python -m tests.bridges.programs CONFIG_JSON`` from the repository root. The program
opens the store, spawns the sessions, runs a Redis Streams or JetStream bridge over the broker
until everything there is handled, asks every session for its tally and reports, one
``key=value`` line at a time on stdout:

    ready
    stats={"received": ..., "redelivered": ..., "stored": ..., "dead_lettered": ...}
    tallies={"s-0": [0, 2, ...], ...}

``kill`` in the config makes it SIGKILL itself at one point, through the broker client or the
decoder, exactly as a crash there would: ``before-tell`` (decoding the message with ``i ==
kill_at``), ``before-ack`` (the first acknowledgement, before it is sent) or ``after-ack``
(once the first acknowledgement is confirmed by the broker).

The actor classes live here, at module level, so that their stored class paths read
``tests.bridges.programs:...`` whichever process recovers them (see tests/chaos/programs.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
from typing import Any, cast

import anyio
import msgspec
import redis.asyncio
import structlog
from nats.aio.client import Client as NatsClient

import tether
from tether.bridges import Inbound, Routed, json_envelope
from tether.bridges.nats_jetstream import JetStreamBridge
from tether.bridges.redis_streams import RedisStreamsBridge


class Add(tether.Message):
    i: int


class GetTally(tether.Message):
    pass


class Unwanted(tether.Message):
    """A type the decoder knows and no Tally accepts."""


class Added(tether.Event):
    i: int


class TallyState(msgspec.Struct):
    seen: list[int] = msgspec.field(default_factory=list)


class Tally(tether.Actor[TallyState]):
    """Journals every ``Add`` it handles: its journal is the list of messages it received."""

    initial_state = TallyState()

    def apply(self, state: TallyState, event: Added) -> TallyState:
        return TallyState(seen=[*state.seen, event.i])

    async def handle(self, msg: Add | GetTally) -> list[int] | None:
        match msg:
            case Add(i=i):
                self.persist(Added(i=i))
            case GetTally():
                return self.state.seen
        return None


decode = json_envelope(Add, GetTally, Unwanted)


def payload(session: str, i: int) -> bytes:
    """What a producer puts on the broker for ``Add(i)`` to ``session``."""
    return json.dumps({"session": session, "message": {"type": "Add", "i": i}}).encode()


def envelope(session: str, message: dict[str, Any]) -> bytes:
    """Any JSON envelope, well-formed or not, for the poison tests."""
    return json.dumps({"session": session, "message": message}).encode()


async def journal(rt: tether.Runtime, session: str) -> list[int]:
    """The session's journal, once it has handled everything told to it so far."""
    seen: list[int] = await rt.ref(session).ask(GetTally(), timeout=10)
    rows = await rt.store.load_journal(session, 0, 1000)
    stored = [msgspec.msgpack.decode(r.payload, type=Added).i for r in rows]
    if stored != seen:  # the folded state is the journal's (I3)
        raise AssertionError(f"{session}: journal {stored} but state {seen}")
    return stored


def report(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class KillingRedis(redis.asyncio.Redis):
    """A Redis client that SIGKILLs its process at its first ``XACK``, before or after it."""

    kill: str | None = None

    async def xack(self, *args: Any, **kwargs: Any) -> Any:
        if self.kill == "before-ack":
            die()
        acked = await super().xack(*args, **kwargs)
        if self.kill == "after-ack":
            die()
        return acked


class KillingNats(NatsClient):
    """A NATS client that SIGKILLs its process at its first JetStream ack request."""

    kill: str | None = None

    async def request(self, subject: str, *args: Any, **kwargs: Any) -> Any:
        is_ack = subject.startswith("$JS.ACK.")
        if is_ack and self.kill == "before-ack":
            die()
        reply = await super().request(subject, *args, **kwargs)
        if is_ack and self.kill == "after-ack":
            die()
        return reply


async def bridge_program(config_json: str) -> None:
    config: dict[str, Any] = json.loads(config_json)
    kill: str | None = config.get("kill")
    kill_at: int | None = config.get("kill_at")

    def decoding(inbound: Inbound) -> Routed:
        routed = decode(inbound)
        if (
            kill == "before-tell"
            and isinstance(routed.message, Add)
            and routed.message.i == kill_at
        ):
            die()
        return routed

    async with tether.Runtime(config["db"], lease_ttl=1.0, poll_interval=0.05) as rt:
        for session in config["sessions"]:
            await rt.spawn(Tally, session)
        report("ready")
        if config["broker"] == "redis":
            client = cast(KillingRedis, KillingRedis.from_url(config["url"]))
            client.kill = kill
            bridge = RedisStreamsBridge(
                rt,
                client,
                stream=config["stream"],
                group=config["group"],
                consumer=config["consumer"],
                decode=decoding,
                batch_size=config["batch_size"],
                claim_idle=config["claim_idle"],
            )
            stats = await bridge.drain()
            await client.aclose()
        else:
            nc = KillingNats()
            nc.kill = kill
            await nc.connect(servers=[config["url"]])
            js = nc.jetstream()
            bridge_js = JetStreamBridge(
                rt,
                js,
                stream=config["stream"],
                durable=config["durable"],
                decode=decoding,
                dead_letter_subject=config["dead_subject"],
                batch_size=config["batch_size"],
                ack_wait=config["ack_wait"],
            )
            # Messages a killed run left unacknowledged come back once their ack_wait is over:
            # the drain waits for them (it ends when the consumer holds none, delivered or not).
            with anyio.fail_after(60):
                stats = await bridge_js.drain(idle=0.2)
            await nc.close()
        report("stats=" + json.dumps(dataclasses.asdict(stats)))
        tallies = {s: await rt.ref(s).ask(GetTally(), timeout=30) for s in config["sessions"]}
        report("tallies=" + json.dumps(tallies))


def configure_logging() -> None:
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(default=repr),
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def main(argv: list[str]) -> None:
    configure_logging()
    (config_json,) = argv
    anyio.run(bridge_program, config_json)


if __name__ == "__main__":
    from tests.bridges import programs  # the same code, under the name recovery imports

    programs.main(sys.argv[1:])
