"""Bad messages and bad settings: each is refused with an error that names the problem, or
ends in a dead letter with its reason; nothing half-stored, and the runtime keeps serving."""

from __future__ import annotations

import math
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import tether
from tests.badinput import actors as b
from tether.actors.session import GetSessionInfo

pytestmark = pytest.mark.anyio


def fast(path: Path | str, **kw: Any) -> tether.Runtime:
    kw.setdefault("poll_interval", 0.02)
    kw.setdefault("lease_ttl", 2.0)
    return tether.Runtime(path, **kw)


def rows(db: Path, sql: str, *params: Any) -> list[Any]:
    with closing(sqlite3.connect(db)) as con, con:
        return con.execute(sql, params).fetchall()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    b.FAILS.clear()
    b.LOOKUPS.clear()
    b.SCRIPT.lines.clear()
    b.SCRIPT.requests.clear()


# -- unknown message types -------------------------------------------------------------------


async def test_an_unaccepted_type_is_rejected_naming_actor_type_and_accepted_ones(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(tether.MessageRejected) as info:
            await ledger.tell(b.Stranger())
        assert "'l'" in str(info.value)
        assert "Stranger" in str(info.value)
        assert "Add" in info.value.accepted
        with pytest.raises(tether.MessageRejected):
            await ledger.ask(b.Stranger(), timeout=1)
        with pytest.raises(tether.MessageRejected):
            await ledger.tell(tether.Terminated(actor_id="x", reason="y"))
        assert rows(db, "SELECT COUNT(*) FROM mailbox") == [(0,)]
        assert await ledger.ask(b.Log(), timeout=5) == []


async def test_a_stored_row_of_a_type_the_class_no_longer_has_is_dead_lettered(
    tmp_path: Path,
) -> None:
    """A row written by an older version of the class (its type was removed since) cannot be
    decoded: it goes to dead letters with the type in its history; the next message runs."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        await ledger.tell(b.Add(amount=1), delay=0.4)
        await ledger.tell(b.Add(amount=2), delay=0.4)
    stale = msgspec.msgpack.encode(b.Stranger(amount=5))
    with closing(sqlite3.connect(db)) as con, con:
        con.execute(
            "UPDATE mailbox SET type = 'Stranger', payload = ? "
            "WHERE seq = (SELECT MIN(seq) FROM mailbox)",
            (stale,),
        )
    async with fast(db) as rt:
        with anyio.fail_after(10):
            while await rt.ref("l").ask(b.Log(), timeout=5) != [2]:
                await anyio.sleep(0.05)
        [letter] = await rt.dead_letters.list()
        assert letter.type == "Stranger"
        assert letter.reason.startswith("undecodable message")
        assert "Stranger" in letter.errors[-1]


# -- fields of the wrong type, values that cannot be encoded ----------------------------------


async def test_a_field_of_the_wrong_type_is_refused_at_tell_naming_the_field(
    tmp_path: Path,
) -> None:
    """msgspec does not check types on construction: the sender's Add(amount="ten") is refused
    by the send's check (tell and ask), naming the field; nothing is stored and the actor goes
    on."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(tether.MessageRejected, match=r"Add with an invalid field .*\$\.amount"):
            await ledger.tell(b.Add(amount="ten"))  # type: ignore[arg-type]
        with pytest.raises(tether.MessageRejected, match=r"\$\.amount"):
            await ledger.ask(b.Add(amount="ten"), timeout=5)  # type: ignore[arg-type]
        assert rows(db, "SELECT COUNT(*) FROM mailbox") == [(0,)]
        await ledger.tell(b.Add(amount=3))
        assert await ledger.ask(b.Log(), timeout=5) == [3]
        assert await rt.dead_letters.list() == []


async def test_a_stored_field_of_the_wrong_type_is_dead_lettered_with_the_field_named(
    tmp_path: Path,
) -> None:
    """A row already in the mailbox with a field of the wrong type (written by an older version
    of the sender, or by hand) fails its decoding on delivery, naming the field. The actor goes
    on with the messages behind it."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        await ledger.tell(b.Add(amount=1), delay=0.4)
        await ledger.tell(b.Add(amount=2), delay=0.4)
    wrong = msgspec.msgpack.encode(b.Add(amount="ten"))  # type: ignore[arg-type]
    with closing(sqlite3.connect(db)) as con, con:
        con.execute(
            "UPDATE mailbox SET payload = ? WHERE seq = (SELECT MIN(seq) FROM mailbox)", (wrong,)
        )
    async with fast(db) as rt:
        with anyio.fail_after(10):
            while await rt.ref("l").ask(b.Log(), timeout=5) != [2]:
                await anyio.sleep(0.05)
        [letter] = await rt.dead_letters.list()
        assert "$.amount" in letter.errors[-1]
        assert letter.reason.startswith("undecodable message")


async def test_a_value_that_cannot_be_encoded_is_refused_with_a_tether_error(
    tmp_path: Path,
) -> None:
    """Nothing is stored; the error belongs to tether's tree (it is a MessageRejected, still a
    TypeError for callers catching that) and names the message type."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(TypeError) as info:
            await ledger.tell(b.Anything(value=object()))
        assert isinstance(info.value, tether.TetherError), repr(info.value)
        assert "Anything" in str(info.value)
        with pytest.raises(tether.TetherError):
            await ledger.ask(b.Anything(value=[1, 2j]), timeout=1)
        assert rows(db, "SELECT COUNT(*) FROM mailbox") == [(0,)]
        assert await ledger.ask(b.Log(), timeout=5) == []


