"""Agent sessions over the test server's tools, made per test (the server's file differs).

A task's text is a JSON plan: a list of ``[tool, args]`` calls the model makes in order, one
per decision. A call that failed is made once more (the model told of the failure tries
again), then the plan goes on; the final answer lists every result or error. Each session
class is registered in this module under its name, so that the runtime imports it by path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import tether
from tether.actors.context import ChatMessage, ToolCallRecord
from tether.testing import ScriptedModel


def plan(*calls: tuple[str, dict[str, Any]]) -> tether.UserMessage:
    return tether.UserMessage(json.dumps([list(c) for c in calls]))


def decide(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    history = request.bundle.history
    asked = max(i for i, f in enumerate(history) if isinstance(f, ChatMessage) and f.role == "user")
    task = history[asked]
    assert isinstance(task, ChatMessage)
    steps: list[list[Any]] = json.loads(task.text)
    # this task's calls: those after its message
    done = [f for f in history[asked:] if isinstance(f, ToolCallRecord)]
    position, i = 0, 0
    while i < len(done) and position < len(steps):
        # a failed call is made once more; the second outcome counts, whatever it is
        retried = (
            done[i].error is not None and i + 1 < len(done) and done[i + 1].tool == done[i].tool
        )
        i += 2 if retried else 1
        position += 1
    if done and done[-1].error is not None and (len(done) < 2 or done[-2].error is None):
        tool, args = steps[position - 1]
        return tether.ToolCall(tool=tool, args=args)
    if position < len(steps):
        tool, args = steps[position]
        return tether.ToolCall(tool=tool, args=args)
    return tether.FinalAnswer(text=json.dumps([[c.tool, c.result, c.error] for c in done]))


def session_class(name: str, tools: Sequence[tether.Tool]) -> type[tether.AgentSession]:
    """A session class named ``name`` with ``tools``, importable as ``tests.mcp.agents:name``."""
    cls = type(
        name,
        (tether.AgentSession,),
        {
            "tools": tuple(tools),
            "model": ScriptedModel(decide),
            "__module__": __name__,
            "__qualname__": name,
        },
    )
    globals()[name] = cls
    return cls
