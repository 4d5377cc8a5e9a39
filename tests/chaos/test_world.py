"""The world under SIGKILL (issue #7), CI size: about 20 kills of the runtime process under a
workload of agent sessions (idempotent, non-idempotent and approval-gated tool calls) and
plain actors, then the world is checked from its own files. The large run is
``scripts/chaos.py``; the driver and the checker are in ``tests/chaos/world.py``.

Also here: the bug the world found (a user message joining a task while its step waited for
an approval made the step's replay a determinism violation), fixed in
``tether/actors/session.py``, as a minimal test that fails without the fix.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

import tether
from tests.chaos.world import Figures, WorldSpec, dump, run_world
from tests.chaos.world_programs import InterjectedAgent
from tether.actors.session import GetSessionInfo

SEED = int(os.environ.get("TETHER_CHAOS_SEED", "7"))


@pytest.mark.slow
def test_the_world_survives_twenty_kills(tmp_path: Path) -> None:
    spec = WorldSpec(kills=20, sessions=6, counters=3, sinks=2, tasks=4, seed=SEED)
    figures = run_world(tmp_path, spec)
    assert_world_held(figures, spec, tmp_path)


@pytest.mark.slow
def test_three_runtimes_serving_one_store_survive_kills_of_any_of_them(tmp_path: Path) -> None:
    # Three processes serve the same sessions; each round one of them, at random, is killed
    # and restarted: the others take its actors over (the same host: at once) and go on.
    spec = WorldSpec(kills=10, sessions=4, counters=3, sinks=2, tasks=3, seed=SEED, runtimes=3)
    figures = run_world(tmp_path, spec)
    assert_world_held(figures, spec, tmp_path)


@pytest.mark.slow
def test_three_runtimes_on_postgresql_survive_kills_of_any_of_them(
    tmp_path: Path, pg_url: str
) -> None:
    # The same world on a PostgreSQL store (a schema of this test run's database): three
    # processes on one server, each killed in turn; no pid shortcut is needed to go on.
    spec = WorldSpec(
        kills=8, sessions=4, counters=3, sinks=2, tasks=3, seed=SEED, runtimes=3, db=pg_url
    )
    figures = run_world(tmp_path, spec)
    assert figures.store == "postgresql"
    assert_world_held(figures, spec, tmp_path)


def assert_world_held(figures: Figures, spec: WorldSpec, where: Path) -> None:
    """Every must-be-zero figure is 0, every kill happened, and the workload did what it is
    for: every task finished, approvals both ways, effects, many messages."""
    dump(figures, where / "figures.json")
    print(figures.table())  # shown with -s, and in the report of a failure
    assert figures.failures() == [], f"{figures.table()}\n(files in {where})"
    assert figures.kills == spec.kills
    assert figures.tasks_finished >= spec.sessions
    assert figures.approvals_checked == figures.tasks_finished
    assert figures.charges_checked == figures.tasks_finished
    assert figures.messages_checked > 100
    assert sum(figures.kills_by_slot) == spec.kills
    assert len(figures.kills_by_slot) == spec.runtimes


def test_a_message_joining_a_task_parked_on_an_approval_does_not_break_its_replay(
    tmp_path: Path,
) -> None:
    anyio.run(_interjection, tmp_path / "agents.db")


async def _interjection(db: Path) -> None:
    async with tether.Runtime(db, poll_interval=0.05) as rt:
        session = await rt.spawn(InterjectedAgent, "s", goal="refund o-1")
        await session.tell(tether.UserMessage("refund o-1"))
        with anyio.fail_after(10):
            while not await rt.approvals.pending():
                await anyio.sleep(0.02)
        # The step waits for a person; the user adds something; the person approves.
        await session.tell(tether.UserMessage("and please hurry"))
        with anyio.fail_after(10):
            while not any(b"hurry" in r.payload for r in await rt.store.load_journal("s", 0, 100)):
                await anyio.sleep(0.02)
        [request] = await rt.approvals.pending()
        await rt.approvals.decide(request.request_id, tether.Approve(by="ops"))
        with anyio.move_on_after(5):
            while (await session.ask(GetSessionInfo(), timeout=5)).status == "working":
                await anyio.sleep(0.05)
        held = await rt.quarantine.list()
        assert held == [], [h.reason for h in held]
        info = await session.ask(GetSessionInfo(), timeout=5)
        assert (info.status, info.outcome) == ("finished", "finished")
