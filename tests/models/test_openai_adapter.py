"""The OpenAI-compatible adapter, against a fake client (no network, no openai package)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import tether
from tether.models.openai import OpenAIChatModel, decision, tools

pytestmark = pytest.mark.anyio


class FakeCompletions:
    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.calls: list[dict[str, Any]] = []

    async def create(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return self.answers.pop(0)


def client(answers: list[Any]) -> Any:
    return SimpleNamespace(chat=SimpleNamespace(completions=FakeCompletions(answers)))


def answer(content: str | None = None, call: tuple[str, str] | None = None) -> Any:
    calls = (
        [SimpleNamespace(function=SimpleNamespace(name=call[0], arguments=call[1]))]
        if call
        else None
    )
    message = SimpleNamespace(content=content, tool_calls=calls)
    return SimpleNamespace(choices=[SimpleNamespace(message=message)])


@tether.tool(recovery="retry")
async def lookup(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}: delivered"


FAKE = client(
    [
        answer("I will look it up.", ("lookup", json.dumps({"order_id": "42"}))),
        answer("Order 42 was delivered."),
    ]
)


class Assistant(tether.AgentSession):
    tools = (lookup,)
    model = OpenAIChatModel(FAKE, model="test-model")


async def test_a_session_runs_on_an_openai_compatible_client(tmp_path: Path) -> None:
    async with tether.Runtime(tmp_path / "agents.db") as rt:
        s = await rt.spawn(Assistant, "s1", goal="Answer questions about orders")
        answer_text = await s.ask(tether.UserMessage("where is order 42?"), timeout=10)
    assert answer_text == "Order 42 was delivered."
    first, second = FAKE.chat.completions.calls
    assert first["model"] == "test-model"
    assert first["messages"][0]["role"] == "system"
    assert "Answer questions about orders" in first["messages"][0]["content"]
    [spec] = first["tools"]
    assert spec["function"]["name"] == "lookup"
    assert spec["function"]["parameters"]["properties"]["order_id"]["type"] == "string"
    # The tool's result reached the model in the next call.
    assert any("order 42: delivered" in m["content"] for m in second["messages"])


def test_answers_become_decisions() -> None:
    assert decision(answer("done")) == tether.FinalAnswer(text="done")
    call = decision(answer(None, ("lookup", '{"order_id": "7"}')))
    assert call == tether.ToolCall(tool="lookup", args={"order_id": "7"}, thought="")
    broken = decision(answer(None, ("lookup", "{not json")))
    assert isinstance(broken, tether.ToolCall)
    assert "(unparsable arguments)" in broken.args
    with pytest.raises(ValueError, match="no message"):
        decision(SimpleNamespace(choices=[]))


def test_a_client_without_chat_completions_is_refused() -> None:
    with pytest.raises(tether.ConfigError, match=r"chat\.completions\.create"):
        OpenAIChatModel(object(), model="m")


def test_tool_specs_are_object_schemas() -> None:
    request = tether.ModelRequest(
        session_id="s",
        task=1,
        step=1,
        decisions=0,
        context=[],
        tools=[lookup.spec()],
        bundle=tether.actors.context.assemble([], budget=100),  # type: ignore[attr-defined]
    )
    [spec] = tools(request)
    assert spec["function"]["parameters"]["type"] == "object"


def test_arguments_sent_already_decoded_are_used_and_others_go_back_to_the_model() -> None:
    as_object = decision(answer(None, ("lookup", {"order_id": "7"})))  # type: ignore[arg-type]
    assert as_object == tether.ToolCall(tool="lookup", args={"order_id": "7"})
    as_number = decision(answer(None, ("lookup", 7)))  # type: ignore[arg-type]
    assert isinstance(as_number, tether.ToolCall)
    assert as_number.args == {"(unparsable arguments)": "7"}


@pytest.mark.parametrize(
    ("response", "problem"),
    [
        (answer(None), "neither text nor a tool call"),
        (answer(""), "neither text nor a tool call"),
        (SimpleNamespace(choices=[SimpleNamespace(message=None)]), "neither text nor a tool"),
        (answer(None, (None, "{}")), "names no tool"),  # type: ignore[arg-type]
        (
            SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(tool_calls=[{}]))]),
            "no function name and arguments",
        ),
        (
            SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(tool_calls=5))]),
            "no function name and arguments",
        ),
    ],
)
def test_a_malformed_answer_is_a_value_error_naming_the_problem(
    response: Any, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        decision(response)


EMPTY = client([answer(None)])


class Mute(tether.AgentSession):
    tools = (lookup,)
    model = OpenAIChatModel(EMPTY, model="test-model")


async def test_an_empty_answer_stops_the_task_instead_of_finishing_it(tmp_path: Path) -> None:
    async with tether.Runtime(tmp_path / "agents.db") as rt:
        s = await rt.spawn(Mute, "s1", goal="Answer questions about orders")
        text = await s.ask(tether.UserMessage("where is order 42?"), timeout=10)
        info = await s.ask(tether.GetSessionInfo(), timeout=5)
    assert "neither text nor a tool call" in text
    assert info.outcome.startswith("stopped: the model failed")
