"""I9 under SIGKILL: a payment held for approval outlives the agent process that asked for it,
and decisions made from other processes — while the agent is down or up — release exactly the
approved call, once.

The agent (``python -m tests.chaos.approval_programs agent``) runs one session on a real SQLite
file; its ``pay`` tool requires approval and appends a line to a log file when it really runs,
so executions are counted across every process. People decide from their own processes
(``... approval_programs decide``, a ``Runtime(db, serve=False)``). The test SIGKILLs the agent
(or the agent kills itself at an exact point, after the approval and before the call) and
starts it again on the same store. The child programs are in ``tests/chaos/approval_programs.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.chaos.approval_programs import (
    EXIT_CLOSED,
    EXIT_REFUSED,
    REQUESTED,
    SESSION,
)
from tests.chaos.harness import ROOT, Child, Children

pytestmark = pytest.mark.slow  # crash tests: real child processes, real signals

WAIT = 20.0  # every wait on a child, generously (each step takes well under a second)
QUIET = 0.3  # how long "nothing ran" is watched for: six of the agent's poll intervals
PICKUP = 2.0  # a decision made while the agent is up reaches the call within this (poll: 0.05 s)
MODIFIED = {"to": "acme", "cents": 500}


class ApprovalChild(Child):
    """A :class:`Child` running ``python -m tests.chaos.approval_programs`` instead."""

    def __init__(self, directory: Path, name: str, scenario: str, *args: object) -> None:
        self.name = name
        self.out = directory / f"{name}.out"
        self.err = directory / f"{name}.err"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, "-m", "tests.chaos.approval_programs", scenario, *map(str, args)]
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=err, env=env)
        self.pid = self.proc.pid


class ApprovalChildren(Children):
    def start(self, name: str, scenario: str, *args: object) -> Child:
        n = self._names[name] = self._names.get(name, 0) + 1
        child = ApprovalChild(self.directory, f"{name}-{n}", scenario, *args)
        self.started.append(child)
        return child


class World:
    """One agent store, the log of the tool's executions, and every child run on them."""

    def __init__(self, tmp_path: Path) -> None:
        self.db = tmp_path / "agents.db"
        self.log = tmp_path / "payments.jsonl"
        self.children = ApprovalChildren(tmp_path)

    # -- the agent --

    def agent(self, actor: str = "Payer", kill: str = "none") -> Child:
        return self.children.start("agent", "agent", self.db, self.log, actor, kill)

    def pending(
        self, agent: Child, where: Callable[[dict[str, Any]], bool] = lambda r: True
    ) -> dict[str, Any]:
        """Wait until ``agent`` reports one pending request matching ``where``; return it."""

        def found() -> bool:
            value = agent.value("pending")
            return value is not None and all(where(r) for r in json.loads(value))

        agent.wait_for(found, WAIT, f"{agent.name} to report a pending request")
        requests = self.reported(agent, "pending")
        assert len(requests) == 1, self.describe()
        return requests[0]  # type: ignore[no-any-return]

    def finish(self, agent: Child) -> None:
        """Wait until ``agent`` saw its session's outcome and exited cleanly."""
        assert agent.wait(WAIT) == 0, self.describe()
        assert agent.has("finished"), self.describe()

    def kill(self, agent: Child) -> float:
        """SIGKILL ``agent`` (it must still be running) and reap it; the time it was dead by."""
        assert agent.kill(), f"the agent was not running when the test killed it\n{self.describe()}"
        return time.time()

    # -- the people --

    def decide(self, request_id: str, kind: str, by: str, extra: str = "") -> tuple[int, Child]:
        """Decide from a process of its own; its exit code, and the child (for its reports)."""
        child = self.start_decision(request_id, kind, by, extra)
        return child.wait(WAIT), child

    def start_decision(self, request_id: str, kind: str, by: str, extra: str = "") -> Child:
        return self.children.start("decide", "decide", self.db, request_id, kind, by, extra)

    def decided(self, request_id: str, kind: str, by: str, extra: str = "") -> dict[str, Any]:
        """A decision that must be accepted: the request as the deciding process left it."""
        code, child = self.decide(request_id, kind, by, extra)
        assert code == 0, self.describe()
        return self.reported(child, "decided")  # type: ignore[no-any-return]

    # -- the world --

    def calls(self) -> list[dict[str, Any]]:
        """Every execution of the tool, by any process, in order."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def ledger_now(self) -> list[dict[str, Any]]:
        """The session's ledger rows, read from the store in this process (no agent running)."""

        async def read() -> list[dict[str, Any]]:
            async with tether.Runtime(self.db, serve=False) as rt:
                rows = await rt.store.find_effects(actor_id=SESSION)
            return [{"key": r.key, "status": r.status, "attempts": r.attempts} for r in rows]

        return anyio.run(read)

    def reported(self, child: Child, key: str) -> Any:
        value = child.value(key)
        assert value is not None, f"no {key}= line\n{self.describe()}"
        return json.loads(value)

    def describe(self) -> str:
        return f"tool executions: {self.calls()}\n{self.children.describe()}"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    try:
        yield w
    finally:
        w.children.close()


