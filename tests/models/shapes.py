"""The providers' response shapes, as their API references document them and their SDKs'
types read them (``openai.types.chat.ChatCompletion``, ``anthropic.types.Message``, the
error bodies the SDKs unwrap into ``APIStatusError``): ids, ``usage``, ``finish_reason`` /
``stop_reason``, and the headers tests use (request ids, ``retry-after``)."""

from __future__ import annotations

import itertools
import json
from typing import Any

from tests.models.servers import Reply

_ids = itertools.count(1)

OPENAI_MODEL = "gpt-4o-mini-2024-07-18"
ANTHROPIC_MODEL = "claude-sonnet-4-6"


# -- OpenAI chat completions --------------------------------------------------------------------


def openai_call(call_id: str, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    """One entry of ``message.tool_calls``: ``arguments`` is a JSON string on the wire."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def openai_completion(
    content: str | None = None,
    *calls: dict[str, Any],
    finish_reason: str | None = None,
    prompt_tokens: int = 82,
    completion_tokens: int = 17,
    cached_tokens: int = 0,
    refusal: str | None = None,
) -> Reply:
    """A ``chat.completion`` object, as the API returns it for a non-streamed request."""
    n = next(_ids)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "refusal": refusal,
        "annotations": [],
    }
    if calls:
        message["tool_calls"] = list(calls)
    body = {
        "id": f"chatcmpl-test{n:04d}",
        "object": "chat.completion",
        "created": 1_741_569_952 + n,
        "model": OPENAI_MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_test",
    }
    return Reply(body, headers={"x-request-id": f"req_openai{n:04d}"})


def openai_error(
    status: int,
    message: str,
    kind: str,
    code: str | None = None,
    *,
    headers: dict[str, str] | None = None,
) -> Reply:
    """An error response: ``{"error": {"message", "type", "param", "code"}}``."""
    n = next(_ids)
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Reply(body, status, {"x-request-id": f"req_openai{n:04d}", **(headers or {})})


def openai_rate_limited(retry_after: str) -> Reply:
    return openai_error(
        429,
        "Rate limit reached for gpt-4o-mini in organization org-test on requests per min "
        "(RPM): Limit 3, Used 3, Requested 1. Please try again in 1s.",
        "requests",
        "rate_limit_exceeded",
        headers={"retry-after": retry_after, "x-ratelimit-remaining-requests": "0"},
    )


def openai_server_error() -> Reply:
    return openai_error(
        500,
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
    )


# -- Anthropic messages -------------------------------------------------------------------------


def anthropic_text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def anthropic_tool_use(block_id: str, name: str, tool_input: Any) -> dict[str, Any]:
    """A ``tool_use`` block: ``input`` is a JSON object on the wire (not a string)."""
    return {"type": "tool_use", "id": block_id, "name": name, "input": tool_input}


def anthropic_message(
    *content: dict[str, Any],
    stop_reason: str | None = None,
    input_tokens: int = 1021,
    output_tokens: int = 86,
    cache_read_input_tokens: int = 0,
    cache_creation_input_tokens: int = 0,
) -> Reply:
    """A ``message`` object, as the API returns it for a non-streamed request."""
    n = next(_ids)
    uses_tools = any(block["type"] == "tool_use" for block in content)
    body = {
        "id": f"msg_01Test{n:04d}",
        "type": "message",
        "role": "assistant",
        "model": ANTHROPIC_MODEL,
        "content": list(content),
        "stop_reason": stop_reason or ("tool_use" if uses_tools else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": cache_creation_input_tokens,
            "cache_read_input_tokens": cache_read_input_tokens,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        },
    }
    return Reply(body, headers={"request-id": f"req_011Test{n:04d}"})


def anthropic_error(
    status: int,
    kind: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    details: dict[str, Any] | None = None,
) -> Reply:
    """An error response: ``{"type": "error", "error": {"type", "message"}, "request_id"}``."""
    n = next(_ids)
    error: dict[str, Any] = {"type": kind, "message": message}
    if details is not None:
        error["details"] = details
    body = {"type": "error", "error": error, "request_id": f"req_011Test{n:04d}"}
    return Reply(body, status, {"request-id": f"req_011Test{n:04d}", **(headers or {})})


def anthropic_rate_limited(retry_after: str) -> Reply:
    return anthropic_error(
        429,
        "rate_limit_error",
        "This request would exceed the rate limit for your organization of 50 requests per "
        "minute. For details, refer to: https://docs.claude.com/en/api/rate-limits.",
        headers={"retry-after": retry_after, "anthropic-ratelimit-requests-remaining": "0"},
    )


def anthropic_server_error() -> Reply:
    return anthropic_error(500, "api_error", "Internal server error")
