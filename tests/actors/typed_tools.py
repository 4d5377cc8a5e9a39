"""Tools declared with Annotated metadata, docstrings, pydantic models and explicit JSON
schemas, and an actor that calls them (module level: the runtime imports it by name)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pydantic

import tether

# Every call a tool below receives, in order: (tool, arguments). Tests reset it.
CALLS: list[tuple[str, dict[str, Any]]] = []


@tether.tool(recovery="retry")
async def refund(
    order_id: Annotated[str, "the order to refund"],
    amount_cents: Annotated[int, msgspec.Meta(ge=1, description="cents to give back, at least 1")],
    idempotency_key: str = tether.RUNTIME_KEY,
) -> str:
    """Refund part of an order.

    Args:
        order_id: overridden by the Annotated text.
        amount_cents: overridden by the Meta description.
    """
    CALLS.append(("refund", {"order_id": order_id, "amount_cents": amount_cents}))
    return f"refunded {amount_cents} on {order_id} ({idempotency_key})"


@tether.tool
async def google_style(order_id: str, note: str = "") -> str:
    """Look an order up.

    Args:
        order_id (str): the order's id, as printed
            on the receipt.
        note: anything the agent wants logged.

    Returns:
        The order's status.
    """
    return order_id


@tether.tool
async def numpy_style(order_id: str, limit: int = 10) -> str:
    """Look an order up.

    Parameters
    ----------
    order_id : str
        the order's id.
    limit : int, optional
        how many lines to return.

    Returns
    -------
    str
    """
    return order_id


@tether.tool
async def sphinx_style(order_id: str) -> str:
    """Look an order up.

    :param order_id: the order's id.
    :returns: its status.
    """
    return order_id


class Address(pydantic.BaseModel):
    city: str
    postcode: Annotated[str, pydantic.Field(pattern=r"^\d{5}$", description="five digits")]


class Unit:
    """Annotated metadata of the application's own, which validation leaves alone."""


class Box(msgspec.Struct):
    grams: int


class Label(pydantic.BaseModel):
    tracking: str
    address: Address
    grams: int


@tether.tool(recovery="retry")
async def ship(
    address: Address, grams: Annotated[int, pydantic.Field(gt=0, description="parcel weight")]
) -> Label:
    """Print a shipping label."""
    CALLS.append(("ship", {"address": address, "grams": grams}))
    return Label(tracking=f"T-{address.postcode}-{grams}", address=address, grams=grams)


@tether.tool(recovery="retry")
async def weigh(grams: Annotated[int, pydantic.Field(gt=0)]) -> dict[str, int]:
    """A plain parameter with a pydantic constraint: pydantic validates it."""
    CALLS.append(("weigh", {"grams": grams}))
    return {"grams": grams}


WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "where"}},
    "required": ["city"],
    "additionalProperties": False,
}


def check_weather_args(args: dict[str, Any]) -> dict[str, Any]:
    """A hand-written validator, as an MCP client would wrap a JSON Schema validator."""
    unknown = sorted(set(args) - {"city"})
    if unknown:
        raise ValueError(f"unknown field `{unknown[0]}`")
    if not isinstance(args.get("city"), str):
        raise ValueError("Expected `str` - at `$.city`")
    return {"city": args["city"].strip()}


async def _weather(**args: Any) -> dict[str, Any]:
    CALLS.append(("weather", dict(args)))
    return {"city": args["city"], "sky": "clear"}


weather = tether.Tool.from_schema(
    _weather,
    name="weather",
    input_schema=WEATHER_SCHEMA,
    validator=check_weather_args,
    description="The weather in a city.",
    recovery="retry",
)


class Call(tether.Message):
    tool: str
    args: dict[str, Any]
    fail_after: bool = False


class Positional(tether.Message):
    pass


class Called(tether.Event):
    result: str


class Log(msgspec.Struct):
    results: list[str] = msgspec.field(default_factory=list)


FAILED_ONCE: set[str] = set()
TOOLS: dict[str, tether.Tool] = {"refund": refund, "ship": ship, "weather": weather, "weigh": weigh}


class Caller(tether.Actor[Log]):
    """Calls the named tool with the given arguments and describes what came back; with
    ``fail_after`` it fails once after the call, so the redelivery replays the result."""

    initial_state = Log()

    def apply(self, state: Log, event: Called) -> Log:
        return Log(results=[*state.results, event.result])

    async def handle(self, msg: Call | Positional) -> str:
        if isinstance(msg, Positional):
            return await self.effect(refund, "o-7", 250)
        try:
            result = await self.effect(TOOLS[msg.tool], **msg.args)
        except tether.ToolInputError as exc:
            return f"input error: {exc}"
        if msg.fail_after and self.id not in FAILED_ONCE:
            FAILED_ONCE.add(self.id)
            raise RuntimeError("fails after the call: the redelivery replays it")
        shown = f"{type(result).__name__}: {result!r}"
        self.persist(Called(result=shown))
        return shown
