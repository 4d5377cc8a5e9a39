"""``tether.models.openai``: the chat completions wire format, on the real ``openai`` SDK.

The behaviours both adapters share (usage, parallel calls, malformed arguments, errors) are in
``test_adapters.py``; here is what is OpenAI's own: the exact messages sent, and how the SDK's
``ChatCompletion`` objects become decisions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

import tether
from tests.models import shapes
from tests.models.agents import OpenAIAgent
from tests.models.providers import OPENAI, session_on
from tests.models.servers import ProviderServer, Reply
from tether.actors.context import assemble
from tether.actors.messages import TOO_DEEP
from tether.models.openai import OpenAIChatModel, decision, tools

pytestmark = pytest.mark.anyio


def completion(reply: Reply) -> ChatCompletion:
    """The SDK's own object for a reply's body, built as the client builds it (loosely: a
    gateway's odd field is kept as it came, not refused)."""
    return ChatCompletion.construct(**reply.body)


async def test_the_history_goes_as_system_user_assistant_tool_calls_and_tool_messages(
    tmp_path: Path,
) -> None:
    script = [
        shapes.openai_completion(
            None, shapes.openai_call("call_1", "lookup_order", {"order_id": "42"})
        ),
        shapes.openai_completion(
            "Now 43.", shapes.openai_call("call_2", "lookup_order", {"order_id": "43"})
        ),
        shapes.openai_completion("42 is delivered, 43 is in transit."),
    ]
    with ProviderServer(script) as server:
        async with session_on(OPENAI, server, tmp_path) as (_, s):
            await s.ask(tether.UserMessage("where are 42 and 43?"), timeout=20)
        *_, last = server.bodies()
    assert last["model"] == "gpt-4o-mini"
    assert last["temperature"] == 0.0
    system, *rest = last["messages"]
    assert system["role"] == "system"
    assert system["content"].startswith("Goal: Answer questions about orders\nCheckpoint: Task 1")
    assert rest == [
        {"role": "user", "content": "where are 42 and 43?"},
        {
            "role": "assistant",
            "content": None,  # the model said nothing with this call: nothing is made up
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id": "42"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "order 42: delivered"},
        {
            "role": "assistant",
            "content": "Now 43.",
            "tool_calls": [
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id": "43"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "order 43: in transit"},
    ]
    assert last["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "description": "Look an order up by its number.",
                "parameters": {
                    "type": "object",
                    "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    assert "parallel_tool_calls" not in last  # left on: every call is made and answered


def test_answers_become_decisions_with_their_ids_and_usage() -> None:
    final = decision(completion(shapes.openai_completion("done", prompt_tokens=10)))
    assert isinstance(final, tether.FinalAnswer)
    assert final.text == "done"
    assert final.usage is not None
    assert final.usage.input_tokens == 10
    assert final.usage.response_id.startswith("chatcmpl-")
    call = decision(
        completion(
            shapes.openai_completion(
                "Looking.", shapes.openai_call("call_9", "lookup_order", {"order_id": "7"})
            )
        )
    )
    assert isinstance(call, tether.ToolCall)
    assert (call.tool, call.args, call.thought, call.call_id, call.malformed) == (
        "lookup_order",
        {"order_id": "7"},
        "Looking.",
        "call_9",
        "",
    )
    assert call.usage is not None
    assert call.usage.finish_reason == "tool_calls"


def test_cached_prompt_tokens_are_counted_as_cache_reads() -> None:
    answer = decision(
        completion(shapes.openai_completion("ok", prompt_tokens=2006, cached_tokens=1920))
    )
    assert answer.usage is not None
    assert (answer.usage.input_tokens, answer.usage.cache_read_input_tokens) == (2006, 1920)


def _deep(levels: int) -> str:
    return '{"order_id": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.parametrize(
    ("arguments", "args", "problem"),
    [
        ('{"order_id": "7"}', {"order_id": "7"}, ""),
        ("", {}, ""),  # a tool without parameters, as some models call it
        ("{not json", {}, "the arguments are not valid JSON: Expecting property name"),
        ("[1, 2]", {}, "the arguments are not a JSON object: [1, 2]"),
        ('"7"', {}, 'the arguments are not a JSON object: "7"'),
        ('{"n": 123456789012345678901234567890}', {}, "the arguments cannot be stored"),
        # Nested beyond what tether stores: 300 levels parse, 1000 are deeper than Python's
        # json parser goes (a bare RecursionError out of the model call, ending the task).
        (_deep(300), {}, f"the arguments cannot be stored: {TOO_DEEP}"),
        (_deep(1000), {}, f"the arguments cannot be stored: {TOO_DEEP}"),
    ],
    ids=["object", "empty", "not-json", "array", "string", "huge-int", "deep", "deeper"],
)
def test_arguments_are_parsed_or_their_problem_is_kept_for_the_model(
    arguments: str, args: dict[str, Any], problem: str
) -> None:
    call = decision(
        completion(
            shapes.openai_completion(None, shapes.openai_call("c", "lookup_order", arguments))
        )
    )
    assert isinstance(call, tether.ToolCall)
    assert call.args == args
    assert call.malformed.startswith(problem) if problem else call.malformed == ""


def test_arguments_a_gateway_sent_already_decoded_are_used() -> None:
    call = decision(
        completion(
            shapes.openai_completion(
                None,
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": {"order_id": "7"}},
                },
            )
        )
    )
    assert isinstance(call, tether.ToolCall)
    assert call.args == {"order_id": "7"}


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (shapes.openai_completion(None), "neither text nor a tool call"),
        (shapes.openai_completion(""), "neither text nor a tool call"),
        (
            shapes.openai_completion(None, refusal="I can't help with that."),
            "the model refused: I can't",
        ),
        (shapes.openai_completion("Order 42 is", finish_reason="length"), "cut off"),
        (shapes.openai_completion(None, finish_reason="content_filter"), "content filter"),
    ],
)
def test_an_answer_that_is_not_one_is_a_value_error_naming_the_problem(
    reply: Reply, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        decision(completion(reply))


def test_a_response_without_a_message_or_a_function_is_named() -> None:
    empty = completion(shapes.openai_completion("x"))
    empty.choices = []
    with pytest.raises(ValueError, match="no message"):
        decision(empty)
    custom = shapes.openai_completion(
        None, {"id": "c", "type": "custom", "custom": {"name": "x", "input": "y"}}
    )
    with pytest.raises(ValueError, match="no function name and arguments"):
        decision(completion(custom))


def test_a_client_without_chat_completions_or_a_model_name_is_refused() -> None:
    with pytest.raises(tether.ConfigError, match=r"chat\.completions\.create"):
        OpenAIChatModel(object(), model="m")
    with pytest.raises(tether.ConfigError, match="model name"):
        OpenAIChatModel(OpenAIAgent.model.client, model="")


def test_tool_specs_are_object_schemas() -> None:
    request = tether.ModelRequest(
        session_id="s",
        task=1,
        step=1,
        decisions=0,
        context=[],
        tools=[OpenAIAgent.tools[0].spec()],
        bundle=assemble([], budget=100),
    )
    [spec] = tools(request)
    assert spec["function"]["parameters"]["type"] == "object"