def ran_once(w: World, agent: Child, args: dict[str, Any]) -> dict[str, Any]:
    """The tool ran exactly once, in ``agent``, with ``args``, under the key the ledger shows."""
    [call] = w.calls()
    assert call["pid"] == agent.pid, w.describe()
    assert {"to": call["to"], "cents": call["cents"]} == args, w.describe()
    assert w.reported(agent, "outcomes") == [f"paid {args['cents']} to {args['to']}"]
    [row] = w.reported(agent, "ledger")
    assert (row["tool"], row["status"], row["args"]) == ("pay", "done", args), w.describe()
    assert row["key"] == call["key"], w.describe()
    return row  # type: ignore[no-any-return]


def nothing_ran(w: World, agent: Child) -> None:
    """For a few of the agent's poll intervals: no execution, no outcome."""
    time.sleep(QUIET)
    assert w.calls() == [], w.describe()
    assert agent.alive(), w.describe()
    assert not agent.has("outcomes"), w.describe()


# -- 1. a pending request survives the agent ---------------------------------------------------


def test_a_request_pending_when_the_agent_is_killed_is_pending_again_with_its_original_deadline(
    world: World,
) -> None:
    first = world.agent()
    asked = world.pending(first)
    assert (asked["tool"], asked["args"], asked["status"]) == ("pay", REQUESTED, "pending")
    assert asked["deadline"] > time.time() + 3000  # the actor's policy: an hour
    world.kill(first)
    assert world.calls() == [], world.describe()

    again = world.agent()  # re-sends its payment too: deduplicated, no second request
    still = world.pending(again)
    assert still == asked, world.describe()  # same id, same deadline, same call, no decision
    nothing_ran(world, again)

    # Still live in the restarted agent: a rejection from another process reaches the session.
    world.decided(asked["request_id"], "reject", "carol", "no invoice yet")
    world.finish(again)
    assert world.reported(again, "outcomes") == ["rejected by carol: no invoice yet"]
    assert world.reported(again, "ledger") == [], world.describe()  # no intent, no call
    assert world.calls() == [], world.describe()


# -- 2. a decision made while the agent is down ------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "extra", "runs"),
    [("approve", "", REQUESTED), ("modify", json.dumps(MODIFIED), MODIFIED)],
    ids=["approved", "modified"],
)
def test_a_decision_made_while_the_agent_is_down_runs_the_call_once_when_it_comes_back(
    world: World, kind: str, extra: str, runs: dict[str, Any]
) -> None:
    first = world.agent()
    asked = world.pending(first)
    world.kill(first)

    decided = world.decided(asked["request_id"], kind, "alice", extra)
    assert (decided["status"], decided["args"]) == ("approved", runs), world.describe()
    assert world.calls() == [], world.describe()  # nobody serves the store: nothing ran

    back = world.agent()
    world.finish(back)
    row = ran_once(world, back, runs)
    assert row["attempts"] == 1, world.describe()
    [request] = world.reported(back, "approvals")
    assert request["request_id"] == asked["request_id"]
    assert (request["args"], request["requested_args"]) == (runs, REQUESTED)
    assert not back.has("pending"), world.describe()  # applied at once, never pending again


# -- 3. a decision made while the agent is up --------------------------------------------------


def test_a_decision_from_another_process_while_the_agent_is_up_is_picked_up_by_its_poll(
    world: World,
) -> None:
    agent = world.agent()
    asked = world.pending(agent)
    decided = world.decided(asked["request_id"], "approve", "alice")
    world.finish(agent)
    ran_once(world, agent, REQUESTED)
    [call] = world.calls()
    latency = call["at"] - decided["decisions"][-1]["at"]
    # The deadline is an hour away: only the agent's scan of the store can have woken it.
    assert 0 <= latency < PICKUP, f"picked up after {latency:.3f} s\n{world.describe()}"


# -- 4. a deadline that passes while the agent is down -----------------------------------------


@pytest.mark.parametrize(
    ("actor", "outcome"),
    [("HastyPayer", "rejected"), ("TrustingPayer", "approved")],
    ids=["default-reject", "default-approve"],
)
def test_a_deadline_passed_while_the_agent_was_down_applies_the_default_and_refuses_late_decisions(
    world: World, actor: str, outcome: str
) -> None:
    first = world.agent(actor)
    asked = world.pending(first)
    dead_at = world.kill(first)
    assert dead_at < asked["deadline"], "the agent outlived the deadline: nothing was tested"
    while time.time() < asked["deadline"] + 0.05:
        time.sleep(0.05)

    # Past the deadline, with no runtime serving the store: the request is still stored as
    # pending, and a late decision is refused by the deciding process itself.
    code, late = world.decide(asked["request_id"], "approve", "late-larry")
    assert code == EXIT_CLOSED, world.describe()
    assert "deadline passed" in (late.value("closed") or ""), world.describe()
    assert world.calls() == [], world.describe()

    back = world.agent(actor)
    world.finish(back)
    [request] = world.reported(back, "approvals")
    assert request["status"] == outcome, world.describe()
    [default] = request["decisions"]  # the late decision left no trace
    kind = {"rejected": "reject", "approved": "approve"}[outcome]
    assert (default["by"], default["kind"]) == ("timeout", kind), world.describe()
    assert default["at"] > dead_at, world.describe()  # applied by the restarted agent
    if outcome == "rejected":
        [said] = world.reported(back, "outcomes")
        assert said.startswith("rejected by timeout: no decision within the deadline"), said
        assert world.calls() == [], world.describe()
    else:
        ran_once(world, back, REQUESTED)

    code, later = world.decide(asked["request_id"], "reject", "late-larry", "too late")
    assert code == EXIT_CLOSED, world.describe()
    assert f"already {outcome}" in (later.value("closed") or ""), world.describe()


