"""``tether sessions``, ``show`` and ``tree`` on agent sessions: one status vocabulary with
``rt.tree()`` and ``SessionInfo``; a session shown with its goal, task, belief, frontier,
outcome, every approval and its journal as readable lines; sessions found under the
application's supervisor, never the supervisor itself; an expired breaker shown half-open.

The store is built with a real Runtime: a supervisor ``desk`` whose session ``desk-1`` had a
big refund approved (task 1 finished) and waits for a second approval (task 2 working), and a
top-level session ``solo`` that finished a small refund."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.actors import session_agents as sa
from tests.actors.session_agents import RefundAgent
from tests.cli_runs import cli, cli_json
from tests.runtime import guard_actors as ga
from tests.runtime.guard_actors import Call, Caller
from tether.actors.status import ACTOR_STATUSES, SESSION_STATUSES, actor_status, task_status
from tether.console import views
from tether.render.journal import describe
from tether.testing import FakeClock, ScriptedModel

GOAL = "Refund delivered orders"


class DeskAgent(tether.AgentSession):
    """Two tasks, each with a big refund held for approval."""

    tools = [sa.lookup_order, sa.refund, sa.big_refund]
    model = ScriptedModel(
        [
            tether.ToolCall(tool="lookup_order", args={"order_id": "43"}, thought="find it"),
            tether.ToolCall(
                tool="big_refund",
                args={"order_id": "43", "amount_cents": 90_000},
                thought="order 43 is delivered; refund 90000",
            ),
            tether.FinalAnswer(text="Refunded order 43."),
            tether.ToolCall(
                tool="big_refund",
                args={"order_id": "44", "amount_cents": 20_000},
                thought="a second big refund",
            ),
        ]
    )


class RefundDesk(tether.Supervisor):
    """The application's own supervisor, with one session under it."""

    children = [tether.ChildSpec(DeskAgent, "desk-1", goal=GOAL)]


async def _pending(rt: tether.Runtime, count: int) -> list[tether.ApprovalRequest]:
    with anyio.fail_after(30):
        while len(pending := await rt.approvals.pending()) < count:
            await anyio.sleep(0.01)
    return pending


