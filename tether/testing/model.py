"""``ScriptedModel``: a model for tests and examples that decides from a script.

Either a list of decisions, taken in order by the session's decision count (so the script
picks up where it was after a restart: recorded decisions are replayed from the ledger, never
asked again), or a function of the request, for decisions that depend on what the session has
seen so far (the last tool result, the task's text)::

    model = ScriptedModel([
        tether.ToolCall(tool="lookup_order", args={"order_id": "42"}),
        tether.FinalAnswer(text="Order 42 is refunded."),
    ])
    model = ScriptedModel(lambda request: ...)
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, cast

from tether.actors.model import DECISION_TYPES, Decision, ModelRequest
from tether.errors import ConfigError

Script = Sequence[Decision] | Callable[[ModelRequest], Decision | Awaitable[Decision]]


class ScriptedModel:
    """A deterministic model (see the module docstring). ``calls`` counts real calls;
    ``requests`` holds the latest 100."""

    def __init__(self, script: Script) -> None:
        if callable(script):
            self._fn: Callable[[ModelRequest], Any] | None = script
            self._lines: tuple[Decision, ...] = ()
        elif isinstance(given := cast(object, script), str | bytes) or not isinstance(
            given, Iterable
        ):
            # a str would be taken apart into one-character lines; None or a number raised a
            # bare TypeError
            raise ConfigError(
                "a script is a list of tether.ToolCall / ToolCalls / FinalAnswer or a function of "
                f"the request, not {script!r}"
            )
        else:
            lines = tuple(script)
            for line in lines:
                if not isinstance(line, DECISION_TYPES):
                    raise ConfigError(
                        "a script line must be tether.ToolCall, tether.ToolCalls or "
                        f"tether.FinalAnswer, not {line!r}"
                    )
            self._fn = None
            self._lines = lines
        self.calls = 0
        # the latest requests, for tests to look at (bounded: a long session asks many times)
        self.requests: deque[ModelRequest] = deque(maxlen=100)

    async def decide(self, request: ModelRequest) -> Decision:
        self.calls += 1
        self.requests.append(request)
        if self._fn is not None:
            decision = self._fn(request)
            if inspect.isawaitable(decision):
                decision = await decision
        elif request.decisions < len(self._lines):
            decision = self._lines[request.decisions]
        else:
            raise ConfigError(
                f"the script has {len(self._lines)} decision(s) and the session asks for "
                f"decision #{request.decisions + 1}"
            )
        if not isinstance(decision, DECISION_TYPES):
            raise ConfigError(
                f"the script returned {decision!r}, not a ToolCall, ToolCalls or FinalAnswer"
            )
        return decision
