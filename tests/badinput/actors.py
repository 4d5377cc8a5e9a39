"""Actors, tools and models for the bad-input tests (module level: recovery imports them)."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec

import tether
from tether.testing import ScriptedModel

# -- a ledger actor ------------------------------------------------------------------------------


class Add(tether.Message):
    amount: int


class Boom(tether.Message):
    """Persist +1000, then raise while ``FAILS[key]`` is below ``times``."""

    key: str
    times: int


class Nap(tether.Message):
    seconds: float


class Log(tether.Message):
    pass


class Blob(tether.Message):
    data: bytes = b""


class Anything(tether.Message):
    value: Any = None


class Stranger(tether.Message):
    """A message no actor here accepts."""

    amount: int = 0


class Grow(tether.Message):
    """Persist an event of ``size`` bytes (it needs new pages in the store)."""

    size: int


class Added(tether.Event):
    amount: int


class Padded(tether.Event):
    data: bytes


class LedgerState(msgspec.Struct):
    log: list[int] = msgspec.field(default_factory=list)


FAILS: dict[str, int] = {}


class Ledger(tether.Actor[LedgerState]):
    initial_state = LedgerState()

    def apply(self, state: LedgerState, event: Added | Padded) -> LedgerState:
        amount = event.amount if isinstance(event, Added) else len(event.data)
        return LedgerState(log=[*state.log, amount])

    async def handle(
        self, msg: Add | Boom | Nap | Log | Blob | Anything | Grow
    ) -> list[int] | None:
        match msg:
            case Add(amount=a):
                self.persist(Added(amount=a))
            case Boom(key=k, times=n):
                self.persist(Added(amount=1000))
                if FAILS.get(k, 0) < n:
                    FAILS[k] = FAILS.get(k, 0) + 1
                    raise RuntimeError(f"boom {k}")
            case Nap(seconds=t):
                await anyio.sleep(t)
            case Log():
                return self.state.log
            case Blob(data=d):
                self.persist(Added(amount=len(d)))
            case Anything():
                self.persist(Added(amount=1))
            case Grow(size=n):
                self.persist(Padded(data=b"p" * n))
        return None


def fold(payloads: list[bytes]) -> list[int]:
    """The fold of a Ledger journal, decoded straight from the stored payloads (I3)."""
    decoder = msgspec.msgpack.Decoder(Added | Padded)
    events = [decoder.decode(p) for p in payloads]
    return [e.amount if isinstance(e, Added) else len(e.data) for e in events]


# -- effects -------------------------------------------------------------------------------------

# Every call the tools below receive: (tool, idempotency key or args).
CALLS: list[tuple[str, str]] = []
# order id -> transient failures still to raise before `pay` succeeds
TRANSIENT: dict[str, int] = {}
# order ids whose next `ship` call times out (an ambiguous outcome: quarantined)
AMBIGUOUS: set[str] = set()


@tether.tool(
    recovery="retry", breaker=None, retry=tether.RetryPolicy(max_attempts=3, initial_delay=0)
)
async def pay(order_id: str, cents: int, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    """Pay an order (honors idempotency keys)."""
    CALLS.append(("pay", idempotency_key))
    left = TRANSIENT.get(order_id, 0)
    if left:
        TRANSIENT[order_id] = left - 1
        raise tether.TransientToolError("pay", "503 service unavailable", status_code=503)
    return f"paid {cents} for {order_id}"


@tether.tool(breaker=None, retry=tether.RetryPolicy(max_attempts=1))
async def ship(order_id: str, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    """Ship an order (quarantined when its outcome is unknown)."""
    CALLS.append(("ship", idempotency_key))
    if order_id in AMBIGUOUS:
        AMBIGUOUS.discard(order_id)
        raise TimeoutError("the carrier did not answer")
    return f"shipped {order_id}"


@tether.tool(recovery="retry", breaker=None, requires_approval=True)
async def wire(to: str, cents: int, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    """Wire money: always held for a person."""
    CALLS.append(("wire", idempotency_key))
    return f"wired {cents} to {to}"


class Pay(tether.Message):
    order_id: str
    cents: int


class Ship(tether.Message):
    order_id: str


class Wire(tether.Message):
    to: str
    cents: int


class Outcome(tether.Event):
    text: str


class ShopState(msgspec.Struct):
    outcomes: list[str] = msgspec.field(default_factory=list)


class Shop(tether.Actor[ShopState]):
    initial_state = ShopState()
    approval_policy = tether.ApprovalPolicy(timeout=3600)

    def apply(self, state: ShopState, event: Outcome) -> ShopState:
        return ShopState(outcomes=[*state.outcomes, event.text])

    async def handle(self, msg: Pay | Ship | Wire | Log) -> list[str] | str:
        text: str
        match msg:
            case Pay(order_id=o, cents=c):
                try:
                    text = await self.effect(pay, order_id=o, cents=c)
                except tether.ToolFailed as exc:
                    text = f"pay {o} failed: {exc.error}"
            case Ship(order_id=o):
                try:
                    text = await self.effect(ship, order_id=o)
                except tether.EffectAborted as exc:
                    text = f"ship {o} aborted: {exc.reason}"
            case Wire(to=t, cents=c):
                try:
                    text = await self.effect(wire, to=t, cents=c)
                except tether.ApprovalRejected as exc:
                    text = f"wire {t} rejected: {exc.reason}"
            case Log():
                return self.state.outcomes
        self.persist(Outcome(text=text))
        return text


# -- agent sessions fed bad decisions ------------------------------------------------------------

LOOKUPS: list[str] = []


@tether.tool(recovery="retry", breaker=None)
async def lookup(order_id: str, verbose: bool = False) -> str:
    """Look an order up by id."""
    LOOKUPS.append(order_id)
    return f"order {order_id} is delivered"


class Script:
    """A model whose decisions are set per test (any object, right or wrong)."""

    def __init__(self) -> None:
        self.lines: list[Any] = []
        self.requests: list[tether.ModelRequest] = []

    async def decide(self, request: tether.ModelRequest) -> Any:
        self.requests.append(request)
        if request.decisions < len(self.lines):
            return self.lines[request.decisions]
        return tether.FinalAnswer(text="out of script")


SCRIPT = Script()


class Clerk(tether.AgentSession):
    tools = [lookup]
    model = SCRIPT
    loop_policy = None


class FixedClerk(tether.AgentSession):
    """Corrects itself after one bad call (for the 'fed back once' rule)."""

    tools = [lookup]
    model = ScriptedModel(
        [
            tether.ToolCall(tool="lookup", args={"order": "42"}),  # unknown field
            tether.ToolCall(tool="lookup", args={"order_id": "42"}),
            tether.ToolCall(tool="lookup", args={"order_id": ["42"]}),  # wrong type
            tether.ToolCall(tool="lookup", args={"order_id": "43"}),
            tether.FinalAnswer(text="both delivered"),
        ]
    )
    loop_policy = None


# -- a relay (sends from inside a handler) -------------------------------------------------------


class RelayBlob(tether.Message):
    size: int


class Relay(tether.Actor[LedgerState]):
    initial_state = LedgerState()

    def apply(self, state: LedgerState, event: Added) -> LedgerState:
        return LedgerState(log=[*state.log, event.amount])

    async def handle(self, msg: RelayBlob | Log) -> list[int] | None:
        if isinstance(msg, Log):
            return self.state.log
        self.persist(Added(amount=msg.size))
        await self.ref("sink").tell(Blob(data=b"z" * msg.size))
        return None


# -- guards whose own records are damaged ------------------------------------------------------


@tether.tool(recovery="retry", breaker="external_api")
async def find(x: int) -> int:
    return x + 1


class Find(tether.Message):
    x: int


class Researcher(tether.Actor[LedgerState]):
    """Every call goes through the breaker of `find` and the session's loop detector."""

    initial_state = LedgerState()
    loop_policy = tether.LoopPolicy()

    def apply(self, state: LedgerState, event: Added | Padded) -> LedgerState:
        return state

    async def handle(self, msg: Find) -> int:
        found: int = await self.effect(find, x=msg.x)
        return found


