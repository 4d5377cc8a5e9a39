"""Guards: a flaky tool trips its circuit breaker; looping agents are caught by their policy.

Run: python examples/guards.py

1. ``get_exchange_rate`` answers 503 (its service is down). Its breaker trips after 2
   failures; the next call is not made: the agent gets ``ToolUnavailable``'s message (what is
   down, why, and when to retry) as the tool's result, and answers without the rate.
2. Two agents look the same thing up again and again. One has ``LoopPolicy(on_repeat="stop")``:
   its task is stopped. The other has the default policy (``feedback``): the call is refused,
   the model is told it is repeating itself, and it changes course.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import anyio

import tether
from tether.testing import ScriptedModel

# The example is one file, so its actors and tools live in __main__, which no other process
# can import: tether warns of that at spawn. An application keeps them in a module.
warnings.filterwarnings("ignore", category=tether.MainModuleWarning)

DB = "guards.db"


# -- 1. a circuit breaker -------------------------------------------------------------------


@tether.tool(
    recovery="retry",
    breaker=tether.BreakerPolicy(failure_threshold=2, window_size=2, open_duration=20.0),
    retry=tether.RetryPolicy(max_attempts=2, initial_delay=0.05),
)
async def get_exchange_rate(currency: str) -> float:
    """The current rate of ``currency`` to USD."""
    print(f"  get_exchange_rate({currency!r}): the rates service answers 503")
    raise tether.TransientToolError("get_exchange_rate", "rates service: 503", status_code=503)


def quote(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    calls = request.bundle.tool_results
    if not calls:
        return tether.ToolCall(tool="get_exchange_rate", args={"currency": "EUR"})
    if calls[-1].error:
        return tether.FinalAnswer(text=f"No rate right now. What I was told: {calls[-1].error}")
    return tether.FinalAnswer(text=f"1 EUR = {calls[-1].result} USD")


class Quoter(tether.AgentSession):
    tools = (get_exchange_rate,)
    model = ScriptedModel(quote)


# -- 2. loop detection ----------------------------------------------------------------------


@tether.tool(recovery="retry")
async def search_docs(query: str) -> str:
    """Search the documentation."""
    return "no results"


def stubborn(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """Searches for the same thing forever, whatever it is told."""
    return tether.ToolCall(tool="search_docs", args={"query": "refund policy"})


def listening(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """Searches for the same thing until told it is looping."""
    calls = request.bundle.tool_results
    if calls and (calls[-1].error or "").startswith("Loop detected"):
        return tether.FinalAnswer(text=f"I stop searching; I was told: {calls[-1].error}")
    return tether.ToolCall(tool="search_docs", args={"query": "refund policy"})


class StubbornAgent(tether.AgentSession):
    tools = (search_docs,)
    model = ScriptedModel(stubborn)
    loop_policy = tether.LoopPolicy(repeat=3, on_repeat="stop")


class ListeningAgent(tether.AgentSession):
    tools = (search_docs,)
    model = ScriptedModel(listening)  # the default LoopPolicy: feedback to the model


def fresh_store() -> None:
    """Start from an empty store on every run."""
    for suffix in ("", "-wal", "-shm"):
        Path(DB + suffix).unlink(missing_ok=True)


async def main() -> None:
    async with tether.Runtime(DB) as rt:
        print("1. a flaky tool and its breaker")
        for customer in ("quote-1", "quote-2"):
            session = await rt.spawn(Quoter, customer, goal="Quote prices in USD.")
            result = await session.ask(tether.UserMessage("What is 1 EUR in USD?"), timeout=30)
            print(f"  {customer} answers: {result.answer}")
        for root in await rt.tree():
            node = root.find("breaker:get_exchange_rate")
            if node is not None:
                print(f"  rt.tree(): {node.render().strip()}")
                assert node.detail is not None
                assert node.detail.startswith("open"), node.detail

        print("2. loop detection")
        for cls, session_id in ((StubbornAgent, "stubborn"), (ListeningAgent, "listening")):
            session = await rt.spawn(cls, session_id, goal="Answer questions from the docs.")
            try:
                result = await session.ask(
                    tether.UserMessage("What is the refund policy?"), timeout=30
                )
            except tether.TaskFailed as exc:  # the stubborn one is stopped
                result = exc.result
            answer = result.answer
            info = await session.ask(tether.GetSessionInfo(), timeout=10)
            print(f"  {session_id} ({cls.loop_policy.on_repeat if cls.loop_policy else '-'}):")
            print(f"    outcome: {info.outcome}")
            print(f"    answer:  {answer}")


if __name__ == "__main__":
    fresh_store()
    anyio.run(main)
