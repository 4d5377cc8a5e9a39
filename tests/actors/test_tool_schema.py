"""A tool's input schema: Annotated constraints and descriptions, docstrings, pydantic models,
explicit JSON schemas, and arguments by position; on real SQLite files where a call is made."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest

import tether
from tests.actors import typed_tools as tt
from tests.actors.typed_tools import Call, Caller, Positional

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    tt.CALLS.clear()
    tt.FAILED_ONCE.clear()
    yield
    tt.CALLS.clear()


def properties(t: tether.Tool) -> dict[str, Any]:
    schema = t.spec()["input_schema"]
    assert schema["type"] == "object"
    props: dict[str, Any] = schema["properties"]
    return props


def test_an_annotated_constraint_is_enforced_naming_the_field_and_the_bound() -> None:
    with pytest.raises(tether.ToolInputError) as caught:
        tt.refund.prepare({"order_id": "o1", "amount_cents": -5})
    assert "`$.amount_cents`" in str(caught.value)
    assert ">= 1" in str(caught.value)
    assert tt.refund.prepare({"order_id": "o1", "amount_cents": 1}).kwargs["amount_cents"] == 1


def test_annotated_descriptions_and_constraints_reach_the_models_schema() -> None:
    props = properties(tt.refund)
    assert props["amount_cents"] == {
        "type": "integer",
        "minimum": 1,
        "description": "cents to give back, at least 1",
    }
    assert props["order_id"]["description"] == "the order to refund"  # a plain string
    assert "idempotency_key" not in props


def test_an_explicit_annotated_description_wins_over_the_docstring() -> None:
    props = properties(tt.refund)
    assert "overridden" not in str(props)
    assert tt.refund.description == "Refund part of an order."


@pytest.mark.parametrize("t", [tt.google_style, tt.numpy_style, tt.sphinx_style])
def test_parameter_descriptions_come_from_google_numpy_and_sphinx_docstrings(
    t: tether.Tool,
) -> None:
    props = properties(t)
    assert props["order_id"]["description"].startswith("the order's id")
    # the tool's description is the text before the sections, which the schema now carries
    assert t.description == "Look an order up."


def test_continuation_lines_and_optional_parameters_are_read_whole() -> None:
    assert properties(tt.google_style)["order_id"]["description"] == (
        "the order's id, as printed on the receipt."
    )
    assert properties(tt.google_style)["note"]["description"] == "anything the agent wants logged."
    assert properties(tt.numpy_style)["limit"] == {
        "type": "integer",
        "default": 10,
        "description": "how many lines to return.",
    }


def test_an_explicit_description_argument_still_replaces_the_docstring() -> None:
    async def lookup(order_id: str) -> str:
        """Docstring text.

        Args:
            order_id: the id.
        """
        return order_id

    t = tether.tool(description="Given explicitly.")(lookup)
    assert t.description == "Given explicitly."
    assert properties(t)["order_id"]["description"] == "the id."


async def test_a_call_breaking_an_annotated_constraint_is_refused_and_nothing_is_recorded(
    tmp_path: Path,
) -> None:
    async with tether.Runtime(tmp_path / "t.db", poll_interval=0.02) as rt:
        a = await rt.spawn(Caller, "c1")
        reply = await a.ask(
            Call(tool="refund", args={"order_id": "o1", "amount_cents": -5}), timeout=5
        )
        assert reply.startswith(
            "input error: tool 'refund': invalid arguments: Expected `int` >= 1"
        )
        assert await rt.store.find_effects(actor_id="c1") == []
    assert tt.CALLS == []


# -- pydantic ------------------------------------------------------------------------------------


def test_pydantic_models_are_validated_by_pydantic_naming_the_nested_field() -> None:
    good = {"address": {"city": "Lyon", "postcode": "69001"}, "grams": 300}
    call = tt.ship.prepare(good)
    assert isinstance(call.kwargs["address"], tt.Address)  # the tool receives the model
    assert msgspec.msgpack.decode(call.args_blob) == good  # the ledger holds its JSON form
    with pytest.raises(tether.ToolInputError, match=r"at `\$\.address\.postcode`"):
        tt.ship.prepare({"address": {"city": "Lyon", "postcode": "6900"}, "grams": 300})
    with pytest.raises(tether.ToolInputError, match=r"greater than 0 - at `\$\.grams`"):
        tt.ship.prepare({**good, "grams": 0})
    with pytest.raises(tether.ToolInputError, match=r"not permitted - at `\$\.surprise`"):
        tt.ship.prepare({**good, "surprise": 1})
    with pytest.raises(tether.ToolInputError, match=r"Field required - at `\$\.grams`"):
        tt.ship.prepare({"address": good["address"]})


def test_a_pydantic_constraint_on_a_plain_parameter_is_enforced() -> None:
    with pytest.raises(tether.ToolInputError, match=r"at `\$\.grams`"):
        tt.weigh.prepare({"grams": -1})
    assert properties(tt.weigh)["grams"]["exclusiveMinimum"] == 0


def test_the_models_schema_is_pydantics_with_descriptions_and_definitions() -> None:
    schema = tt.ship.spec()["input_schema"]
    assert schema["required"] == ["address", "grams"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["grams"]["description"] == "parcel weight"
    assert schema["properties"]["address"] == {"$ref": "#/$defs/Address"}
    postcode = schema["$defs"]["Address"]["properties"]["postcode"]
    assert postcode["pattern"] == r"^\d{5}$"
    assert postcode["description"] == "five digits"


async def test_a_pydantic_result_is_recorded_and_replayed_as_the_model(tmp_path: Path) -> None:
    args = {"address": {"city": "Lyon", "postcode": "69001"}, "grams": 300}
    async with tether.Runtime(tmp_path / "t.db", poll_interval=0.02) as rt:
        a = await rt.spawn(Caller, "c1")
        # the handler fails after the call once: the redelivery gets the recorded result
        reply = await a.ask(Call(tool="ship", args=args, fail_after=True), timeout=5)
        [row] = await rt.store.find_effects(actor_id="c1")
    assert reply.startswith("Label: Label(tracking='T-69001-300'")
    assert [name for name, _ in tt.CALLS] == ["ship"]  # called once; the replay decoded it
    assert row.status == "done"
    assert msgspec.msgpack.decode(row.result or b"")["tracking"] == "T-69001-300"


def test_a_result_that_does_not_fit_the_pydantic_type_cannot_be_recorded() -> None:
    with pytest.raises(TypeError, match="tracking"):
        tt.ship.encode_result({"address": {"city": "x", "postcode": "12345"}, "grams": 1})
    with pytest.raises(msgspec.ValidationError, match="grams"):
        tt.ship.decode_result(msgspec.msgpack.encode({"tracking": "t", "address": {}}))


def test_a_struct_beside_a_pydantic_model_is_refused_at_declaration() -> None:
    async def pack(box: tt.Box, address: tt.Address) -> None:
        return None

    with pytest.raises(tether.ConfigError, match="cannot be validated by pydantic"):
        tether.tool(pack)


# -- tools from an explicit JSON schema ---------------------------------------------------------


def test_a_tool_from_a_json_schema_shows_that_schema_and_validates_with_its_validator() -> None:
    assert tt.weather.spec() == {
        "name": "weather",
        "description": "The weather in a city.",
        "input_schema": tt.WEATHER_SCHEMA,
        "requires_approval": False,
    }
    with pytest.raises(tether.ToolInputError, match="unknown field `town`"):
        tt.weather.prepare({"town": "Lyon"})
    call = tt.weather.prepare({"city": " Lyon "})
    assert call.kwargs == {"city": "Lyon"}  # what the validator returned


def test_a_json_schema_tool_is_refused_a_schema_that_is_not_an_object() -> None:
    async def fn(**args: Any) -> None:
        return None

    with pytest.raises(tether.ConfigError, match='"type": "object"'):
        tether.Tool.from_schema(
            fn, name="x", input_schema={"type": "string"}, validator=lambda a: None
        )
    with pytest.raises(tether.ConfigError, match="validator must be callable"):
        tether.Tool.from_schema(
            fn,
            name="x",
            input_schema={"type": "object"},
            validator="strict",  # type: ignore[arg-type]
        )


async def test_a_json_schema_tool_runs_through_the_ledger(tmp_path: Path) -> None:
    async with tether.Runtime(tmp_path / "t.db", poll_interval=0.02) as rt:
        a = await rt.spawn(Caller, "c1")
        reply = await a.ask(Call(tool="weather", args={"city": "Lyon"}, fail_after=True), timeout=5)
        bad = await a.ask(Call(tool="weather", args={"city": 3}), timeout=5)
        [row] = await rt.store.find_effects(actor_id="c1")
    assert reply == "dict: {'city': 'Lyon', 'sky': 'clear'}"
    assert bad == "input error: tool 'weather': invalid arguments: Expected `str` - at `$.city`"
    assert tt.CALLS == [("weather", {"city": "Lyon"})]
    assert row.tool == "weather"


# -- calling ------------------------------------------------------------------------------------


async def test_positional_arguments_to_effect_are_bound_to_the_parameters_by_name(
    tmp_path: Path,
) -> None:
    async with tether.Runtime(tmp_path / "t.db", poll_interval=0.02) as rt:
        a = await rt.spawn(Caller, "c1")
        assert (await a.ask(Positional(), timeout=5)).startswith("refunded 250 on o-7")
    assert tt.CALLS == [("refund", {"order_id": "o-7", "amount_cents": 250})]
    with pytest.raises(tether.ToolInputError, match="3 positional arguments"):
        tt.refund.arguments(("a", 1, "k"), {})
    with pytest.raises(tether.ToolInputError, match="order_id given by position and by name"):
        tt.refund.arguments(("a",), {"order_id": "b"})


async def test_a_direct_call_of_a_keyed_tool_gets_a_fresh_key_not_the_default() -> None:
    first = await tt.refund(order_id="o", amount_cents=1)
    second = await tt.refund(order_id="o", amount_cents=1)
    assert first.startswith("refunded 1 on o (direct-")
    assert first != second
    assert repr(tether.RUNTIME_KEY) == "tether.RUNTIME_KEY"


def test_a_key_parameter_without_a_default_still_receives_the_runtime_key() -> None:
    async def pay(to: str, idempotency_key: str) -> str:
        return idempotency_key

    t = tether.tool(pay)
    assert t.takes_key
    assert "idempotency_key" not in str(t.spec()["input_schema"])


def test_annotated_metadata_msgspec_does_not_know_is_left_alone() -> None:
    async def measure(grams: Annotated[int, tt.Unit(), "weight"]) -> int:
        return grams

    t = tether.tool(measure)
    assert properties(t)["grams"] == {"type": "integer", "description": "weight"}
    assert t.prepare({"grams": 3}).kwargs == {"grams": 3}


def test_tether_and_its_typed_tools_work_without_pydantic_installed() -> None:
    program = """
import sys
sys.modules["pydantic"] = None  # import pydantic now fails, as where it is not installed
from typing import Annotated
import msgspec, tether

@tether.tool
async def refund(amount_cents: Annotated[int, msgspec.Meta(ge=1)]) -> int:
    return amount_cents

print(refund.prepare({"amount_cents": 2}).kwargs)
try:
    refund.prepare({"amount_cents": 0})
except tether.ToolInputError as exc:
    print(exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "{'amount_cents': 2}",
        "tool 'refund': invalid arguments: Expected `int` >= 1 - at `$.amount_cents`",
    ]
