"""``benchmarks/bench_resume.py`` at a small size: the world it builds is the one it promises
(a real process SIGKILLed with one unprocessed message and a 100-event journal per session),
a resume of it is checked and finishes every session, and its check is not a formality: it
names what is missing in a world that was not resumed."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.benchmarks.modules import bench

pytestmark = pytest.mark.slow  # two child processes: ~5-15 s on a 2-core VM

SESSIONS = 30


@pytest.fixture(scope="module")
def resume() -> ModuleType:
    return bench("bench_resume")


@pytest.fixture(scope="module")
def world(resume: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("world")
    info = resume.build(dest, resume.Sizes(runs=1, sessions=SESSIONS, concurrency=10))
    assert info["held"] == SESSIONS
    return dest


def _rows(path: Path, sql: str) -> list[Any]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
        return c.execute(sql).fetchall()


def test_the_killed_world_holds_one_unprocessed_message_and_a_100_event_journal_per_session(
    world: Path,
) -> None:
    db = world / "sessions.db"
    journals = dict(_rows(db, "SELECT actor_id, count(*) FROM journal GROUP BY actor_id"))
    held = _rows(
        db, "SELECT actor_id, attempts, wants_reply FROM mailbox WHERE type = 'UserMessage'"
    )
    assert sorted(journals) == [f"s{i:05d}" for i in range(SESSIONS)]
    assert set(journals.values()) == {100}
    # Each message was delivered (its attempt counted) and then held: none was processed.
    assert sorted(a for a, _, _ in held) == sorted(journals)
    assert {(attempts, wants) for _, attempts, wants in held} == {(1, 1)}
    assert _rows(db, "SELECT count(*) FROM effects") == [(0,)]
    # The process was killed, not closed: its runtime is still registered, its leases held.
    assert len(_rows(db, "SELECT runtime_id FROM runtimes")) == 1
    owners = _rows(db, "SELECT DISTINCT lease_owner FROM actors WHERE actor_id GLOB 's[0-9]*'")
    assert len(owners) == 1
    assert owners[0][0] is not None


def test_the_check_names_what_is_missing_in_a_world_not_resumed(
    resume: ModuleType, world: Path
) -> None:
    db = world / "sessions.db"
    held = dict(_rows(db, "SELECT msg_id, actor_id FROM mailbox WHERE type = 'UserMessage'"))
    problems = resume.check(db, held)
    assert f"{SESSIONS} sessions did not finish one new task as expected" in problems
    assert any(p.startswith(f"{SESSIONS} held messages without their answer") for p in problems)
    assert f"mailbox {SESSIONS}, dead letters 0: expected 0 and 0" in problems


def test_a_resume_finishes_every_session_and_passes_its_check(
    resume: ModuleType, world: Path
) -> None:
    runs = resume.ResumeRuns(world)
    sample = runs()
    ((count, seconds),) = sample.values()
    assert count == SESSIONS
    assert seconds > 0
    (result,) = runs.results
    assert result["problems"] == []
    fractions = [result["fractions"][name] for name, _ in resume.FRACTIONS]
    assert fractions == sorted(fractions)
    assert 0 < fractions[0] <= fractions[-1] <= 1
    # The world itself is left as the kill left it, for the next run.
    assert _rows(
        world / "sessions.db", "SELECT count(*) FROM mailbox WHERE type = 'UserMessage'"
    ) == [(SESSIONS,)]
