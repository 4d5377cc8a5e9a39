"""I4 and I6 on the real provider SDKs under SIGKILL: an agent process is killed in the middle
of a step, after the model answered with tool calls, restarted on the same store, and finishes
its task. Then the world is checked: the provider server's own request log shows that no
answered decision was asked for again, and the tool's own file shows what ran.

Two kill points, each for both adapters (``tests/models/agent_program.py``):

* ``before-step``: the model asked for one call, the call ran and its receipt is committed,
  the step is not: the restart replays the decision and the call from the ledger;
* ``between-calls``: the model asked for two calls (parallel tool calls); the first ran and its
  receipt is committed, the second's intent is not: the restart replays the decision and the
  first call, and makes the second.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.harness import Children
from tests.models.agents import tool_runs
from tests.models.providers import PROVIDERS, Provider
from tests.models.servers import ProviderServer, Received, Reply

pytestmark = pytest.mark.slow  # crash tests: real child processes, real signals

RUN_TIMEOUT = 60.0


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Children]:
    started = Children(tmp_path, module="tests.models.agent_program")
    try:
        yield started
    finally:
        started.close()


def script(provider: Provider, point: str) -> tuple[list[Reply], list[str]]:
    """The model's two answers for ``point``, and the orders its tool calls look up."""
    if point == "before-step":
        calls = [("call_k1", "lookup_order", {"order_id": "42"})]
    else:
        calls = [
            ("call_k1", "lookup_order", {"order_id": "42"}),
            ("call_k2", "lookup_order", {"order_id": "43"}),
        ]
    replies = [provider.calls("Looking them up.", *calls), provider.answer("All found.")]
    return replies, [c[2]["order_id"] for c in calls]


def answer_by_results(provider: Provider, replies: list[Reply]) -> Any:
    """The first answer to a request without tool results, the second to one with: a request
    asked again after the crash would get the first answer again, and show up twice."""

    def answer(request: Received) -> Reply:
        return replies[1] if provider.results(request.body) else replies[0]

    return answer


@pytest.mark.parametrize("point", ["before-step", "between-calls"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_an_agent_killed_mid_step_resumes_without_asking_the_model_again(
    provider: Provider, point: str, tmp_path: Path, children: Children
) -> None:
    db, log = tmp_path / "agents.db", str(tmp_path / "tool-runs.jsonl")
    replies, orders = script(provider, point)
    with ProviderServer(answer_by_results(provider, replies)) as server:
        first = children.start("first", provider.name, db, server.url, log, point)
        first.wait_report("dying", RUN_TIMEOUT)
        first.wait(RUN_TIMEOUT)
        assert first.proc.returncode == -9, first.describe()
        assert len(server.received) == 1  # the model answered with the tool calls
        ran_before = [r["order_id"] for r in tool_runs(log)]
        assert ran_before == (orders if point == "before-step" else orders[:1])

        second = children.start("second", provider.name, db, server.url, log, "none")
        second.wait_report("finished", RUN_TIMEOUT)
        assert second.wait(RUN_TIMEOUT) == 0, second.describe()
        bodies = server.bodies()

    assert second.value("answer") == '"All found."', second.describe()
    assert second.value("outcome") == "finished"
    # The provider's own log: one request per decision, none asked twice. The second one
    # carries the ids the provider gave in its first answer, with every call's result.
    assert len(bodies) == 2, bodies
    assert bodies[0] != bodies[1]
    ids = [c[0] for c in provider.sent_calls(bodies[1])]
    assert ids == [f"call_k{n}" for n in range(1, len(orders) + 1)]
    assert [r[0] for r in provider.results(bodies[1])] == ids
    # The tool's own file: each call ran once; after a kill between the calls, the second
    # ran in the restarted process.
    runs = tool_runs(log)
    assert [r["order_id"] for r in runs] == orders
    assert {r["pid"] for r in runs[len(ran_before) :]} <= {second.pid}
