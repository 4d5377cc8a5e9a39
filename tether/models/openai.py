"""A thin adapter from ``tether.Model`` to an OpenAI-compatible chat completions API.

Optional: ``pip install 'tether[openai]'`` brings the ``openai`` package; any client object with
the same ``chat.completions.create`` method works too (Azure, vLLM, Ollama and most gateways
speak this API). Nothing in tether or its tests needs it::

    from openai import AsyncOpenAI
    from tether.models.openai import OpenAIChatModel

    class Refunds(tether.AgentSession):
        tools = (lookup_order, refund)
        model = OpenAIChatModel(AsyncOpenAI(), model="gpt-4o-mini")

The adapter maps the request's context (role/content dicts) to messages and its tool specs to
function tools; the answer becomes a ``tether.ToolCall`` (the first tool call, if any) or a
``tether.FinalAnswer``. Errors of the client surface as they are: the session's model tool
sorts them (429/5xx are retried with backoff, under the ``model`` breaker).
"""

from __future__ import annotations

import json
from typing import Any

from tether.actors.model import Decision, FinalAnswer, ModelRequest, ToolCall
from tether.errors import ConfigError


class OpenAIChatModel:
    """``tether.Model`` over ``client.chat.completions.create`` (see the module docstring)."""

    def __init__(self, client: Any, *, model: str, temperature: float = 0.0, **extra: Any) -> None:
        if not hasattr(getattr(getattr(client, "chat", None), "completions", None), "create"):
            raise ConfigError(
                "OpenAIChatModel needs a client with chat.completions.create "
                "(e.g. openai.AsyncOpenAI())"
            )
        self.client = client
        self.model = model
        self.temperature = temperature
        self.extra = extra

    async def decide(self, request: ModelRequest) -> Decision:
        response = await self.client.chat.completions.create(
            model=self.model,
            messages=messages(request),
            tools=tools(request),
            temperature=self.temperature,
            **self.extra,
        )
        return decision(response)


def messages(request: ModelRequest) -> list[dict[str, str]]:
    """The context as chat messages. A tool result becomes a user message that says so: the
    bundle's history is text, and tool messages would need the provider's call ids."""
    out: list[dict[str, str]] = []
    for m in request.context:
        role = m["role"]
        if role not in ("system", "user", "assistant"):
            out.append({"role": "user", "content": f"[{role} result] {m['content']}"})
        else:
            out.append({"role": role, "content": m["content"]})
    return out


def tools(request: ModelRequest) -> list[dict[str, Any]]:
    """The tool specs as function tools (name, description, JSON schema of the input)."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec["name"],
                "description": spec.get("description", ""),
                "parameters": _parameters(spec["input_schema"]),
            },
        }
        for spec in request.tools
    ]


def _parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """msgspec's schema of one Struct is a ``$ref`` into ``$defs``: inline it, as function
    parameters must be an object schema."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        inner = dict(schema.get("$defs", {}).get(ref.removeprefix("#/$defs/"), {}))
        defs = {k: v for k, v in schema.get("$defs", {}).items() if k != ref[8:]}
        if defs:
            inner["$defs"] = defs
        inner.pop("title", None)
        return inner
    return schema


def decision(response: Any) -> Decision:
    """A chat completion as a decision: its first tool call, or its text as the answer."""
    try:
        message = response.choices[0].message
    except (AttributeError, IndexError, TypeError) as exc:
        raise ValueError(f"the model's response has no message: {response!r}") from exc
    calls = getattr(message, "tool_calls", None) or []
    text = getattr(message, "content", None) or ""
    if calls:
        # A malformed call is named here: it used to surface as a bare TypeError or
        # AttributeError from deep in this function.
        try:
            fn = calls[0].function
            name, raw = fn.name, fn.arguments
        except (AttributeError, IndexError, KeyError, TypeError) as exc:
            raise ValueError(
                f"the model's tool call has no function name and arguments: {calls!r}"
            ) from exc
        if not isinstance(name, str) or not name:
            raise ValueError(f"the model's tool call names no tool: {fn!r}")
        args: Any
        if isinstance(raw, dict):
            args = raw  # some gateways send the arguments already decoded
        else:
            try:
                args = json.loads(raw or "{}")
            except (json.JSONDecodeError, TypeError):
                # validation tells the model
                args = {"(unparsable arguments)": raw if isinstance(raw, str) else repr(raw)}
        if not isinstance(args, dict):
            args = {"(arguments are not an object)": args}
        return ToolCall(tool=name, args=args, thought=text)
    if not text:
        # No tool call and no text (a refusal, a length cut, a broken gateway): not an answer.
        # It used to end the task as "finished" with an empty answer.
        raise ValueError(f"the model's response has neither text nor a tool call: {message!r}")
    return FinalAnswer(text=text)
