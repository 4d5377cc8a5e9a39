"""Each provider as the shared adapter tests see it: its agent, its SDK client, its replies,
and how to read tool calls and tool results back out of a request it received; and a session
of a provider's agent on a local server, with what it journaled and recorded."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

import tether
from tests.models import shapes
from tests.models.agents import AnthropicAgent, OpenAIAgent, use_anthropic, use_openai
from tests.models.servers import ProviderServer, Reply
from tether.actors.model import Decision
from tether.actors.session import ModelDecided, SessionEvent
from tether.runtime.clock import SystemClock
from tether.store.records import EffectRecord

Call = tuple[str, str, Any]  # (call id, tool name, arguments: a dict, or raw text sent as is)


@dataclass(frozen=True)
class Provider:
    name: str
    agent: type[tether.AgentSession]
    connect: Callable[..., Any]  # (url, timeout=) -> the SDK's async client, wired to the agent
    answer: Callable[[str], Reply]  # a final text answer
    calls: Callable[..., Reply]  # (text, *calls) -> an answer with these tool calls
    rate_limited: Callable[[str], Reply]  # a 429 with this retry-after
    server_error: Callable[[], Reply]  # a 500
    out_of_money: Reply  # a 429 that no wait cures
    bad_request: Reply  # a 400
    cut_off: Reply  # an answer cut at the output token limit
    sent_calls: Callable[[Any], list[tuple[str, str, Any]]]  # the tool calls a request sends
    results: Callable[[Any], list[tuple[str, str, bool]]]  # its tool results: (id, text, error?)


# -- OpenAI --------------------------------------------------------------------------------------


def _openai_calls(text: str | None, *calls: Call) -> Reply:
    return shapes.openai_completion(text, *(shapes.openai_call(*c) for c in calls))


def _openai_sent_calls(body: Any) -> list[tuple[str, str, Any]]:
    return [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for m in body["messages"]
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    ]


def _openai_results(body: Any) -> list[tuple[str, str, bool]]:
    out = []
    for m in body["messages"]:
        if m["role"] == "tool":
            error = m["content"].startswith("Error: ")
            out.append((m["tool_call_id"], m["content"].removeprefix("Error: "), error))
    return out


OPENAI = Provider(
    name="openai",
    agent=OpenAIAgent,
    connect=use_openai,
    answer=lambda text: shapes.openai_completion(text),
    calls=_openai_calls,
    rate_limited=shapes.openai_rate_limited,
    server_error=shapes.openai_server_error,
    out_of_money=shapes.openai_error(
        429,
        "You exceeded your current quota, please check your plan and billing details.",
        "insufficient_quota",
        "insufficient_quota",
    ),
    bad_request=shapes.openai_error(
        400,
        "Invalid schema for function 'lookup_order': None is not of type 'object'.",
        "invalid_request_error",
        "invalid_function_parameters",
    ),
    cut_off=shapes.openai_completion("Order 42 is deliv", finish_reason="length"),
    sent_calls=_openai_sent_calls,
    results=_openai_results,
)


# -- Anthropic -----------------------------------------------------------------------------------


def _anthropic_calls(text: str | None, *calls: Call) -> Reply:
    said = [shapes.anthropic_text(text)] if text else []
    return shapes.anthropic_message(*said, *(shapes.anthropic_tool_use(*c) for c in calls))


def _anthropic_sent_calls(body: Any) -> list[tuple[str, str, Any]]:
    return [
        (b["id"], b["name"], b["input"])
        for m in body["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    ]


def _anthropic_results(body: Any) -> list[tuple[str, str, bool]]:
    return [
        (b["tool_use_id"], b["content"], b["is_error"])
        for m in body["messages"]
        if m["role"] == "user"
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


ANTHROPIC = Provider(
    name="anthropic",
    agent=AnthropicAgent,
    connect=use_anthropic,
    answer=lambda text: shapes.anthropic_message(shapes.anthropic_text(text)),
    calls=_anthropic_calls,
    rate_limited=shapes.anthropic_rate_limited,
    server_error=shapes.anthropic_server_error,
    out_of_money=shapes.anthropic_error(
        429,
        "rate_limit_error",
        "You have reached your specified API usage limits.",
        details={"error_code": "enforced_spend_limit_reached"},
    ),
    bad_request=shapes.anthropic_error(
        400,
        "invalid_request_error",
        "tools.0.input_schema: JSON schema is invalid",
    ),
    cut_off=shapes.anthropic_message(
        shapes.anthropic_text("Order 42 is deliv"), stop_reason="max_tokens"
    ),
    sent_calls=_anthropic_sent_calls,
    results=_anthropic_results,
)

PROVIDERS = (OPENAI, ANTHROPIC)


# -- a session on a provider ---------------------------------------------------------------

GOAL = "Answer questions about orders"


@asynccontextmanager
async def session_on(
    provider: Provider,
    server: ProviderServer | str,
    tmp_path: Path,
    *,
    timeout: float = 30.0,
    clock: SystemClock | None = None,
) -> AsyncIterator[tuple[tether.Runtime, tether.ActorRef]]:
    """A runtime and a session of ``provider``'s agent, its SDK client on ``server``."""
    client = provider.connect(server if isinstance(server, str) else server.url, timeout=timeout)
    try:
        async with tether.Runtime(tmp_path / "agents.db", clock=clock) as rt:
            yield rt, await rt.spawn(provider.agent, "s1", goal=GOAL)
    finally:
        await client.close()


async def journaled_decisions(rt: tether.Runtime) -> list[Decision]:
    rows = await rt.store.load_journal("s1", 0, 1000)
    events = [msgspec.msgpack.decode(r.payload, type=SessionEvent) for r in rows]
    return [e.decision for e in events if isinstance(e, ModelDecided)]


async def model_effects(rt: tether.Runtime) -> list[EffectRecord]:
    return [e for e in await rt.store.find_effects(actor_id="s1") if e.tool == "model"]