# -- oversize payloads -------------------------------------------------------------------------


async def test_an_oversize_message_is_rejected_naming_its_size_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    async with fast(db, max_message_bytes=1000) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        big = b.Blob(data=b"x" * 2000)
        size = len(msgspec.msgpack.encode(big))
        with pytest.raises(tether.MessageRejected, match=f"{size} bytes.*limit 1000"):
            await ledger.tell(big)
        with pytest.raises(tether.MessageRejected, match="limit 1000"):
            await ledger.ask(big, timeout=1)
        with pytest.raises(tether.MessageRejected, match="limit 1000"):
            await ledger.tell(big, dedup_key="k")
        assert rows(db, "SELECT COUNT(*) FROM mailbox") == [(0,)]
        assert rows(db, "SELECT COUNT(*) FROM dedup") == [(0,)]
        # The limit is inclusive: a message of exactly max_message_bytes goes through.
        overhead = len(msgspec.msgpack.encode(b.Blob(data=b"")))
        fits = b.Blob(data=b"y" * (1000 - overhead - 1))
        fits = b.Blob(data=b"y" * (len(fits.data) + 1000 - len(msgspec.msgpack.encode(fits))))
        assert len(msgspec.msgpack.encode(fits)) == 1000
        await ledger.tell(fits)
        assert await ledger.ask(b.Log(), timeout=5) == [len(fits.data)]
        # The dedup key of the refused send was not taken.
        await ledger.tell(b.Add(amount=1), dedup_key="k")
        assert await ledger.ask(b.Log(), timeout=5) == [len(fits.data), 1]


async def test_an_oversize_message_sent_from_a_handler_fails_that_step_only(
    tmp_path: Path,
) -> None:
    """From inside a handler the send raises in the handler: the step is not committed (its
    event is gone), the message ends in dead letters with the size named."""
    db = tmp_path / "a.db"
    async with fast(db, max_message_bytes=200, max_attempts=2) as rt:
        await rt.spawn(b.Ledger, "sink")
        relay = await rt.spawn(b.Relay, "relay")
        await relay.tell(b.RelayBlob(size=500))
        await relay.tell(b.RelayBlob(size=10))
        with anyio.fail_after(10):
            while await rt.ref("sink").ask(b.Log(), timeout=5) != [10]:
                await anyio.sleep(0.05)
        [letter] = await rt.dead_letters.list()
        assert "limit 200" in letter.errors[-1]
        assert await relay.ask(b.Log(), timeout=5) == [10]


