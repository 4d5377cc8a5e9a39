"""Load, CI-sized (issue #7): hundreds of agent sessions in one runtime on a SQLite file, with
passivation churning under the load. Nothing is lost, and the active cells and the runtime's
per-actor bookkeeping go back down once the sessions are idle. Runs ``benchmarks/load.py``'s
own phases and offline checks at a small size; asserts nothing about time."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

import tether
from tether.testing import ScriptedModel

pytestmark = pytest.mark.slow  # a load run: ~15-30 s on a 2-core VM

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "load.py"


def _bench() -> ModuleType:
    """benchmarks/load.py as a module the runtime can import its actor classes from."""
    name = "tether_bench_load"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, BENCH)
        assert spec is not None
        assert spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def load_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run shared by the tests below: 200 sessions x 5 messages, then a second runtime on
    the same file asks 40 of them once more (reopen + recovery), then the offline checks."""
    bench = _bench()
    sizes = bench.Sizes(
        sessions=200, per_session=5, senders=32, passivate_after=0.5, sample=40, sample_idle=5.0
    )
    db = tmp_path_factory.mktemp("load") / "load.db"
    return anyio.run(bench.run_all, sizes, db, backend="asyncio")


def test_nothing_is_lost(load_run: dict[str, Any]) -> None:
    """Every ask got its own answer exactly once; every journal holds exactly the tasks sent,
    finished, in order; 3 ledger rows per message at attempt 1; one reply per ask; mailbox and
    dead letters empty (see ``check_store``)."""
    assert load_run["problems"] == []
    counts = load_run["check"]["counts"]
    assert counts["tasks_in_journals"] == 200 * 5 + 40
    assert counts["mailbox"] == 0
    assert counts["dead_letters"] == 0
    assert counts["ledger"] == {
        "model/done/attempt 1": 2 * 1040,
        "echo/done/attempt 1": 1040,
    }


def test_sessions_passivate_under_load(load_run: dict[str, Any]) -> None:
    """Sessions left memory between their messages and came back: more activations than
    sessions, for sessions and for their loop guards."""
    counts = load_run["check"]["counts"]
    assert counts["session_activations"] > 200
    assert counts["guard_activations"] > 200


def test_active_cells_drop_back_after_passivation(load_run: dict[str, Any]) -> None:
    """After the drain, no session and no loop guard is active (only the guards' supervisor,
    which never passivates, may be), and no per-message bookkeeping is left."""
    books = load_run["books_after_drain"]
    assert books["cells"] <= 2, books
    for key in (
        "claimed",
        "replies",
        "activation.activating",
        "activation.not_before",
        "activation.failures",
        "supervision.held",
        "supervision.failures",
    ):
        assert books[key] == 0, (key, books)
    assert load_run["sample"]["books_after"]["cells"] <= 2


def test_no_per_actor_bookkeeping_outlives_passivation(load_run: dict[str, Any]) -> None:
    """With every session and loop guard passivated, the runtime holds nothing per actor:
    a long-lived runtime serving ever new session ids must not grow by one entry per id."""
    for books in (load_run["books_after_drain"], load_run["sample"]["books_after"]):
        assert books["guards._locks"] <= 2, books
        assert books["registry.known"] <= books["cells"] + 2, books


# -- the loop guard across its own passivation -------------------------------------------------
# Under load with a short passivate_after, every session's loop guard passivates and comes back
# over and over; it rebuilds its recent calls from the session's effects ledger. It must rebuild
# the history it had, or a session's loop is caught or not depending on the memory pressure.


@tether.tool(recovery="retry")
async def look(order_id: str) -> str:
    return f"order {order_id}"


SAME_CALL = tether.ToolCall(tool="look", args={"order_id": "42"})


class Repeater(tether.AgentSession):
    """Task 1 calls ``look`` twice, task 2 once more: the third identical call in a row."""

    tools = (look,)
    model = ScriptedModel(
        [
            SAME_CALL,
            SAME_CALL,
            tether.FinalAnswer(text="t1"),
            SAME_CALL,
            tether.FinalAnswer(text="t2"),
        ]
    )
    loop_policy = tether.LoopPolicy(repeat=3, on_repeat="stop")


async def _two_tasks(db: Path, passivate_after: float | None) -> str:
    async with tether.Runtime(db, passivate_after=passivate_after) as rt:
        ref = await rt.spawn(Repeater, "rep", goal="look order 42 up")
        assert (await ref.ask(tether.UserMessage("look 42 up"), timeout=30)).answer == "t1"
        if passivate_after is not None:
            with anyio.fail_after(30):
                while "rep" in rt.cells or "rep/loops" in rt.cells:
                    await anyio.sleep(0.02)
        with pytest.raises(tether.TaskFailed) as caught:  # the third call in a row: a loop
            await ref.ask(tether.UserMessage("and again"), timeout=30)
        answer: str = caught.value.result.answer
        return answer


@pytest.mark.anyio
async def test_loop_guard_sees_the_same_history_after_passivating(tmp_path: Path) -> None:
    stays = await _two_tasks(tmp_path / "stays.db", passivate_after=None)
    assert stays.startswith("I stopped before finishing")  # the third call in a row: a loop
    passivated = await _two_tasks(tmp_path / "passivated.db", passivate_after=0.2)
    assert passivated == stays
