"""A dependency, its tools and a client actor for the ported breaker suites (module level: the
runtime imports the actor by its class path).

``SERVICE`` is the dependency's own record of what it was asked and how it answers: tests
check it, not tether's account of the calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

import tether


class Service:
    """A dependency that answers per tool: ``"ok"``, ``"fail"`` (a 503) or ``"block"`` (waits
    for ``release``, then answers ``"ok"``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.mode: dict[str, str] = {}
        self.released = asyncio.Event()

    def clear(self) -> None:
        """Forget every call and answer. A new asyncio event (bound to no loop until awaited):
        each test runs on its own event loop."""
        self.calls, self.mode, self.released = [], {}, asyncio.Event()

    def numbers(self, tool: str) -> list[Any]:
        """The ``n`` of each call the dependency received for ``tool``, in order."""
        return [args.get("n") for name, args in self.calls if name == tool]

    async def answer(self, tool: str, args: dict[str, Any]) -> int:
        self.calls.append((tool, args))
        mode = self.mode.get(tool, "fail")
        if mode == "block":
            await self.released.wait()
        elif mode == "fail":
            await anyio.lowlevel.checkpoint()  # concurrent callers interleave, as on a network
            raise tether.TransientToolError(tool, "503 Service Unavailable", status_code=503)
        return int(args.get("n", 0))


SERVICE = Service()
_ONCE = tether.RetryPolicy(max_attempts=1)


def _guarded(name: str, breaker: tether.BreakerPolicy | None) -> tether.Tool:
    async def call(n: int) -> int:
        """Ask the dependency; it answers as ``SERVICE.mode[name]`` says."""
        return await SERVICE.answer(name, {"n": n})

    return tether.Tool(call, name=name, recovery="retry", retry=_ONCE, breaker=breaker)


def _consecutive(failures: int, **policy: Any) -> tether.BreakerPolicy:
    """pybreaker's ``fail_max``: that many failures in a row trip."""
    return tether.BreakerPolicy(failure_threshold=failures, window_size=failures, **policy)


TOOLS: dict[str, tether.Tool] = {
    t.name: t
    for t in (
        _guarded("fail_max3", _consecutive(3, open_duration=30)),  # pybreaker(fail_max=3)
        _guarded("fail_max2", _consecutive(2, open_duration=10)),
        _guarded("success_threshold2", _consecutive(3, open_duration=30, half_open_probes=2)),
        _guarded("fail_max5", _consecutive(5, open_duration=30)),
        _guarded("fail_max100", _consecutive(100, open_duration=30)),
        _guarded(
            "rated",  # successes are recorded: a time window judged by rate
            tether.BreakerPolicy(
                failure_threshold=None,
                failure_rate=0.5,
                window="time",
                window_size=3600,
                minimum_calls=1000,
            ),
        ),
        _guarded("fail_max1", _consecutive(1, open_duration=10)),
        _guarded("unguarded", None),
    )
}


@tether.tool(recovery="retry", retry=_ONCE, breaker=_consecutive(3))
async def lookup(key: str, default: str = "none") -> str:
    """Look ``key`` up in the dependency."""
    await SERVICE.answer("lookup", {"key": key, "default": default})
    return f"{key}={default}"


@tether.tool(recovery="retry", retry=_ONCE, breaker=_consecutive(3))
async def ping() -> str:
    """A call with no arguments."""
    await SERVICE.answer("ping", {})
    return "pong"


class Use(tether.Message):
    tool: str
    n: int


class Lookup(tether.Message):
    key: str
    default: str


class LookupByPosition(tether.Message):
    """``Lookup``, its arguments passed to the tool by position."""

    key: str
    default: str


class Ping(tether.Message):
    pass


class Told(tether.Event):
    line: str


class Lines(msgspec.Struct):
    lines: list[str] = msgspec.field(default_factory=list)


class Client(tether.Actor[Lines]):
    """Calls a tool of ``TOOLS`` and says what happened, as an agent would tell its model:
    ``ok <n>``, ``failed: <error> (cause: <exception type>)`` or ``unavailable: <why>
    (retry_in=<s>)``."""

    initial_state = Lines()

    def apply(self, state: Lines, event: Told) -> Lines:
        return Lines(lines=[*state.lines, event.line])

    async def handle(self, msg: Use | Lookup | LookupByPosition | Ping) -> str:
        try:
            if isinstance(msg, Lookup):
                line = str(await self.effect(lookup, key=msg.key, default=msg.default))
            elif isinstance(msg, LookupByPosition):
                line = str(await self.effect(lookup, msg.key, msg.default))
            elif isinstance(msg, Ping):
                line = str(await self.effect(ping))
            else:
                line = f"ok {await self.effect(TOOLS[msg.tool], n=msg.n)}"
        except tether.ToolUnavailable as exc:
            line = f"unavailable: {exc.reason} (retry_in={exc.retry_in:.0f})"
        except tether.ToolFailed as exc:
            line = f"failed: {exc.error} (cause: {type(exc.__cause__).__name__})"
        self.persist(Told(line=line))
        return line
