"""``tether.models.anthropic``: the Messages API wire format, on the real ``anthropic`` SDK.

The behaviours both adapters share (usage, parallel calls, malformed arguments, errors) are in
``test_adapters.py``; here is what is Anthropic's own: ``system=``, alternating turns of
content blocks, ``tool_use`` / ``tool_result`` with ``is_error``, ``stop_reason``, and usage
whose ``input_tokens`` leaves out the cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message

import tether
from tests.models import shapes
from tests.models.agents import AnthropicAgent
from tests.models.providers import ANTHROPIC, session_on
from tests.models.servers import ProviderServer, Reply
from tether.actors.context import ChatMessage, Checkpoint, Goal, ToolCallRecord, assemble
from tether.models.anthropic import AnthropicModel, decision, messages

pytestmark = pytest.mark.anyio


def message(reply: Reply) -> Message:
    """The SDK's own object for a reply's body, built as the client builds it."""
    return Message.construct(**reply.body)


async def test_the_history_goes_as_system_and_alternating_turns_of_tool_use_and_results(
    tmp_path: Path,
) -> None:
    script = [
        shapes.anthropic_message(
            shapes.anthropic_text("Let me look."),
            shapes.anthropic_tool_use("toolu_01", "lookup_order", {"order_id": "42"}),
        ),
        shapes.anthropic_message(
            shapes.anthropic_tool_use("toolu_02", "cancel_order", {"order_id": "42"})
        ),
        shapes.anthropic_message(shapes.anthropic_text("Order 42 was delivered.")),
    ]
    with ProviderServer(script) as server:
        async with session_on(ANTHROPIC, server, tmp_path) as (_, s):
            await s.ask(tether.UserMessage("where is order 42?"), timeout=20)
        *_, last = server.bodies()
        request = server.received[-1]
    assert request.path == "/v1/messages"
    assert request.headers["anthropic-version"]  # the SDK's own request
    assert last["model"] == "claude-sonnet-4-6"
    assert last["max_tokens"] == 1024
    assert "temperature" not in last  # the API's default unless given
    assert last["system"].startswith("Goal: Answer questions about orders\nCheckpoint: Task 1")
    assert last["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "where is order 42?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "lookup_order",
                    "input": {"order_id": "42"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": "order 42: delivered",
                    "is_error": False,
                }
            ],
        },
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_02",
                    "name": "cancel_order",
                    "input": {"order_id": "42"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02",
                    "content": "Invalid call: there is no tool named 'cancel_order' (tools: lookup_order)",
                    "is_error": True,
                }
            ],
        },
    ]
    assert last["tools"] == [
        {
            "name": "lookup_order",
            "description": "Look an order up by its number.",
            "input_schema": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
                "additionalProperties": False,
            },
        }
    ]


def _request(*history: ChatMessage | ToolCallRecord) -> tether.ModelRequest:
    bundle = assemble(
        [Goal("Answer questions about orders"), Checkpoint("Task 2: where is 43?"), *history],
        budget=10_000,
    )
    return tether.ModelRequest(
        session_id="s",
        task=2,
        step=1,
        decisions=0,
        context=bundle.render(),
        tools=[],
        bundle=bundle,
    )


def test_a_history_that_no_longer_starts_with_the_user_opens_with_the_checkpoint() -> None:
    # The token budget trimmed the user's message away: the API wants a user turn first.
    sent = messages(
        _request(
            ChatMessage("assistant", "Looking."),
            ToolCallRecord(
                "lookup_order", {"order_id": "43"}, result="in transit", call_id="toolu_9", turn=4
            ),
        )
    )
    assert sent[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "Checkpoint: Task 2: where is 43?"}],
    }
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]


def test_a_user_message_after_tool_results_joins_their_turn_after_them() -> None:
    sent = messages(
        _request(
            ChatMessage("user", "where is 43?"),
            ToolCallRecord(
                "lookup_order", {"order_id": "43"}, result="in transit", call_id="toolu_9", turn=4
            ),
            ChatMessage("user", "and 42 too, please"),
        )
    )
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert [b["type"] for b in sent[2]["content"]] == ["tool_result", "text"]


def test_usage_counts_cache_reads_and_writes_as_input() -> None:
    answer = decision(
        message(
            shapes.anthropic_message(
                shapes.anthropic_text("ok"),
                input_tokens=50,
                cache_read_input_tokens=2000,
                cache_creation_input_tokens=300,
                output_tokens=20,
            )
        )
    )
    assert answer.usage is not None
    usage = answer.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (2350, 20, 2370)
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (2000, 300)
    assert usage.finish_reason == "end_turn"
    assert usage.response_id.startswith("msg_")


def test_text_before_tool_use_blocks_is_the_calls_thought() -> None:
    calls = decision(
        message(
            shapes.anthropic_message(
                shapes.anthropic_text("Both, then."),
                shapes.anthropic_tool_use("toolu_1", "lookup_order", {"order_id": "42"}),
                shapes.anthropic_tool_use("toolu_2", "lookup_order", {"order_id": "43"}),
            )
        )
    )
    assert isinstance(calls, tether.ToolCalls)
    assert calls.thought == "Both, then."
    assert [(c.call_id, c.args) for c in calls.calls] == [
        ("toolu_1", {"order_id": "42"}),
        ("toolu_2", {"order_id": "43"}),
    ]


@pytest.mark.parametrize(
    ("tool_input", "problem"),
    [
        ("{bad", "the arguments are not valid JSON"),
        (["42"], "the arguments are not valid JSON: ['42']"),
        (None, "the arguments are not valid JSON: None"),
    ],
)
def test_an_input_that_is_not_an_object_is_kept_as_the_calls_problem(
    tool_input: Any, problem: str
) -> None:
    call = decision(
        message(
            shapes.anthropic_message(shapes.anthropic_tool_use("t", "lookup_order", tool_input))
        )
    )
    assert isinstance(call, tether.ToolCall)
    assert call.args == {}
    assert call.malformed.startswith(problem)


@pytest.mark.parametrize(
    ("stop_reason", "problem"),
    [
        ("max_tokens", "cut off at max_tokens"),
        ("model_context_window_exceeded", "cut off at its context window"),
        ("refusal", "refused"),
        ("pause_turn", "paused"),
    ],
)
def test_a_stop_reason_that_is_not_an_answer_is_a_value_error_naming_it(
    stop_reason: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        decision(
            message(
                shapes.anthropic_message(
                    shapes.anthropic_text("Order 42 is"), stop_reason=stop_reason
                )
            )
        )


def test_an_empty_answer_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="neither text nor a tool call"):
        decision(message(shapes.anthropic_message()))


def test_a_client_without_messages_or_a_bad_setting_is_refused() -> None:
    with pytest.raises(tether.ConfigError, match=r"messages\.create"):
        AnthropicModel(object(), model="m")
    client = AnthropicAgent.model.client
    with pytest.raises(tether.ConfigError, match="model name"):
        AnthropicModel(client, model="")
    with pytest.raises(tether.ConfigError, match="max_tokens must be an int >= 1"):
        AnthropicModel(client, model="m", max_tokens=0)
