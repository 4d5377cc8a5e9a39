"""Values nested too deep and results too large: each is refused where it comes in, by name —
never a bare ``RecursionError`` — and nothing of it is stored.

Nesting is refused by one limit, ``tether.actors.messages.MAX_NESTING`` levels of lists, dicts
and structs, not wherever the interpreter's stack of the moment runs out: a value that encodes
from a shallow stack must still decode at delivery, deeper in another. Results (a tool's, a
model's decision) are bounded by the runtime's ``max_message_bytes``, as messages are.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import tether
from tests.badinput import actors as b
from tests.badinput.actors import nested
from tether.actors.messages import MAX_NESTING, TOO_DEEP, nesting_problem
from tether.actors.session import GetSessionInfo

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    b.ARCHIVED.clear()
    b.RETURNS.clear()
    b.LOOKUPS.clear()
    b.SCRIPT.lines.clear()
    b.SCRIPT.requests.clear()
    yield
    b.ARCHIVED.clear()


def fast(path: Path, **kw: Any) -> tether.Runtime:
    return tether.Runtime(path, poll_interval=0.02, **kw)


def count(db: Path, table: str) -> int:
    with closing(sqlite3.connect(db)) as con, con:
        n: int = con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        return n


def longest(db: Path, table: str, column: str) -> int:
    sql = f"SELECT COALESCE(MAX(length({column})), 0) FROM {table}"
    with closing(sqlite3.connect(db)) as con, con:
        n: int = con.execute(sql).fetchone()[0]
        return n


# -- nesting ----------------------------------------------------------------------------------


class Leaf(tether.Message):
    """All scalars by its fields' types: one level, found without looking inside."""

    n: int
    label: str | None = None


class Branch(tether.Message):
    children: list[Any]


def wrapped(value: Any, levels: int) -> Any:
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [  # each MAX_NESTING levels deep on its deepest path
        wrapped(Leaf(n=1), MAX_NESTING - 1),
        Branch(children=[{"k": wrapped(0, MAX_NESTING - 3)}]),
        {"k": (wrapped(frozenset({1}), MAX_NESTING - 3),)},
        [*range(10_000), wrapped(1, MAX_NESTING - 1)],
    ],
    ids=["struct-innermost", "struct-dict-lists", "dict-tuple-set", "wide-then-deep"],
)
def test_the_limit_counts_every_list_tuple_set_dict_and_struct_on_the_deepest_path(
    value: Any,
) -> None:
    assert nesting_problem(value, msgspec.msgpack.encode(value)) is None
    deeper = [value]
    assert nesting_problem(deeper, msgspec.msgpack.encode(deeper)) == TOO_DEEP
    assert nesting_problem(deeper) == TOO_DEEP  # the same without the encoded form


@pytest.mark.parametrize("levels", [1000, 100_000, MAX_NESTING + 1])
async def test_a_message_nested_too_deep_is_refused_at_tell_and_ask_naming_the_depth(
    tmp_path: Path, levels: int
) -> None:
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        too_deep = b.Anything(value=nested(levels - 1))  # the struct is one level more
        with pytest.raises(tether.MessageRejected) as refused:
            await ledger.tell(too_deep)
        assert str(refused.value).startswith(
            f"actor 'l' does not accept Anything that cannot be stored: {TOO_DEEP}"
        )
        with pytest.raises(tether.MessageRejected, match="more than 256 levels deep"):
            await ledger.ask(too_deep, timeout=5)
        assert count(db, "mailbox") == 0
        # At the limit, it is stored and delivered.
        await ledger.tell(b.Anything(value=nested(MAX_NESTING - 1)))
        assert await ledger.ask(b.Log(), timeout=5) == [1]


async def test_spawn_arguments_nested_too_deep_are_refused_by_name_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        for levels in (1000, MAX_NESTING):  # in a dict of arguments: one level more
            with pytest.raises(tether.ConfigError) as refused:
                await rt.spawn(b.Summer, "s", start=nested(levels))
            assert f"spawn arguments cannot be stored: {TOO_DEEP}" in str(refused.value)
        assert await rt.store.get_actor("s") is None