# -- bad send options --------------------------------------------------------------------------


@pytest.mark.parametrize("delay", [-1, math.nan, -math.inf, math.inf, "5", True])
async def test_a_bad_delay_is_refused_by_name(delay: float) -> None:
    async with fast(":memory:") as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(tether.ConfigError, match="delay"):
            await ledger.tell(b.Add(amount=1), delay=delay)


async def test_a_number_beyond_64_bits_is_refused_where_it_is_sent_naming_it(
    tmp_path: Path,
) -> None:
    """msgpack holds ints of 64 bits: a bigger one is bad input at the send, at the spawn and
    in a reply, each named; nothing is stored."""
    async with fast(tmp_path / "a.db", max_attempts=1) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(tether.MessageRejected, match="cannot be encoded"):
            await ledger.tell(b.Add(amount=2**70))
        with pytest.raises(tether.ConfigError, match="spawn arguments cannot be stored"):
            await rt.spawn(b.Summer, "s2", start=2**70)
        assert await rt.store.get_actor("s2") is None
        assert await ledger.ask(b.Log(), timeout=5) == []
        summer = await rt.spawn(b.Summer, "s")
        await summer.tell(b.Sum(amount=2**63))
        await summer.tell(b.Sum(amount=2**63))  # the total no longer fits, each event does
        assert await summer.ask(b.Total(), timeout=5) == str(2**64)


async def test_a_state_beyond_64_bits_skips_its_snapshot_and_the_actor_goes_on(
    tmp_path: Path,
) -> None:
    """Snapshots only save folding: a state that cannot be encoded commits its steps without
    one (the actor used to fail on every such step) and recovery folds the journal."""
    db = tmp_path / "a.db"
    async with fast(db, max_attempts=1, snapshot_every=1) as rt:
        summer = await rt.spawn(b.Summer, "s")
        for _ in range(3):
            await summer.tell(b.Sum(amount=2**63 - 1))
        assert await summer.ask(b.Total(), timeout=5) == str(3 * (2**63 - 1))
        assert await rt.dead_letters.list() == []
        snapshot = await rt.store.load_snapshot("s")
        assert snapshot is not None
        assert snapshot.seq == 2  # the last one that fit
    async with fast(db, snapshot_every=1) as rt:
        assert await rt.ref("s").ask(b.Total(), timeout=5) == str(3 * (2**63 - 1))


@pytest.mark.parametrize(
    ("what", "named"),
    [
        ("dict", "persist() takes a tether.Event, not dict"),
        ("stranger", "Unfolded is not an event type of Misuser.apply (it folds: Summed)"),
    ],
)
async def test_persisting_what_apply_does_not_fold_fails_the_step_by_name(
    tmp_path: Path, what: str, named: str
) -> None:
    async with fast(tmp_path / "a.db", max_attempts=1) as rt:
        m = await rt.spawn(b.Misuser, "m")
        with pytest.raises(tether.MessageDeadLettered) as caught:
            await m.ask(b.Misuse(what=what), timeout=5)
        assert f"ConfigError: m: {named}" in caught.value.errors[0]
        assert await m.ask(b.Misuse(what="ok"), timeout=5) == 1  # nothing else was folded
        assert len(await rt.store.load_journal("m", 0, 10)) == 1