async def _build(db: Path) -> None:
    async with tether.Runtime(db, poll_interval=0.02) as rt:
        await rt.spawn(RefundDesk, "desk")
        desk_1 = rt.ref("desk-1")
        await desk_1.tell(tether.UserMessage("please refund order 43"), dedup_key="t1")
        [first] = await _pending(rt, 1)
        await rt.approvals.decide(first.request_id, tether.Approve(by="manager"))
        await desk_1.ask(tether.UserMessage("please refund order 43"), timeout=30, dedup_key="t1")
        await desk_1.tell(tether.UserMessage("please refund order 44"), dedup_key="t2")
        await _pending(rt, 1)  # the second task's request: left pending
        solo = await rt.spawn(RefundAgent, "solo", goal=GOAL)
        await solo.ask(tether.UserMessage("please refund order 42"), timeout=30)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    sa.LOG.clear()
    ga.CALLS.clear()
    ga.FAILING["flaky"] = True
    yield
    sa.LOG.clear()
    ga.CALLS.clear()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built store, shared by the tests of this module: they only read it."""
    path = tmp_path_factory.mktemp("sessions") / "agents.db"
    anyio.run(_build, path, backend="asyncio")
    return path


def tree_statuses(nodes: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in nodes:
        out[node["id"]] = node["status"]
        out.update(tree_statuses(node["children"]))
    return out


# -- sessions: the sessions, under a supervisor too, and not the supervisor -----------------------


def test_sessions_lists_the_sessions_under_a_supervisor_and_not_the_supervisor(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = cli_json(capsys, "sessions", "--db", db)
    assert sorted(r["id"] for r in rows) == ["desk-1", "solo"]
    assert {r["id"]: r["parent"] for r in rows} == {"desk-1": "desk", "solo": None}
    assert "desk" in [a["id"] for a in cli_json(capsys, "actors", "--db", db)]


# -- one status vocabulary ------------------------------------------------------------------------


def test_sessions_and_tree_say_an_actors_status_in_the_same_words(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    in_tree = tree_statuses(cli_json(capsys, "tree", "--db", db))
    for command in ("sessions", "actors"):
        for row in cli_json(capsys, command, "--db", db):
            assert row["status"] == in_tree[row["id"]] == "running", (command, row)
    assert set(in_tree.values()) <= set(ACTOR_STATUSES)


def test_a_sessions_task_column_is_its_session_info_status(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = {r["id"]: r for r in cli_json(capsys, "sessions", "--db", db)}
    for session_id, (status, task) in {"desk-1": ("working", 2), "solo": ("finished", 1)}.items():
        info = cli_json(capsys, "show", session_id, "--db", db)["session"]
        assert info["status"] == rows[session_id]["task_status"] == status
        assert info["task"] == rows[session_id]["task"] == task
        assert status in SESSION_STATUSES
    code, out, _ = cli(capsys, "sessions", "--db", db)
    assert code == 0
    assert out.splitlines()[0].split() == [
        "ID",
        "CLASS",
        "STATUS",
        "TASK",
        "MAILBOX",
        "PARKED",
        "JOURNAL",
        "LEASE",
    ]
    assert re.search(r"^desk-1\s+\S+:DeskAgent\s+running\s+task 2 working\s", out, re.M), out
    assert re.search(r"^solo\s+\S+:RefundAgent\s+running\s+task 1 finished\s", out, re.M), out


def test_the_stored_status_maps_onto_the_actor_statuses() -> None:
    assert actor_status("active") == "running"
    assert actor_status("active", "restarting") == "restarting"
    assert actor_status("active", "backing off") == "backing off"
    assert actor_status("stopped") == "stopped"
    assert actor_status("failed", "restarting") == "failed"
    assert task_status("stopped: step limit (50) reached") == "stopped"
    assert task_status("finished") == "finished"
    assert task_status("paused: a word no tether wrote") == "stopped"


# -- show -----------------------------------------------------------------------------------------


def test_show_gives_a_sessions_status_goal_task_belief_frontier_and_outcome(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "show", "solo", "--db", db)
    assert (code, err) == (0, "")
    session = out.partition("session: ")[2].partition("\n\n")[0]
    assert session.startswith("finished\n")
    assert re.search(rf"^  goal +{GOAL}$", session, re.M), session
    assert re.search(r"^  task +1, 3 step\(s\) committed: please refund order 42$", session, re.M)
    assert re.search(r"^  outcome +finished$", session, re.M), session
    assert re.search(r"^  answer +Done: refunded 1500 on 42\.$", session, re.M), session
    assert re.search(r"^  belief +order 42 is delivered; refund 1500$", session, re.M), session

    code, out, _ = cli(capsys, "show", "desk-1", "--db", db)
    working = out.partition("session: ")[2].partition("\n\n")[0]
    assert working.startswith("working\n")
    assert re.search(r"^  task +2, 0 step\(s\) committed: please refund order 44$", working, re.M)
    # Committed steps only: task 2's step under way has not committed, so the belief shown
    # is the last committed one.
    assert re.search(r"^  belief +order 43 is delivered; refund 90000$", working, re.M), working
    assert "outcome" not in working  # the task under way has none yet


def test_show_lists_every_approval_of_the_session_not_only_the_pending_one(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "show", "desk-1", "--db", db)
    assert code == 0
    section = out.partition("\napprovals: ")[2]
    head, *lines = section.strip().splitlines()
    assert head == "2 (1 pending)"
    approved = [line for line in lines if " approved by manager (1/1)" in line]
    pending = [line for line in lines if " pending 0/1, deadline " in line]
    assert len(approved) == len(pending) == 1, section
    assert 'big_refund({"order_id":"43","amount_cents":90000' in approved[0]
    shown = cli_json(capsys, "show", "desk-1", "--db", db)
    assert sorted(a["status"] for a in shown["approvals"]) == ["approved", "pending"]
    assert [a["status"] for a in shown["pending_approvals"]] == ["pending"]


def test_show_renders_each_journal_event_as_a_line_of_its_kind(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "show", "solo", "--events", "100", "--db", db)
    assert code == 0
    journal = out.partition("\njournal: ")[2].partition("\n\n")[0]
    lines = [line.split(None, 1)[1] for line in journal.splitlines()[1:]]
    assert lines[0] == "task 1 started: please refund order 42"
    assert lines[1] == "step 1 of task 1: decide"
    assert lines[2] == 'model: call lookup_order({"order_id":"42"})'
    assert re.fullmatch(
        r'lookup_order\(\{"order_id":"42"\}\) → \{"amount_cents":1500,.*\} \[effect [0-9a-f]{8}\]',
        lines[3],
    ), lines[3]
    assert lines[4] == "step 2 of task 1: decide; belief: find it"
    assert lines[5] == 'model: call refund({"order_id":"42","amount_cents":1500})'
    assert lines[-2] == "model: final answer: Done: refunded 1500 on 42."
    assert lines[-1] == "task 1 ended: finished; answer: Done: refunded 1500 on 42."
    assert not any('"type":' in line for line in lines)  # no cut JSON


def test_the_journal_renderer_has_a_line_for_each_kind_and_falls_back_to_fields() -> None:
    calls = {
        "type": "ToolCalls",
        "calls": [
            {"type": "ToolCall", "tool": "a", "args": {"x": 1}},
            {"type": "ToolCall", "tool": "b", "args": {}, "malformed": "not JSON"},
        ],
        "usage": {"total_tokens": 42},
    }
    assert describe({"type": "ModelDecided", "decision": calls}) == (
        'model: 2 calls: a({"x":1}); b({}) (malformed: not JSON) [42 tokens]'
    )
    failed = {"tool": "refund", "args": {"id": 1}, "error": "declined"}
    assert (
        describe({"type": "ToolResult", "record": failed}) == 'refund({"id":1}) → error: declined'
    )
    assert describe({"type": "ToolResult", "record": failed, "invalid": True}) == (
        'refund({"id":1}) not made, invalid arguments: declined'
    )
    modified = {"tool": "refund", "args": {"id": 1, "cents": 50}, "result": "refunded 50"}
    modified["asked"] = {"id": 1, "cents": 75}
    assert describe({"type": "ToolResult", "record": modified}) == (
        'refund({"id":1,"cents":50}) modified by a person from ({"id":1,"cents":75}) → refunded 50'
    )
    assert describe({"type": "UserSaid", "text": "and order 43"}) == "user: and order 43"
    settled = {"request_id": "apr-1", "status": "rejected", "by": "ann", "reason": "no receipt"}
    assert describe({"type": "ApprovalSettled", **settled, "at": 0.0}) == (
        "approval apr-1 rejected by ann: no receipt"
    )
    assert describe({"type": "BreakerReset", "at": 0.0, "by": "ops"}) == "reset by ops"
    assert describe({"type": "Deposited", "amount": 5}) == "Deposited: amount=5"
    # A known kind with fields this version does not expect: its fields, not an exception.
    assert describe({"type": "TaskStarted", "task": 3}) == "TaskStarted: task=3"
    assert describe([1, 2]) == "[1,2]"


# -- an expired breaker is half-open --------------------------------------------------------------


async def _trip_breaker(db: Path, clock: FakeClock) -> None:
    """Trip the flaky tool's breaker (3 failed calls), open for 30 s on ``clock``."""
    async with tether.Runtime(db, poll_interval=0.02, clock=clock) as rt:
        c = await rt.spawn(Caller, "c1")
        for i in range(3):
            await c.ask(Call(n=i), timeout=30)


