"""Agents on the real provider adapters, for the adapter tests and the crash program.

Each session class holds a real adapter (``OpenAIChatModel``, ``AnthropicModel``); a test or
the crash program points the adapter at a local provider server with :func:`use_openai` or
:func:`use_anthropic` (the SDK's own client, ``max_retries=0`` as the adapters' docs advise).
The tool records every run in its own file (``CONFIG.tool_log``), which is the world's account
of what ran, whatever tether's ledger says.
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import tether
from tests.chaos.programs import append_line
from tether.models.anthropic import AnthropicModel
from tether.models.openai import OpenAIChatModel

if TYPE_CHECKING:  # each SDK is imported where it is used: a child program needs only one
    import anthropic
    import openai

ORDERS = {"42": "delivered", "43": "in transit"}


class _Config:
    tool_log = ""


CONFIG = _Config()


@tether.tool  # recovery="quarantine": its receipt is committed as soon as it returns
async def lookup_order(order_id: str) -> str:
    """Look an order up by its number."""
    if CONFIG.tool_log:
        append_line(
            CONFIG.tool_log, {"tool": "lookup_order", "order_id": order_id, "pid": os.getpid()}
        )
    return f"order {order_id}: {ORDERS.get(order_id, 'unknown')}"


async def _no_client(**kwargs: Any) -> Any:
    raise tether.ConfigError("this test did not point the adapter at a server (use_openai)")


_UNSET = SimpleNamespace(
    chat=SimpleNamespace(completions=SimpleNamespace(create=_no_client)),
    messages=SimpleNamespace(create=_no_client),
)


class OpenAIAgent(tether.AgentSession):
    tools = (lookup_order,)
    model = OpenAIChatModel(_UNSET, model="gpt-4o-mini")


class AnthropicAgent(tether.AgentSession):
    tools = (lookup_order,)
    model = AnthropicModel(_UNSET, model="claude-sonnet-4-6", max_tokens=1024)


AGENTS: dict[str, type[tether.AgentSession]] = {
    "openai": OpenAIAgent,
    "anthropic": AnthropicAgent,
}


def use_openai(url: str, *, timeout: float = 30.0) -> openai.AsyncOpenAI:
    """Point ``OpenAIAgent`` at the server at ``url``; the client (close it when done)."""
    import openai

    client = openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key="sk-test", max_retries=0, timeout=timeout
    )
    OpenAIAgent.model.client = client
    return client


def use_anthropic(url: str, *, timeout: float = 30.0) -> anthropic.AsyncAnthropic:
    """Point ``AnthropicAgent`` at the server at ``url``; the client (close it when done)."""
    import anthropic

    client = anthropic.AsyncAnthropic(
        base_url=url, api_key="sk-ant-test", max_retries=0, timeout=timeout
    )
    AnthropicAgent.model.client = client
    return client


def tool_runs(path: str) -> list[dict[str, Any]]:
    """What the tool's own file says ran, in order."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