def test_a_deadline_that_passes_after_the_restart_applies_the_default_without_the_dead_timer(
    world: World,
) -> None:
    # The agent that parked the step also set the timer for its deadline; it died with it. The
    # restarted agent must find the deadline in the store.
    first = world.agent("HastyPayer")
    asked = world.pending(first)
    world.kill(first)
    back = world.agent("HastyPayer")
    assert world.pending(back) == asked, world.describe()
    world.finish(back)
    [said] = world.reported(back, "outcomes")
    assert said.startswith("rejected by timeout: no decision within the deadline"), said
    [request] = world.reported(back, "approvals")
    [default] = request["decisions"]
    assert default["by"] == "timeout", world.describe()
    assert asked["deadline"] <= default["at"] < asked["deadline"] + PICKUP, world.describe()
    assert world.calls() == [], world.describe()


# -- 5. approval of X never runs Y, whatever dies in between -----------------------------------


@pytest.mark.parametrize("kill", ["before-intent", "after-intent"])
@pytest.mark.parametrize(
    ("kind", "extra", "runs"),
    [("approve", "", REQUESTED), ("modify", json.dumps(MODIFIED), MODIFIED)],
    ids=["approved", "modified"],
)
def test_an_agent_killed_between_the_approval_and_the_call_runs_exactly_the_approved_call_once(
    world: World, kind: str, extra: str, runs: dict[str, Any], kill: str
) -> None:
    first = world.agent(kill=kill)  # SIGKILLs itself around the intent of the approved call
    asked = world.pending(first)
    world.decided(asked["request_id"], kind, "alice", extra)
    assert first.wait(WAIT) == -signal.SIGKILL, world.describe()
    assert first.value("dying") == kill, world.describe()
    assert world.calls() == [], world.describe()  # approved, never called
    intents = world.ledger_now()
    if kill == "after-intent":
        [intent] = intents  # the call's slot and key, recorded before the call
        assert (intent["status"], intent["attempts"]) == ("pending", 1), world.describe()
    else:
        assert intents == [], world.describe()

    back = world.agent()
    world.finish(back)
    row = ran_once(world, back, runs)  # the approved call, never the requested one if modified
    if kill == "after-intent":
        assert row["key"] == intent["key"], world.describe()  # the same idempotency key
        assert row["attempts"] == 2, world.describe()  # the dead attempt counts; it never called
        assert "did not report back" in row["history"][0], world.describe()
    else:
        assert row["attempts"] == 1, world.describe()
    [request] = world.reported(back, "approvals")
    assert (request["status"], request["args"]) == ("approved", runs), world.describe()


# -- 6. a quorum of two, from two processes ----------------------------------------------------


def test_a_quorum_of_two_needs_two_people_deciding_from_separate_processes(world: World) -> None:
    agent = world.agent("QuorumPayer")
    asked = world.pending(agent)
    assert asked["approvers_needed"] == 2

    one = world.decided(asked["request_id"], "approve", "alice")
    assert (one["status"], one["approved_by"]) == ("pending", ["alice"]), world.describe()
    code, again = world.decide(asked["request_id"], "approve", "alice")
    assert code == EXIT_REFUSED, world.describe()
    assert "already approved" in (again.value("refused") or ""), world.describe()
    world.pending(agent, lambda r: r["approved_by"] == ["alice"])  # the agent sees it, waits
    nothing_ran(world, agent)

    two = world.decided(asked["request_id"], "approve", "bob")
    assert (two["status"], two["approved_by"]) == ("approved", ["alice", "bob"]), world.describe()
    world.finish(agent)
    ran_once(world, agent, REQUESTED)


def test_two_people_approving_at_once_while_the_agent_is_down_reach_the_quorum_once(
    world: World,
) -> None:
    first = world.agent("QuorumPayer")
    asked = world.pending(first)
    world.kill(first)

    deciders = [world.start_decision(asked["request_id"], "approve", who) for who in ("al", "bo")]
    assert [d.wait(WAIT) for d in deciders] == [0, 0], world.describe()
    statuses = sorted(world.reported(d, "decided")["status"] for d in deciders)
    assert statuses == ["approved", "pending"], world.describe()  # one of them completed it
    assert world.calls() == [], world.describe()

    back = world.agent("QuorumPayer")
    world.finish(back)
    ran_once(world, back, REQUESTED)
    [request] = world.reported(back, "approvals")
    assert sorted(request["approved_by"]) == ["al", "bo"], world.describe()