def breaker_line(text: str) -> str:
    return next(line for line in text.splitlines() if "breaker:flaky" in line)


def test_tree_shows_a_breaker_whose_open_time_is_over_as_half_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "guards.db"
    # Tripped on a clock a day behind this machine's: `tether tree` reads it a day later.
    anyio.run(_trip_breaker, db, FakeClock(start=time.time() - 86_400), backend="asyncio")
    code, out, _ = cli(capsys, "tree", "--db", db)
    assert code == 0
    line = breaker_line(out)
    assert "[half-open: the next call is a trial (opened: 3 of the last 3 calls failed)" in line
    assert "open until" not in line

    async def console_tree() -> list[dict[str, Any]]:
        async with tether.Runtime(db, serve=False) as admin:
            return await views.tree(admin)

    [guards] = [n for n in anyio.run(console_tree, backend="asyncio") if n["id"] == "tether.guards"]
    [node] = [n for n in guards["children"] if n["id"] == "breaker:flaky"]
    assert node["state"] == "breaker half-open"
    assert node["detail"].startswith("3 of the last 3 calls failed; a trial call decides")


def test_tree_shows_a_breaker_still_in_its_open_time_as_open_until_then(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "guards.db"
    # Tripped on a clock a day ahead of this machine's: its 30 s are still to come.
    anyio.run(_trip_breaker, db, FakeClock(start=time.time() + 86_400), backend="asyncio")
    code, out, _ = cli(capsys, "tree", "--db", db)
    assert code == 0
    assert re.search(r"\[open until \d\d:\d\d:\d\d \(3 of the last 3 calls failed\)", out), out


def test_the_live_tree_turns_half_open_when_the_open_time_passes(tmp_path: Path) -> None:
    async def run() -> tuple[str, str]:
        clock = FakeClock()
        async with tether.Runtime(tmp_path / "live.db", poll_interval=0.02, clock=clock) as rt:
            c = await rt.spawn(Caller, "c1")
            for i in range(3):
                await c.ask(Call(n=i), timeout=30)
            before = "\n".join(n.render() for n in await rt.tree())
            clock.advance(31)
            after = "\n".join(n.render() for n in await rt.tree())
        return breaker_line(before), breaker_line(after)

    before, after = anyio.run(run, backend="asyncio")
    assert "[open until " in before
    assert "[half-open: the next call is a trial" in after