# -- numbers beyond 64 bits ----------------------------------------------------------------------


class Sum(tether.Message):
    amount: int


class Total(tether.Message):
    pass


class Summed(tether.Event):
    amount: int


class SumState(msgspec.Struct):
    total: int = 0


class Summer(tether.Actor[SumState]):
    """Its total may outgrow 64 bits (msgpack's ints) while every event still fits."""

    initial_state = SumState()

    def __init__(self, start: int = 0) -> None:
        self.start = start

    def apply(self, state: SumState, event: Summed) -> SumState:
        return SumState(total=state.total + event.amount)

    async def handle(self, msg: Sum | Total) -> str | None:
        if isinstance(msg, Total):
            return str(self.state.total)
        self.persist(Summed(amount=msg.amount))
        return None


# -- misuse of the actor API inside a handler ----------------------------------------------------


class StopWith(tether.Message):
    """Call ``self.stop(reason)`` with ``reason`` as given (None, a number: misuse)."""

    reason: Any = None


class Forgetful(tether.Actor[LedgerState]):
    """Its apply forgets to return the new state; StopWith stops it with the given reason."""

    initial_state = LedgerState()

    def apply(self, state: LedgerState, event: Added) -> LedgerState:
        state.log.append(event.amount)
        return None  # type: ignore[return-value]  # the mistake under test

    async def handle(self, msg: Add | StopWith | Log) -> list[int] | None:
        match msg:
            case Add(amount=a):
                self.persist(Added(amount=a))
            case StopWith(reason=r):
                self.stop(r)
            case Log():
                return self.state.log
        return None


