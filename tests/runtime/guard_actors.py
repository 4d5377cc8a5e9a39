"""Tools and actors for the guard tests (module level: the runtime imports them)."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import msgspec

import tether

CALLS: list[tuple[str, Any]] = []
FAILING: dict[str, bool] = {"flaky": True, "brittle": True}


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


# Opens after 2 failures in a row, for 30 s: the second failed attempt of a call that retries
# three times opens it, so the breaker refuses the call's third attempt.
TRIPS_AFTER_TWO = tether.BreakerPolicy(failure_threshold=2, window_size=2, open_duration=30)


@tether.tool(
    recovery="retry",
    retry=tether.RetryPolicy(max_attempts=3, initial_delay=0),
    breaker=TRIPS_AFTER_TWO,
)
async def brittle(n: int, idempotency_key: str = tether.RUNTIME_KEY) -> int:
    """An API that is down while FAILING['brittle'] is set; a call is tried three times."""
    CALLS.append(("brittle", n))
    if FAILING["brittle"]:
        raise tether.TransientToolError("brittle", "503 Service Unavailable", status_code=503)
    return n


@tether.tool(breaker=TRIPS_AFTER_TWO)
async def wobbly(n: int) -> int:
    """An API that does not answer in time: whether the call was carried out is not known,
    so it is held for a person (quarantined). Two such calls open its breaker."""
    CALLS.append(("wobbly", n))
    raise TimeoutError("no answer within the deadline")


# A breaker that journals every call (a rate over a time window: each success is in the rate's
# denominator) and never trips (no call fails): its journal grows with every call.
EVERY_CALL_COUNTS = tether.BreakerPolicy(
    failure_threshold=None, window="time", window_size=3600, failure_rate=1.0
)


@tether.tool(breaker=EVERY_CALL_COUNTS)
async def steady(n: int) -> int:
    """An API that always answers (its receipt, and its breaker's events, commit at once)."""
    return n


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
    """Calls an API (``api``, the flaky one); tells what happened, as an agent would tell its
    model."""

    initial_state = Notes()
    api: ClassVar[tether.Tool[..., int]] = flaky

    def apply(self, state: Notes, event: Noted) -> Notes:
        return Notes(lines=[*state.lines, event.line])

    async def handle(self, msg: Call | Ping) -> str:
        if isinstance(msg, Ping):
            return "pong"
        try:
            line = f"ok {await self.effect(self.api, n=msg.n)}"
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
        line = f"ok {await self.effect(self.api, n=msg.n)}"
        self.persist(Noted(line=line))
        return line


class SteadyCaller(Caller):
    api = steady


class BrittleCaller(Caller):
    """The breaker refuses the third attempt of its call; it tells, and its step commits."""

    api = brittle


class StubbornBrittleCaller(Stubborn):
    """The same refusal escapes its handler: the step waits, uncommitted."""

    api = brittle


class WobblyCaller(Caller):
    api = wobbly


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
