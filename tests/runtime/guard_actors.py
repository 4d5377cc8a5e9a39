"""Tools and actors for the guard tests (module level: the runtime imports them)."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec

import tether

CALLS: list[tuple[str, Any]] = []
FAILING: dict[str, bool] = {"flaky": True}


@tether.tool(recovery="retry", retry=tether.RetryPolicy(max_attempts=1), breaker="external_api")
async def flaky(n: int, idempotency_key: str = tether.RUNTIME_KEY) -> int:
    """An external API that is down while FAILING['flaky'] is set."""
    CALLS.append(("flaky", n))
    if FAILING["flaky"]:
        raise tether.TransientToolError("flaky", "503 Service Unavailable", status_code=503)
    return n


@tether.tool(recovery="retry", breaker=None)
async def search(query: str) -> str:
    CALLS.append(("search", query))
    return f"results for {query}"


class Call(tether.Message):
    n: int


class Search(tether.Message):
    query: str


class Ping(tether.Message):
    pass


class Noted(tether.Event):
    line: str


class Notes(msgspec.Struct):
    lines: list[str] = msgspec.field(default_factory=list)


class Caller(tether.Actor[Notes]):
    """Calls the flaky API; tells what happened, as an agent would tell its model."""

    initial_state = Notes()

    def apply(self, state: Notes, event: Noted) -> Notes:
        return Notes(lines=[*state.lines, event.line])

    async def handle(self, msg: Call | Ping) -> str:
        if isinstance(msg, Ping):
            return "pong"
        try:
            line = f"ok {await self.effect(flaky, n=msg.n)}"
        except tether.ToolUnavailable as exc:
            line = f"unavailable: {exc.reason} (retry_in={exc.retry_in:.0f})"
        except tether.ToolFailed as exc:
            line = f"failed: {exc.error}"
        self.persist(Noted(line=line))
        return line


class Stubborn(Caller):
    """Does not catch ToolUnavailable: its message must wait, not burn its attempts."""

    async def handle(self, msg: Call | Ping) -> str:
        if isinstance(msg, Ping):
            return "pong"
        line = f"ok {await self.effect(flaky, n=msg.n)}"
        self.persist(Noted(line=line))
        return line


class Researcher(tether.Actor[Notes]):
    """Searches; a loop detection is fed back as the result, as an agent would."""

    initial_state = Notes()
    loop_policy = tether.LoopPolicy(repeat=3)

    def apply(self, state: Notes, event: Noted) -> Notes:
        return Notes(lines=[*state.lines, event.line])

    async def handle(self, msg: Search | Ping) -> str:
        if isinstance(msg, Ping):
            return "pong"
        try:
            line: str = await self.effect(search, query=msg.query)
        except tether.LoopDetected as exc:
            line = f"loop {exc.pattern}/{exc.response}: {exc.detail}"
        self.persist(Noted(line=line))
        return line


class EscalatingResearcher(Researcher):
    loop_policy = tether.LoopPolicy(repeat=3, on_repeat="escalate")


class ShortMemoryResearcher(Researcher):
    """Keeps only 6 recent calls: a long ledger is mostly older than its detector's memory."""

    loop_policy = tether.LoopPolicy(
        repeat=3, cycle_period=2, cycle_repeats=2, window=None, no_progress=None, history=6
    )


class WaryCaller(Caller):
    """After 2 failures of a tool in a row, its next call waits for a person."""

    escalate_after_failures = 2


# A breaker that journals every call (a rate over a time window: each success is in the rate's
# denominator) and never trips (no call fails): its journal grows with every call.
EVERY_CALL_COUNTS = tether.BreakerPolicy(
    failure_threshold=None, window="time", window_size=3600, failure_rate=1.0
)


@tether.tool(breaker=EVERY_CALL_COUNTS)
async def steady(n: int) -> int:
    """An API that always answers (its receipt, and its breaker's events, commit at once)."""
    return n


class SteadyCaller(Caller):
    """Calls the steady API, journaling nothing of its own."""

    async def handle(self, msg: Call | Ping) -> str:
        if isinstance(msg, Ping):
            return "pong"
        return f"ok {await self.effect(steady, n=msg.n)}"


class Hold(tether.Message):
    line: str


# Set by the test: "held" when a Holder's handler has persisted, "go" to let its step end.
SIGNALS: dict[str, anyio.Event] = {}


class Holder(tether.Actor[Notes]):
    """Persists a line, then waits for the test's go before its step commits: events appended
    to its journal meanwhile (``append_events``, as a guard's are) take numbers first."""

    initial_state = Notes()

    def apply(self, state: Notes, event: Noted) -> Notes:
        return Notes(lines=[*state.lines, event.line])

    async def handle(self, msg: Hold | Ping) -> list[str]:
        if isinstance(msg, Hold):
            self.persist(Noted(line=msg.line))
            SIGNALS["held"].set()
            await SIGNALS["go"].wait()
        return self.state.lines