async def test_tool_arguments_nested_too_deep_are_refused_by_name_and_nothing_is_recorded(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        archivist = await rt.spawn(b.Archivist, "a")
        for levels in (1000, MAX_NESTING):  # {"doc": ...}: one level more
            said = await archivist.ask(b.Archive(levels=levels), timeout=5)
            assert said == f"refused: arguments cannot be stored: {TOO_DEEP}", said
        assert count(db, "effects") == 0
        assert b.ARCHIVED == []
        said = await archivist.ask(b.Archive(levels=MAX_NESTING - 1), timeout=5)
        assert said.startswith("archived #1")
    [stored] = b.ARCHIVED
    assert stored == nested(MAX_NESTING - 1)


async def test_modified_arguments_nested_too_deep_are_refused_and_the_request_stays_pending(
    tmp_path: Path,
) -> None:
    async with fast(tmp_path / "a.db") as rt:
        archivist = await rt.spawn(b.Archivist, "a")
        await archivist.tell(b.Publish(doc={"title": "q3"}))
        with anyio.fail_after(5):
            while not (pending := await rt.approvals.pending()):
                await anyio.sleep(0.01)
        [request] = pending
        for levels in (1000, MAX_NESTING):
            with pytest.raises(tether.ToolInputError) as refused:
                await rt.approvals.decide(
                    request.request_id, tether.Modify(by="ann", args={"doc": nested(levels)})
                )
            assert refused.value.problem == f"arguments cannot be stored: {TOO_DEEP}"
        after = await rt.approvals.get(request.request_id)
        assert (after.status, after.decisions, after.args) == (
            "pending",
            [],
            {"doc": {"title": "q3"}},
        )
    assert b.ARCHIVED == []


async def test_a_model_call_with_arguments_nested_too_deep_ends_the_task_saying_why(
    tmp_path: Path,
) -> None:
    """The model's decision is the model effect's result: one that cannot be recorded is not,
    and (as any model failure) the task ends with the reason; the session serves on."""
    b.SCRIPT.lines[:] = [tether.ToolCall(tool="lookup", args={"order_id": nested(1000)})]
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        clerk = await rt.spawn(b.Clerk, "c1", goal="Check orders")
        with pytest.raises(tether.TaskFailed) as stopped:
            await clerk.ask(tether.UserMessage("check 1"), timeout=10)
        info = await clerk.ask(GetSessionInfo(), timeout=5)
        assert info.outcome.startswith("stopped: the model failed"), info.outcome
        assert TOO_DEEP in info.outcome
        assert stopped.value.status == "stopped"
        b.SCRIPT.lines[:] = [tether.FinalAnswer(text="fine now")]  # no decision was recorded
        fine = await clerk.ask(tether.UserMessage("check 2"), timeout=10)
        assert fine.answer == "fine now"
    assert b.LOOKUPS == []


# -- results over max_message_bytes -----------------------------------------------------------

TWENTY_MB = 20 * 1024 * 1024


async def test_a_model_answer_over_max_message_bytes_ends_the_task_by_name_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    """Decided: the task ends, the asker told why. A model that writes past the runtime's
    limit is broken (its answer is the task's deliverable, and no provider's output limit comes
    near a megabyte); asking it again would most likely run away again, at a model call's
    cost. Its answer is stored nowhere: not in the ledger, the journal or the reply."""
    b.SCRIPT.lines[:] = [tether.FinalAnswer(text="a" * TWENTY_MB)]
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        clerk = await rt.spawn(b.Clerk, "c1", goal="Check orders")
        with pytest.raises(tether.TaskFailed) as stopped:
            await clerk.ask(tether.UserMessage("check 1"), timeout=30)
        info = await clerk.ask(GetSessionInfo(), timeout=5)
        limit = rt.max_message_bytes
        assert info.outcome.startswith("stopped: the model failed"), info.outcome
        assert f"over the runtime's max_message_bytes ({limit})" in info.outcome
        # the answer's first characters at most, not the answer
        assert len(stopped.value.result.answer) < 1000
        assert len(str(stopped.value)) < 1000
        b.SCRIPT.lines[:] = [tether.FinalAnswer(text="ok")]  # no decision was recorded
        ok = await clerk.ask(tether.UserMessage("check 2"), timeout=10)
        assert ok.answer == "ok"
    for table, column in (("effects", "result"), ("journal", "payload"), ("replies", "payload")):
        assert longest(db, table, column) < 100_000, table


async def test_a_tool_result_over_max_message_bytes_is_told_to_the_model_and_the_task_goes_on(
    tmp_path: Path,
) -> None:
    """Decided: for a tool the model is told (it can ask for less: another page, a filter),
    and the task goes on. The call was made with the runtime's key, so its tool is a "retry"
    one: the ledger records a failure, without the result."""
    b.RETURNS["read_page"] = TWENTY_MB
    b.SCRIPT.lines[:] = [
        tether.ToolCall(tool="read_page", args={"url": "https://example.com/huge"}),
        tether.FinalAnswer(text="the page is too large to read"),
    ]
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        reader = await rt.spawn(b.Reader, "r1", goal="Read pages")
        answer = await reader.ask(tether.UserMessage("read it"), timeout=30)
        [row] = [r for r in await rt.store.find_effects(actor_id="r1") if r.tool == "read_page"]
    assert answer.answer == "the page is too large to read"
    told = b.SCRIPT.requests[1].bundle.tool_results[-1].error or ""
    assert f"is {TWENTY_MB + 5} bytes, over the runtime's max_message_bytes" in told, told
    assert (row.status, row.result) == ("failed", None)
    assert longest(db, "journal", "payload") < 100_000


async def test_an_oversized_result_of_a_tool_not_safe_to_call_again_is_held_for_a_person(
    tmp_path: Path,
) -> None:
    """A tool without idempotency: telling its handler "failed" about a call that was made
    invites a second one. Held, as any result that cannot be recorded."""
    b.RETURNS["render_report"] = 2000
    async with fast(tmp_path / "a.db", max_message_bytes=1000) as rt:
        archivist = await rt.spawn(b.Archivist, "a")
        await archivist.tell(b.Render(tool="render_report"))
        with anyio.fail_after(5):
            while not (held := await rt.quarantine.list()):
                await anyio.sleep(0.01)
        [effect] = held
        assert effect.tool == "render_report"
        assert "the call was made, but its result" in effect.reason
        assert "over the runtime's max_message_bytes (1000)" in effect.reason
        [row] = await rt.store.find_effects(actor_id="a", status="quarantined")
        assert row.result is None
        # A retry tool's oversized result is a failure its handler is told of.
        b.RETURNS["read_page"] = 2000
        said = await archivist.ask(b.Render(tool="read_page"), timeout=5)
        assert said.startswith("failed: Result 'ppp"), said
