"""An actor whose handler waits between two tool calls, and a message that interrupts it
(module level: the runtime imports them)."""

from __future__ import annotations

import anyio
import msgspec

import tether

CALLS: list[str] = []
BETWEEN = {"entered": anyio.Event(), "release": anyio.Event()}


def reset() -> None:
    CALLS.clear()
    BETWEEN["entered"] = anyio.Event()
    BETWEEN["release"] = anyio.Event()


@tether.tool(recovery="retry")
async def first(n: int, idempotency_key: str = tether.RUNTIME_KEY) -> int:
    CALLS.append("first")
    return n


@tether.tool(recovery="retry")
async def second(n: int, idempotency_key: str = tether.RUNTIME_KEY) -> int:
    CALLS.append("second")
    return n


class TwoCalls(tether.Message):
    n: int


class Halt(tether.Message):
    """Interrupts the tool call the running step waits on, as tether.CancelTask does."""

    interrupts = True


class Outcome(tether.Event):
    text: str


class Log(msgspec.Struct):
    lines: list[str] = msgspec.field(default_factory=list)


class Worker(tether.Actor[Log]):
    """Calls ``first``, waits (not in a tool call) until released, then calls ``second``."""

    initial_state = Log()

    def apply(self, state: Log, event: Outcome) -> Log:
        return Log(lines=[*state.lines, event.text])

    async def handle(self, msg: TwoCalls | Halt) -> list[str]:
        if isinstance(msg, TwoCalls):
            await self.effect(first, n=msg.n)
            BETWEEN["entered"].set()
            await BETWEEN["release"].wait()
            try:
                text = f"second: {await self.effect(second, n=msg.n)}"
            except tether.EffectInterrupted as exc:
                text = f"second: {'made' if exc.made else 'not made'} ({exc.why})"
            self.persist(Outcome(text=text))
        else:
            self.persist(Outcome(text="halted"))
        return self.state.lines