async def test_a_reply_of_the_wrong_type_reaches_another_process_as_a_tether_error(
    tmp_path: Path,
) -> None:
    """An asker in another process decodes the stored reply as the handler's declared return
    type: one that does not fit is a CorruptRecordError naming the actor, not msgspec's own
    ValidationError."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        await rt.spawn(b.Fibber, "f")
        async with fast(db, serve=False) as admin:
            with pytest.raises(tether.CorruptRecordError, match="reply of 'f' to message"):
                await admin.ref("f").ask(b.Fib(), timeout=5)


@pytest.mark.parametrize("key", ["", 7, b"k"])
async def test_a_bad_dedup_key_is_refused_by_name(key: Any) -> None:
    async with fast(":memory:") as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(tether.ConfigError, match="dedup_key"):
            await ledger.tell(b.Add(amount=1), dedup_key=key)


@pytest.mark.parametrize("timeout", [0, -1, -math.inf])
async def test_a_bad_ask_timeout_is_refused_by_name(timeout: Any) -> None:
    async with fast(":memory:") as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(tether.ConfigError, match="timeout"):
            await ledger.ask(b.Log(), timeout=timeout)
        assert await ledger.ask(b.Log(), timeout=5) == []


@pytest.mark.parametrize("timeout", [math.nan, "5", True])
async def test_a_nan_or_non_number_ask_timeout_is_refused_by_name(timeout: Any) -> None:
    """NaN compares false with everything, so ``timeout <= 0`` lets it through (the ask then
    never times out); a string raises a bare TypeError from the comparison."""
    async with fast(":memory:") as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(tether.ConfigError, match="timeout"):
            await ledger.ask(b.Log(), timeout=timeout)


@pytest.mark.parametrize("actor_id", ["", "x" * 257, 7, None])
async def test_a_bad_actor_id_is_refused_by_name(actor_id: Any) -> None:
    async with fast(":memory:") as rt:
        with pytest.raises(tether.ConfigError, match="actor id"):
            await rt.spawn(b.Ledger, actor_id)


# -- a model returning malformed tool calls -----------------------------------------------------


async def test_malformed_calls_are_fed_back_once_each_and_a_valid_call_resets_the_count(
    tmp_path: Path,
) -> None:
    """Unknown field, then a valid call, then a wrong type, then a valid call: each bad call
    is fed back, none escalates (they are not in a row), and the task finishes."""
    async with fast(tmp_path / "a.db") as rt:
        clerk = await rt.spawn(b.FixedClerk, "c1", goal="Check orders")
        result = await clerk.ask(tether.UserMessage("check 42 and 43"), timeout=10)
        info = await clerk.ask(GetSessionInfo(), timeout=5)
    assert result.answer == "both delivered"
    assert info.outcome == "finished"
    assert b.LOOKUPS == ["42", "43"]


@pytest.mark.parametrize(
    ("first", "second", "problem"),
    [
        (
            tether.ToolCall(tool="refund", args={}),
            tether.ToolCall(tool="nope", args={}),
            "there is no tool named 'nope'",
        ),
        (
            tether.ToolCall(tool="lookup", args={}),
            tether.ToolCall(tool="lookup", args={}),
            "missing required field `order_id`",
        ),
        (
            tether.ToolCall(tool="lookup", args={"order_id": "1", "verbose": "yes"}),
            tether.ToolCall(tool="lookup", args={"order_id": "1", "extra": 1}),
            "unknown field `extra`",
        ),
        (
            tether.ToolCall(tool="lookup", args={"order_id": "1", "idempotency_key": "k"}),
            tether.ToolCall(tool="lookup", args={"order_id": None}),
            "Expected `str`, got `null`",
        ),
    ],
)
async def test_two_malformed_calls_in_a_row_escalate_the_task_and_nothing_runs(
    tmp_path: Path, first: tether.ToolCall, second: tether.ToolCall, problem: str
) -> None:
    b.SCRIPT.lines[:] = [first, second]
    async with fast(tmp_path / "a.db") as rt:
        clerk = await rt.spawn(b.Clerk, "c1", goal="Check orders")
        with pytest.raises(tether.TaskFailed) as caught:
            await clerk.ask(tether.UserMessage("check 1"), timeout=10)
        answer = caught.value.result.answer
        info = await clerk.ask(GetSessionInfo(), timeout=5)
        # The first error went back to the model with the second request.
        [fed_back] = b.SCRIPT.requests[1].bundle.tool_results
        assert fed_back.error is not None
        assert fed_back.error.startswith("Invalid call")
        assert await rt.dead_letters.list() == []
    assert answer.startswith("I need a person's help: escalated: invalid tool call twice")
    assert problem in answer
    assert info.outcome.startswith("stopped: escalated")
    assert b.LOOKUPS == []


@pytest.mark.parametrize(
    "decision",
    [
        "just a string",
        None,
        {"tool": "lookup"},
        tether.ToolCall(tool="lookup", args=["42"]),  # type: ignore[arg-type]
        tether.ToolCall(tool=42, args={}),  # type: ignore[arg-type]
        tether.FinalAnswer(text=None),  # type: ignore[arg-type]
    ],
)
async def test_a_model_answer_that_is_not_a_decision_ends_the_task_clearly(
    tmp_path: Path, decision: Any
) -> None:
    """What the model returns is recorded in the ledger and decoded as a Decision: anything
    else fails that effect, and the task ends saying the model failed; the session serves on."""
    b.SCRIPT.lines[:] = [decision, tether.FinalAnswer(text="fine now")]
    async with fast(tmp_path / "a.db") as rt:
        clerk = await rt.spawn(b.Clerk, "c1", goal="Check orders")
        with pytest.raises(tether.TaskFailed) as caught:
            await clerk.ask(tether.UserMessage("check 1"), timeout=10)
        answer = caught.value.result.answer
        info = await clerk.ask(GetSessionInfo(), timeout=5)
        assert info.outcome.startswith("stopped: the model failed")
        assert answer.startswith("I could not continue")
        assert await rt.dead_letters.list() == []
    assert b.LOOKUPS == []


# -- bad settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("retention", 0),
        ("receipt_retention", -5),
        ("max_message_bytes", 0),
        ("max_message_bytes", 10.5),
        ("max_message_bytes", True),
        ("passivate_after", 0),
        ("poll_interval", math.nan),
        ("max_attempts", True),
        ("lease_ttl", None),
    ],
)
def test_bad_runtime_settings_name_the_setting(option: str, value: object) -> None:
    with pytest.raises(tether.ConfigError, match=option):
        tether.Runtime(":memory:", **{option: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("a.db", "durability must be 'full' or 'normal', not 'sometimes'"),
        (":memory:", "the memory store takes no option 'durability'"),
    ],
)
def test_a_bad_durability_names_the_setting(tmp_path: Path, path: str, problem: str) -> None:
    """A durability SQLite does not know is refused by name; a store that has no such setting
    (memory) refuses the option itself, never ignores it."""
    where = path if path == ":memory:" else tmp_path / path
    with pytest.raises(tether.ConfigError, match=problem):
        tether.Runtime(where, durability="sometimes")


def test_a_durability_given_to_a_store_that_has_none_is_refused_not_ignored() -> None:
    """The memory store has no durability setting: ``durability="normal"`` on it is refused by
    name (it was ignored), as any option a store does not take."""
    with pytest.raises(tether.ConfigError, match="the memory store takes no option 'durability'"):
        tether.Runtime(":memory:", durability="normal")


def test_a_durability_beside_a_store_of_its_own_is_refused_not_ignored(tmp_path: Path) -> None:
    store = tether.SqliteStore(tmp_path / "a.db")
    with pytest.raises(tether.ConfigError, match="give it to the store"):
        tether.Runtime(store=store, durability="normal")


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: tether.RetryPolicy(max_attempts=0), "max_attempts"),
        (lambda: tether.RetryPolicy(max_attempts=2.5), "max_attempts"),  # type: ignore[arg-type]
        (lambda: tether.RetryPolicy(initial_delay=-1), "initial_delay"),
        (lambda: tether.RetryPolicy(max_delay=math.nan), "max_delay"),
        (lambda: tether.RetryPolicy(multiplier=0.5), "multiplier"),
        (lambda: tether.BreakerPolicy(window="sliding"), "window"),  # type: ignore[arg-type]
        (lambda: tether.BreakerPolicy(failure_threshold=0), "failure_threshold"),
        (lambda: tether.BreakerPolicy(failure_rate=1.5), "failure_rate"),
        (lambda: tether.BreakerPolicy(open_duration=math.inf), "open_duration"),
        (lambda: tether.BreakerPolicy(slow_call_rate=0.5), "slow_call_duration"),
        (lambda: tether.BreakerPolicy(record_on=(int,)), "record_on"),  # type: ignore[arg-type]
        (lambda: tether.BreakerPolicy.for_kind("quantum"), "quantum"),
        (lambda: tether.LoopPolicy(repeat=1), "repeat"),
        (lambda: tether.LoopPolicy(on_repeat="panic"), "on_repeat"),  # type: ignore[arg-type]
        (lambda: tether.LoopPolicy(window=30), "window"),
        (lambda: tether.LoopPolicy(history=3), "history"),
        (lambda: tether.LoopPolicy(exempt_tools={"a"}), "exempt_tools"),  # type: ignore[arg-type]
        (lambda: tether.ApprovalPolicy(timeout=0), "timeout"),
        (lambda: tether.ApprovalPolicy(timeout=math.nan), "timeout"),
        (lambda: tether.ApprovalPolicy(on_timeout="ask"), "on_timeout"),  # type: ignore[arg-type]
        (lambda: tether.ApprovalPolicy(approvers_needed=0), "approvers_needed"),
        (lambda: tether.ChildSpec(b.Ledger, "c", restart="sometimes"), "restart"),  # type: ignore[arg-type]
        (lambda: tether.ChildSpec(b.Ledger, "c", shutdown=-1), "shutdown"),
        (lambda: tether.ChildSpec(b.Ledger, "c", shutdown="later"), "shutdown"),  # type: ignore[arg-type]
        (lambda: tether.ChildSpec(b.Ledger, "c", colour="red"), "colour"),
        (lambda: tether.OneForOne(max_restarts=-1), "max_restarts"),
        (lambda: tether.OneForOne(within=0), "within"),
        (lambda: tether.Backoff(initial_delay=2, max_delay=1), "Backoff"),
    ],
)
def test_bad_policy_values_name_the_field(make: Any, field: str) -> None:
    with pytest.raises(tether.ConfigError, match=field):
        make()


@pytest.mark.parametrize(
    ("make", "field"),
    [
        # bool is an int to isinstance(): True passes as 1 where Runtime and the guards refuse it
        (lambda: tether.RetryPolicy(max_attempts=True), "max_attempts"),
        (lambda: tether.RetryPolicy(initial_delay=True), "initial_delay"),
        (lambda: tether.ApprovalPolicy(approvers_needed=True), "approvers_needed"),
        (lambda: tether.ApprovalPolicy(timeout=True), "timeout"),
        (lambda: tether.ChildSpec(b.Ledger, "c", shutdown=True), "shutdown"),
        (lambda: tether.OneForOne(within=True), "within"),
        # NaN compares false with everything: `within <= 0` lets it through
        (lambda: tether.OneForOne(within=math.nan), "within"),
        # a string compared with a number: a bare TypeError instead of ConfigError
        (lambda: tether.Backoff(initial_delay="fast"), "Backoff"),  # type: ignore[arg-type]
    ],
)
def test_bool_nan_and_wrong_types_in_policies_are_refused_by_name(make: Any, field: str) -> None:
    with pytest.raises(tether.ConfigError, match=field):
        make()


async def _plain(x: int) -> int:
    return x


def _sync_hook(x: int) -> tether.Done:
    return tether.Done(x)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"breaker": "no-such-kind"}, "unknown kind 'no-such-kind'"),
        ({"breaker": 5}, "breaker must be a kind name"),
        ({"breaker": {"failure_threshold": 3}}, "breaker must be a kind name"),
        ({"reconcile": 5}, "reconcile hook must be an async def"),
        ({"reconcile": _sync_hook}, "reconcile hook must be an async def"),
        ({"timeout": True}, "timeout"),
        ({"name": 5}, "name must be a non-empty string"),
        ({"name": ""}, "name must be a non-empty string"),
    ],
)
def test_bad_tool_options_are_refused_at_declaration_by_name(
    options: dict[str, Any], problem: str
) -> None:
    # Before: accepted, then failing every call (breaker), or only an ambiguous one (reconcile)
    with pytest.raises(tether.ConfigError, match=problem):
        tether.tool(**options)(_plain)


# -- misuse of the actor and runtime APIs -------------------------------------------------------


@pytest.mark.parametrize("where", ["memory", "file"])
async def test_an_apply_that_returns_none_fails_the_step_by_name_and_journals_nothing(
    tmp_path: Path, where: str
) -> None:
    async with fast(":memory:" if where == "memory" else tmp_path / "a.db", max_attempts=1) as rt:
        a = await rt.spawn(b.Forgetful, "f")
        with pytest.raises(tether.MessageDeadLettered, match=r"Forgetful.apply returned None"):
            await a.ask(b.Add(amount=5), timeout=5)
        assert await a.ask(b.Log(), timeout=5) == []  # the state was not replaced by None
        assert await rt.store.load_journal("f", 0, 10) == []


@pytest.mark.parametrize("reason", [None, 5])
async def test_stop_with_a_reason_that_is_not_a_string_is_refused_and_the_actor_goes_on(
    reason: Any,
) -> None:
    # Before: None meant "do not stop", silently; 5 was stored as the stop reason
    async with fast(":memory:", max_attempts=1) as rt:
        a = await rt.spawn(b.Forgetful, "f")
        with pytest.raises(tether.MessageDeadLettered, match="stop\\(\\) takes a reason string"):
            await a.ask(b.StopWith(reason=reason), timeout=5)
        assert await a.ask(b.Log(), timeout=5) == []
        rec = await rt.store.get_actor("f")
        assert rec is not None
        assert rec.status == "active"


@pytest.mark.parametrize("actor_id", [None, "", 5])
async def test_a_ref_to_an_impossible_id_is_refused_by_name(actor_id: Any) -> None:
    async with fast(":memory:") as rt:
        with pytest.raises(tether.ConfigError, match="actor id must be a non-empty string"):
            rt.ref(actor_id)


@pytest.mark.parametrize("where", ["memory", "file"])
async def test_stopping_by_ref_or_with_a_bad_reason_is_refused_alike_in_both_stores(
    tmp_path: Path, where: str
) -> None:
    # Before: SQLite failed with a parameter-binding StoreError or JournalWriteError, the
    # memory store with ActorNotFound("ActorRef('l')") or by storing a list as the reason
    async with fast(":memory:" if where == "memory" else tmp_path / "a.db") as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(tether.ConfigError, match="actor id must be a non-empty string"):
            await rt.stop(ledger, "done")  # type: ignore[arg-type]
        for reason in (None, ["x"]):
            with pytest.raises(tether.ConfigError, match="stop reason must be a string"):
                await rt.stop("l", reason)  # type: ignore[arg-type]
        rec = await rt.store.get_actor("l")
        assert rec is not None
        assert rec.status == "active"
        assert rec.stop_reason is None


@pytest.mark.parametrize("where", ["memory", "file"])
async def test_listings_filtered_by_a_non_string_actor_id_are_refused_not_empty(
    tmp_path: Path, where: str
) -> None:
    async with fast(":memory:" if where == "memory" else tmp_path / "a.db") as rt:
        with pytest.raises(tether.ConfigError, match="actor_id must be an actor id"):
            await rt.dead_letters.list(actor_id=5)  # type: ignore[arg-type]
        with pytest.raises(tether.ConfigError, match="actor_id must be an actor id"):
            await rt.quarantine.list(7)  # type: ignore[arg-type]
        assert await rt.dead_letters.list() == []
        assert await rt.quarantine.list(actor_id="l") == []