# -- persist misused -----------------------------------------------------------------------------


class Misuse(tether.Message):
    what: str  # "dict", "stranger" (an event apply does not fold) or "ok"


class Unfolded(tether.Event):
    """An event no apply here declares."""

    n: int = 0


class Misuser(tether.Actor[SumState]):
    initial_state = SumState()

    def apply(self, state: SumState, event: Summed) -> SumState:
        return SumState(total=state.total + event.amount)

    async def handle(self, msg: Misuse) -> int:
        if msg.what == "dict":
            self.persist({"amount": 1})  # type: ignore[arg-type]
        elif msg.what == "stranger":
            self.persist(Unfolded(n=1))
        else:
            self.persist(Summed(amount=1))
        return self.state.total


class Fib(tether.Message):
    pass


class Fibber(tether.Actor[SumState]):
    """Declares a str reply and returns an int: msgspec does not check a reply when encoding."""

    initial_state = SumState()

    async def handle(self, msg: Fib) -> str:
        return 5  # type: ignore[return-value]


# -- documents nested too deep, results too large ------------------------------------------------

ARCHIVED: list[Any] = []  # every document `archive` or `publish` really received


def nested(levels: int) -> Any:
    """A list ``levels`` lists deep (built in a loop: no recursion)."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


@tether.tool(recovery="retry", breaker=None)
async def archive(doc: Any, idempotency_key: str = tether.RUNTIME_KEY) -> int:
    ARCHIVED.append(doc)
    return len(ARCHIVED)


@tether.tool(recovery="retry", breaker=None, requires_approval=True)
async def publish(doc: Any, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    ARCHIVED.append(doc)
    return "published"


# tool name -> how many bytes of text its next call returns
RETURNS: dict[str, int] = {}


@tether.tool(recovery="retry", breaker=None)
async def read_page(url: str, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    """Read a web page (may be anything, of any size)."""
    return "p" * RETURNS.get("read_page", 10)


@tether.tool(breaker=None)
async def render_report(title: str) -> str:
    """Render a report (its receiver ignores keys: quarantined when in doubt)."""
    return "r" * RETURNS.get("render_report", 10)


class Archive(tether.Message):
    levels: int  # the handler builds a document this deep (a message could not carry it)


class Publish(tether.Message):
    doc: Any = None


class Render(tether.Message):
    tool: str  # "read_page" or "render_report"


class Archivist(Shop):
    """A shop's clerk that files documents and reports (its outcomes kept as the shop's)."""

    async def handle(self, msg: Archive | Publish | Render | Log) -> list[str] | str:  # type: ignore[override]
        text: str
        match msg:
            case Archive(levels=n):
                try:
                    text = f"archived #{await self.effect(archive, doc=nested(n))}"
                except tether.ToolInputError as exc:
                    text = f"refused: {exc.problem}"
            case Publish(doc=d):
                text = await self.effect(publish, doc=d)
            case Render(tool=name):
                tool = read_page if name == "read_page" else render_report
                args = {"url": "https://example.com"} if name == "read_page" else {"title": "q3"}
                try:
                    text = str(await self.effect(tool, **args))
                except tether.ToolFailed as exc:
                    text = f"failed: {exc.error}"
            case Log():
                return self.state.outcomes
        self.persist(Outcome(text=text))
        return text if len(text) <= 500 else f"{text[:100]}… ({len(text)} chars)"


class Reader(tether.AgentSession):
    """A clerk that can also read pages (of any size)."""

    tools = [lookup, read_page]
    model = SCRIPT
    loop_policy = None
