"""Rows and pages damaged straight in the SQLite file (stdlib ``sqlite3``, with no runtime on
it): each gets a clear tether error naming what is damaged, a dead letter, or a quarantine;
the runtime keeps serving every other actor, and nothing acknowledged elsewhere is lost.

Already covered elsewhere, not repeated here: an undecodable mailbox payload and a journal row
of one byte (``tests/runtime/test_runtime.py``); opening random bytes, another program's SQLite
file and schema version 999 on a bare ``SqliteStore`` (``tests/store/test_sqlite_store.py``).
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
import structlog

import tether
from tests.badinput import actors as b
from tests.sqlite_files import dump
from tether.logs import TetherLogger
from tether.runtime.effects import effect_key

pytestmark = pytest.mark.anyio


def fast(path: Path | str, **kw: Any) -> tether.Runtime:
    kw.setdefault("poll_interval", 0.02)
    kw.setdefault("lease_ttl", 2.0)
    return tether.Runtime(path, **kw)


def sql(db: Path, statement: str, *params: Any) -> list[Any]:
    con = sqlite3.connect(db)
    try:
        with con:
            return con.execute(statement, params).fetchall()
    finally:
        con.close()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    b.FAILS.clear()
    b.CALLS.clear()
    b.AMBIGUOUS.clear()
    b.TRANSIENT.clear()


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> list[MutableMapping[str, Any]]:
    """tether's log events of this test (whatever structlog's global configuration)."""
    capture = structlog.testing.LogCapture()
    logger = structlog.wrap_logger(
        None, processors=[structlog.contextvars.merge_contextvars, capture]
    )
    monkeypatch.setattr(TetherLogger, "_target", lambda self: logger)
    return capture.entries


@pytest.fixture
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    for t in set(threading.enumerate()) - before:
        if t.name.startswith("tether-sqlite-"):
            t.join(2.0)
            assert not t.is_alive(), f"store thread {t.name} left running"


async def balance_is(rt: tether.Runtime, actor_id: str, log: list[int]) -> None:
    with anyio.fail_after(10):
        while await rt.ref(actor_id).ask(b.Log(), timeout=5) != log:
            await anyio.sleep(0.05)


async def two_ledgers(db: Path) -> None:
    """'bad' and 'good', each with a committed event and (bad) a message queued for later."""
    async with fast(db) as rt:
        bad = await rt.spawn(b.Ledger, "bad")
        good = await rt.spawn(b.Ledger, "good")
        await bad.ask(b.Add(amount=1), timeout=5)
        await good.ask(b.Add(amount=2), timeout=5)
        await bad.tell(b.Add(amount=3), delay=0.2)


def errors_of(logs: list[dict[str, Any]], actor_id: str) -> list[str]:
    return [str(e.get("error")) for e in logs if e.get("actor_id") == actor_id and "error" in e]


# -- the journal and the snapshots ----------------------------------------------------------------


async def test_a_truncated_journal_payload_names_actor_and_seq_and_other_actors_serve(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    db = tmp_path / "a.db"
    await two_ledgers(db)
    [(payload,)] = sql(db, "SELECT payload FROM journal WHERE actor_id = 'bad' AND seq = 1")
    sql(db, "UPDATE journal SET payload = ? WHERE actor_id = 'bad' AND seq = 1", payload[:-2])
    async with fast(db) as rt:
        await rt.ref("good").tell(b.Add(amount=5))
        await balance_is(rt, "good", [2, 5])
        with pytest.raises(tether.AskTimeout):
            await rt.ref("bad").ask(b.Log(), timeout=0.5)
        assert await rt.dead_letters.list() == []
    errors = errors_of(logs, "bad")
    assert any("CorruptRecordError" in e and "journal of 'bad' at seq 1" in e for e in errors)
    # Nothing acknowledged is lost: the delayed message and the ask wait in the mailbox.
    assert sql(db, "SELECT COUNT(*) FROM mailbox WHERE actor_id = 'bad'") == [(2,)]


async def test_a_journal_event_of_the_wrong_shape_is_a_corrupt_record(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """Valid msgpack, wrong content (another event's tag, a field of the wrong type)."""
    db = tmp_path / "a.db"
    await two_ledgers(db)
    wrong = msgspec.msgpack.encode({"type": "Added", "amount": "three"})
    sql(db, "UPDATE journal SET payload = ? WHERE actor_id = 'bad'", wrong)
    async with fast(db) as rt:
        with pytest.raises(tether.AskTimeout):
            await rt.ref("bad").ask(b.Log(), timeout=0.5)
        await balance_is(rt, "good", [2])
    assert any("$.amount" in e for e in errors_of(logs, "bad"))


async def test_garbage_in_a_snapshot_names_actor_and_seq_and_repairing_it_loses_nothing(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    db = tmp_path / "a.db"
    async with fast(db, snapshot_every=2) as rt:
        bad = await rt.spawn(b.Ledger, "bad")
        good = await rt.spawn(b.Ledger, "good")
        for n in (1, 2, 3):
            await bad.tell(b.Add(amount=n))
        assert await bad.ask(b.Log(), timeout=5) == [1, 2, 3]
        await good.ask(b.Add(amount=9), timeout=5)
        await bad.tell(b.Add(amount=4), delay=0.2)
    [(seq, state)] = sql(db, "SELECT seq, state FROM snapshots WHERE actor_id = 'bad'")
    sql(db, "UPDATE snapshots SET state = x'deadbeef' WHERE actor_id = 'bad'")
    async with fast(db, snapshot_every=2) as rt:
        await balance_is(rt, "good", [9])
        with pytest.raises(tether.AskTimeout):
            await rt.ref("bad").ask(b.Log(), timeout=0.5)
    assert any(
        "CorruptRecordError" in e and f"snapshot of 'bad' at seq {seq}" in e
        for e in errors_of(logs, "bad")
    )
    sql(db, "UPDATE snapshots SET state = ? WHERE actor_id = 'bad'", state)
    async with fast(db, snapshot_every=2) as rt:
        await balance_is(rt, "bad", [1, 2, 3, 4])


# -- the mailbox ---------------------------------------------------------------------------------


async def test_an_unreadable_error_history_on_a_queued_message_does_not_stop_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        await (await rt.spawn(b.Ledger, "l")).tell(b.Add(amount=7), delay=0.2)
    sql(db, "UPDATE mailbox SET errors = x'c1c1', attempts = 1")
    async with fast(db) as rt:
        await balance_is(rt, "l", [7])
        assert await rt.dead_letters.list() == []


async def test_a_poison_message_with_an_unreadable_history_is_dead_lettered_naming_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    async with fast(db, max_attempts=2) as rt:
        await (await rt.spawn(b.Ledger, "l")).tell(b.Boom(key="k", times=99), delay=0.2)
    [(msg_id,)] = sql(db, "SELECT msg_id FROM mailbox")
    sql(db, "UPDATE mailbox SET errors = x'c1'")
    async with fast(db, max_attempts=2) as rt:
        with anyio.fail_after(10):
            while not await rt.dead_letters.list():
                await anyio.sleep(0.05)
        [letter] = await rt.dead_letters.list()
        assert any(msg_id in e and "unreadable" in e for e in letter.errors)
        assert letter.errors[-1].startswith("attempt 2: RuntimeError: boom k")
        assert await rt.ref("l").ask(b.Log(), timeout=5) == []


async def test_a_message_for_an_actor_that_does_not_exist_is_dead_lettered(
    tmp_path: Path,
) -> None:
    """Only a damaged store has mail for an unknown actor (every send checks the registry):
    it must end in dead letters with a reason, not wait forever unseen."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        await (await rt.spawn(b.Ledger, "l")).tell(b.Add(amount=1), delay=0.2)
    sql(db, "UPDATE mailbox SET actor_id = 'ghost'")
    async with fast(db) as rt:
        ledger = await rt.spawn(b.Ledger, "other")
        await ledger.tell(b.Add(amount=2))
        await balance_is(rt, "other", [2])
        with anyio.fail_after(3):
            while not await rt.dead_letters.list():
                await anyio.sleep(0.05)
        [letter] = await rt.dead_letters.list()
        assert letter.actor_id == "ghost"
        assert "ghost" in letter.reason
    assert sql(db, "SELECT COUNT(*) FROM mailbox") == [(0,)]


# -- the actor registry --------------------------------------------------------------------------


async def test_an_actor_whose_class_no_longer_imports_keeps_its_mail_until_repaired(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    db = tmp_path / "a.db"
    await two_ledgers(db)
    sql(db, "UPDATE actors SET class_path = 'tests.badinput.gone:Ledger' WHERE actor_id = 'bad'")
    async with fast(db) as rt:
        with pytest.raises(tether.ConfigError, match=r"tests\.badinput\.gone:Ledger"):
            await rt.ref("bad").tell(b.Add(amount=4))
        with pytest.raises(tether.ConfigError, match=r"tests\.badinput\.gone"):
            await rt.lookup("bad")
        await rt.ref("good").tell(b.Add(amount=5))
        await balance_is(rt, "good", [2, 5])
        await anyio.sleep(0.3)  # the delayed message came due: it waits, unprocessed
        assert [t.id for t in await rt.tree()] == ["bad", "good"]
    assert any("tests.badinput.gone" in e for e in errors_of(logs, "bad"))
    assert sql(db, "SELECT COUNT(*) FROM mailbox WHERE actor_id = 'bad'") == [(1,)]
    assert await_nothing_dead(db)
    sql(db, "UPDATE actors SET class_path = 'tests.badinput.actors:Ledger'")
    async with fast(db) as rt:
        await balance_is(rt, "bad", [1, 3])


@pytest.mark.parametrize("class_path", ["", ".relative:Ledger"])
async def test_a_malformed_class_path_is_a_config_error_and_the_scheduler_goes_on(
    tmp_path: Path, logs: list[dict[str, Any]], class_path: str
) -> None:
    # importlib raises ValueError / TypeError for these (not ImportError): they escaped the
    # ConfigError handling and failed the scheduler over and over
    db = tmp_path / "a.db"
    await two_ledgers(db)
    sql(db, "UPDATE actors SET class_path = ? WHERE actor_id = 'bad'", class_path)
    async with fast(db) as rt:
        with pytest.raises(tether.ConfigError, match="cannot import actor class"):
            await rt.ref("bad").tell(b.Add(amount=4))
        await anyio.sleep(0.3)  # the delayed message came due: it waits, unprocessed
        await rt.ref("good").tell(b.Add(amount=5))
        await balance_is(rt, "good", [2, 5])
    assert not [e for e in logs if e.get("event") == "background_task_failed"]
    assert sql(db, "SELECT COUNT(*) FROM mailbox WHERE actor_id = 'bad'") == [(1,)]


def await_nothing_dead(db: Path) -> bool:
    return sql(db, "SELECT COUNT(*) FROM dead_letters") == [(0,)]


async def test_undecodable_spawn_arguments_name_the_class(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    await two_ledgers(db)
    sql(db, "UPDATE actors SET init = x'c1' WHERE actor_id = 'bad'")
    async with fast(db) as rt:
        await anyio.sleep(0.3)
        await balance_is(rt, "good", [2])
        assert "bad" not in rt.cells
    assert sql(db, "SELECT COUNT(*) FROM mailbox WHERE actor_id = 'bad'") == [(1,)]


# -- the effects ledger and approvals -------------------------------------------------------------


async def quarantined_ship(db: Path) -> str:
    """A Shop whose `ship` call timed out: quarantined, its message parked. Returns the key."""
    b.AMBIGUOUS.add("o1")
    async with fast(db) as rt:
        shop = await rt.spawn(b.Shop, "shop")
        with pytest.raises(tether.AskTimeout):
            await shop.ask(b.Ship(order_id="o1"), timeout=0.5)
        [q] = await rt.quarantine.list()
        await rt.spawn(b.Ledger, "good")
        return q.key


async def test_garbage_in_a_quarantined_effect_row_is_shown_not_raised(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    key = await quarantined_ship(db)
    sql(db, "UPDATE effects SET args = x'c1', history = x'c1' WHERE key = ?", key)
    async with fast(db) as rt:
        [q] = await rt.quarantine.list()
        assert q.args == {"(undecodable)": "c1"}
        assert q.history == [f"(error history of effect {key} is unreadable)"]
        await rt.quarantine.abort(key, "not safe", by="ops")
        with anyio.fail_after(5):
            while await rt.ref("shop").ask(b.Log(), timeout=5) != ["ship o1 aborted: not safe"]:
                await anyio.sleep(0.05)
    assert [c for c, _ in b.CALLS] == ["ship"]


async def test_a_receipt_whose_result_does_not_decode_is_held_for_a_person_never_called_again(
    tmp_path: Path,
) -> None:
    """A 'done' receipt with a garbage result: the call happened, so the replay neither calls
    the tool again (I4) nor burns the message's attempts failing on the same row. The effect is
    quarantined again, naming why; the actor serves others; a person's result finishes it."""
    db = tmp_path / "a.db"
    key = await quarantined_ship(db)
    sql(db, "UPDATE effects SET status = 'done', result = x'c1' WHERE key = ?", key)
    sql(db, "UPDATE mailbox SET deliver_at = created_at")  # unpark it
    async with fast(db, max_attempts=2) as rt:
        with anyio.fail_after(10):
            while not (held := await rt.quarantine.list()):
                await anyio.sleep(0.05)
        [q] = held
        assert q.key == key
        assert q.reason.startswith("its recorded result does not decode as str")
        await rt.ref("good").tell(b.Add(amount=1))
        await balance_is(rt, "good", [1])
        await rt.quarantine.mark_done(key, "shipped o1 (carrier confirmed)", by="ops")
        with anyio.fail_after(5):
            while await rt.ref("shop").ask(b.Log(), timeout=5) != [
                "shipped o1 (carrier confirmed)"
            ]:
                await anyio.sleep(0.05)
        assert await rt.dead_letters.list() == []
    assert [("ship", key)] == b.CALLS


async def test_a_retry_tools_receipt_that_does_not_decode_fails_the_call_and_is_not_made_again(
    tmp_path: Path,
) -> None:
    """The same damage for a "retry" tool (its receiver honors keys, like the session's model):
    the handler is told the call failed (ToolFailed naming why), nothing waits for a person,
    and the tool is not called again."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        await rt.spawn(b.Shop, "shop")
    async with fast(db, serve=False) as admin:  # stored, not delivered: nobody serves
        await admin.ref("shop").tell(b.Pay(order_id="o1", cents=5))
    [(msg_id,)] = sql(db, "SELECT msg_id FROM mailbox WHERE actor_id = 'shop'")
    call = b.pay.prepare({"order_id": "o1", "cents": 5})
    key = effect_key("shop", msg_id, 0, "pay", call.input_hash)
    # As if an attempt made the call, committed its receipt and died before its step: the
    # message has one attempt counted, and the receipt's result is damaged.
    sql(db, "UPDATE mailbox SET attempts = 1 WHERE msg_id = ?", msg_id)
    sql(
        db,
        "INSERT INTO effects (actor_id, msg_id, idx, key, tool, input_hash, args, status, "
        "attempts, result, error, reason, history, created_at, updated_at) VALUES "
        "('shop', ?, 0, ?, 'pay', ?, ?, 'done', 1, x'c1', NULL, NULL, x'90', 0, 0)",
        msg_id,
        key,
        call.input_hash,
        call.args_blob,
    )
    async with fast(db) as rt:
        with anyio.fail_after(10):
            while not (log := await rt.ref("shop").ask(b.Log(), timeout=5)):
                await anyio.sleep(0.05)
        [outcome] = log
        assert outcome.startswith("pay o1 failed: its recorded result does not decode as str")
        assert await rt.quarantine.list() == []
        assert await rt.dead_letters.list() == []
    assert b.CALLS == []


async def two_shops_one_corrupt(db: Path) -> tuple[str, str]:
    """shop-a and shop-b each wait for approval of a wire; shop-a's request is undecodable.
    Returns the two request ids (a, b)."""
    async with fast(db) as rt:
        for shop_id in ("shop-a", "shop-b"):
            shop = await rt.spawn(b.Shop, shop_id)
            with pytest.raises(tether.AskTimeout):
                await shop.ask(b.Wire(to="acme", cents=5), timeout=0.3)
        [req_a] = await rt.approvals.pending("shop-a")
        [req_b] = await rt.approvals.pending("shop-b")
    sql(db, "UPDATE approvals SET record = x'c1ffff' WHERE actor_id = 'shop-a'")
    return req_a.request_id, req_b.request_id


def corrupt_approval_logs(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "approval_record_corrupt"]


async def test_a_corrupt_approval_record_names_the_request_and_others_are_still_served(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    db = tmp_path / "a.db"
    req_a, req_b = await two_shops_one_corrupt(db)
    async with fast(db) as rt:
        with pytest.raises(tether.CorruptRecordError, match=req_a):
            await rt.approvals.decide(req_a, tether.Approve(by="ana"))
        with pytest.raises(tether.CorruptRecordError, match=req_a):
            await rt.approvals.get(req_a)
        for _ in range(3):  # listed again and again: logged once
            assert [r.request_id for r in await rt.approvals.pending()] == [req_b]
        assert await rt.approvals.pending("shop-a") == []
        [corrupt] = corrupt_approval_logs(logs)
        assert corrupt["log_level"] == "error"
        assert corrupt["request_id"] == req_a
        assert f"{req_a!r} cannot be decoded: MessagePack data is malformed" in corrupt["error"]
        await rt.approvals.decide(req_b, tether.Approve(by="ana"))
        with anyio.fail_after(5):
            while await rt.ref("shop-b").ask(b.Log(), timeout=5) != ["wired 5 to acme"]:
                await anyio.sleep(0.05)
    assert [c for c, _ in b.CALLS] == ["wire"]


async def test_a_corrupt_approval_record_does_not_stop_the_scheduler_of_a_runtime_with_a_handler(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    """The handler is offered the pending requests on every orphan scan: the corrupt one must
    not fail the scan, or the actors whose owner died are never taken over."""
    db = tmp_path / "a.db"
    req_a, req_b = await two_shops_one_corrupt(db)
    async with fast(db) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        await ledger.ask(b.Add(amount=1), timeout=5)
        await ledger.tell(b.Add(amount=3), delay=0.3)
    # Its owner died holding the lease (a runtime that is not registered any more).
    sql(db, "UPDATE actors SET lease_owner = 'ghost', lease_expires = 1e12 WHERE actor_id = 'l'")
    offered: list[str] = []

    async def handler(request: tether.ApprovalRequest) -> None:
        offered.append(request.request_id)

    rt = fast(db, lease_ttl=0.4)  # an orphan scan every 0.2 s
    rt.approvals.attach(handler)
    async with rt:
        with anyio.fail_after(5):  # nobody asks "l": only the scheduler can take it over
            while b.fold([r.payload for r in await rt.store.load_journal("l", 0, 10)]) != [1, 3]:
                await anyio.sleep(0.05)
        await anyio.sleep(0.5)  # a few more scans
        assert set(offered) == {req_b}  # offered on each scan: the handler left it pending
    assert [e["request_id"] for e in corrupt_approval_logs(logs)] == [req_a]
    assert [e for e in logs if e["event"] == "background_task_failed"] == []


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE actors SET init = x'c1' WHERE actor_id IN ('breaker:find', 'r/loops')",
        "INSERT OR REPLACE INTO journal (actor_id, seq, payload) "
        "VALUES ('breaker:find', 1, x'c1'), ('r/loops', 1, x'c1')",
    ],
    ids=["spawn-arguments", "journal"],
)
async def test_a_guard_whose_record_cannot_be_read_is_named_and_its_sessions_go_on(
    tmp_path: Path, logs: list[dict[str, Any]], damage: str
) -> None:
    """A breaker and a loop detector whose stored records do not decode: every call through
    them used to fail (the session's messages went to dead letters). The effect path now goes
    on without them (an in-memory breaker, no loop detection), says which guard and why, once,
    and does not try it again on every call."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        r = await rt.spawn(b.Researcher, "r")
        assert await r.ask(b.Find(x=1), timeout=5) == 2
    sql(db, damage)
    async with fast(db) as rt:
        with anyio.fail_after(5):
            for x in (10, 20, 30):
                assert await rt.ref("r").ask(b.Find(x=x), timeout=5) == x + 1
        assert await rt.dead_letters.list() == []
    named = sorted(e["guard"] for e in logs if e["event"] == "guard_unavailable")
    assert named == ["breaker:find", "r/loops"]
    assert all("cannot be decoded" in e["error"] for e in logs if e["event"] == "guard_unavailable")


# -- dead letters --------------------------------------------------------------------------------


async def test_a_dead_letter_with_an_unreadable_history_can_still_be_listed_and_retried(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    async with fast(db, max_attempts=1) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        with pytest.raises(tether.MessageDeadLettered):
            await ledger.ask(b.Boom(key="once", times=1), timeout=5)
    sql(db, "UPDATE dead_letters SET errors = x'92c1'")
    async with fast(db) as rt:
        [letter] = await rt.dead_letters.list()
        assert letter.errors == [f"(error history of {letter.msg_id} is unreadable)"]
        await rt.dead_letters.retry(letter.msg_id)
        await balance_is(rt, "l", [1000])
        assert await rt.dead_letters.list() == []


# -- damaged pages and foreign files --------------------------------------------------------------


def page_size(db: Path) -> int:
    return int(sql(db, "PRAGMA page_size")[0][0])


def pages_of(db: Path, table: str) -> list[int]:
    return [
        p for (p,) in sql(db, "SELECT pageno FROM dbstat WHERE name = ? ORDER BY pageno", table)
    ]


def scribble(db: Path, page: int) -> None:
    size = page_size(db)
    with db.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(bytes([0xA5]) * size)


async def test_a_file_truncated_mid_page_is_refused_at_open_untouched(
    tmp_path: Path, no_leaked_threads: None
) -> None:
    db = tmp_path / "a.db"
    await two_ledgers(db)
    size = db.stat().st_size
    with db.open("r+b") as f:
        f.truncate(size - page_size(db) - 100)
    damaged = db.read_bytes()
    with pytest.raises(tether.StoreOpenError, match="malformed"):
        async with fast(db):
            pass
    assert db.read_bytes() == damaged


async def test_a_damaged_journal_page_keeps_its_actors_waiting_and_others_serve(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        await rt.spawn(b.Ledger, "good")
        for i in range(30):
            ledger = await rt.spawn(b.Ledger, f"l{i:02}")
            for n in range(30):
                await ledger.tell(b.Add(amount=n))
        await balance_is(rt, "l29", list(range(30)))
    journal = pages_of(db, "journal")
    assert len(journal) > 3
    scribble(db, journal[-1])  # the last leaf: the highest actor ids
    async with fast(db) as rt:
        await rt.ref("good").tell(b.Add(amount=1))
        await balance_is(rt, "good", [1])
        await balance_is(rt, "l00", list(range(30)))
        with pytest.raises(tether.AskTimeout):
            await rt.ref("l29").ask(b.Log(), timeout=0.5)


async def test_a_damaged_page_read_through_the_api_raises_a_tether_error(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    async with fast(db, max_attempts=1) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        for i in range(40):
            with pytest.raises(tether.MessageDeadLettered):
                await ledger.ask(
                    b.Boom(
                        key=f"k{i}",
                        times=1,
                    ),
                    timeout=5,
                )
    scribble(db, pages_of(db, "dead_letters")[-1])
    async with fast(db) as rt:
        await rt.ref("l").tell(b.Add(amount=1))
        await balance_is(rt, "l", [1])
        with pytest.raises(tether.CorruptRecordError, match="malformed"):
            await rt.dead_letters.list()


async def test_a_store_of_schema_version_999_is_refused_by_the_runtime_untouched(
    tmp_path: Path, no_leaked_threads: None
) -> None:
    db = tmp_path / "a.db"
    await two_ledgers(db)
    sql(db, "UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    before = dump(db)
    for _ in range(2):  # refusing twice changes nothing either
        with pytest.raises(tether.SchemaVersionError, match="999"):
            async with fast(db):
                pass
    assert dump(db) == before


@pytest.mark.parametrize(
    "damage",
    [
        "DELETE FROM meta",
        "UPDATE meta SET value = 'two' WHERE key = 'schema_version'",
        "UPDATE meta SET value = '' WHERE key = 'schema_version'",
    ],
)
async def test_a_missing_or_garbled_schema_version_is_refused(
    tmp_path: Path, damage: str, no_leaked_threads: None
) -> None:
    db = tmp_path / "a.db"
    await two_ledgers(db)
    sql(db, damage)
    before = dump(db)
    with pytest.raises(tether.SchemaVersionError, match="schema version"):
        async with fast(db):
            pass
    assert dump(db) == before


async def test_a_non_tether_sqlite_file_is_refused_by_the_runtime_untouched(
    tmp_path: Path, no_leaked_threads: None
) -> None:
    db = tmp_path / "other.db"
    sql(db, "CREATE TABLE mailbox (id INTEGER PRIMARY KEY, body TEXT)")
    sql(db, "INSERT INTO mailbox (body) VALUES ('hello')")
    before = dump(db)
    with pytest.raises(tether.SchemaVersionError, match="not a tether store"):
        async with fast(db):
            pass
    assert dump(db) == before


@pytest.mark.parametrize("table", ["effects", "mailbox", "approvals"])
async def test_a_store_missing_a_table_is_refused_at_open_naming_it(
    tmp_path: Path, table: str, no_leaked_threads: None
) -> None:
    db = tmp_path / "a.db"
    await two_ledgers(db)
    sql(db, f"DROP TABLE {table}")
    with pytest.raises(tether.SchemaVersionError, match=table):
        async with fast(db):
            pass


async def test_a_copy_of_a_store_without_its_wal_loses_only_what_was_not_checkpointed(
    tmp_path: Path,
) -> None:
    """A store copied while open (main file only, no -wal): it opens, as an older state."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        await ledger.ask(b.Add(amount=1), timeout=5)
        copy = tmp_path / "copy.db"
        shutil.copy(db, copy)
        assert not Path(str(copy) + "-wal").exists()  # noqa: ASYNC240
    async with fast(copy) as rt:
        assert [t.id for t in await rt.tree()] in ([], ["l"])


# -- values of the wrong type (SQLite columns have affinity, not types) --------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [("created_at", "x"), ("lease_expires", "abc"), ("fence", "z"), ("init", "text")],
)
async def test_an_actor_row_with_a_value_of_the_wrong_type_is_named_and_the_others_serve(
    tmp_path: Path, logs: list[dict[str, Any]], column: str, value: str
) -> None:
    db = tmp_path / "a.db"
    await two_ledgers(db)
    sql(db, f"UPDATE actors SET {column} = ? WHERE actor_id = 'bad'", value)
    async with fast(db) as rt:
        with pytest.raises(tether.CorruptRecordError, match=rf"actors row 'bad'.*{column}"):
            await rt.ref("bad").tell(b.Add(amount=4))
        await rt.ref("good").tell(b.Add(amount=5))
        await balance_is(rt, "good", [2, 5])
        await anyio.sleep(0.4)  # the delayed message came due; scans found it again and again
        assert [t.id for t in await rt.tree()] == ["good"]
        assert "bad" not in rt.cells
    [corrupt] = [e for e in logs if e["event"] == "actor_record_corrupt"]
    assert corrupt["actor_id"] == "bad"
    assert f"column {column} holds the text {value!r}" in corrupt["error"]
    assert not [e for e in logs if e["event"] == "background_task_failed"]
    # Nothing is lost: the delayed message waits in the mailbox until the row is repaired.
    assert sql(db, "SELECT COUNT(*) FROM mailbox WHERE actor_id = 'bad'") == [(1,)]
    assert await_nothing_dead(db)


async def test_a_mailbox_row_with_a_value_of_the_wrong_type_waits_and_the_rest_are_delivered(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        ledger = await rt.spawn(b.Ledger, "l")
        await ledger.tell(b.Add(amount=1), delay=0.2)
        await ledger.tell(b.Add(amount=2), delay=0.2)
    [(first, _), _] = sql(db, "SELECT msg_id, seq FROM mailbox ORDER BY seq")
    sql(db, "UPDATE mailbox SET attempts = 'many' WHERE msg_id = ?", first)
    async with fast(db) as rt:
        await balance_is(rt, "l", [2])
    [corrupt] = [e for e in logs if e["event"] == "mailbox_row_corrupt"]
    assert corrupt["msg_id"] == first
    assert "column attempts holds the text 'many'" in corrupt["error"]
    assert sql(db, "SELECT msg_id FROM mailbox") == [(first,)]


async def test_a_runtimes_row_with_a_value_of_the_wrong_type_does_not_stop_a_runtime_opening(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    db = tmp_path / "a.db"
    await two_ledgers(db)
    sql(db, "INSERT INTO runtimes VALUES ('ghost', ?, 'x', 0)", telemetry_host())
    async with fast(db) as rt:
        await rt.ref("good").tell(b.Add(amount=5))
        await balance_is(rt, "good", [2, 5])
    [corrupt] = [e for e in logs if e["event"] == "runtime_record_corrupt"]
    assert "runtimes row 'ghost' is damaged: column pid holds the text 'x'" in corrupt["error"]


def telemetry_host() -> str:
    import socket

    return socket.gethostname()


async def test_a_dead_letter_or_quarantined_effect_of_the_wrong_type_is_left_out_of_listings(
    tmp_path: Path, logs: list[dict[str, Any]]
) -> None:
    db = tmp_path / "a.db"
    key = await quarantined_ship(db)
    async with fast(db, max_attempts=1) as rt:
        for n in (1, 2):
            await rt.ref("good").tell(b.Boom(key=f"k{n}", times=9))
        with anyio.fail_after(5):
            while len(await rt.dead_letters.list()) < 2:
                await anyio.sleep(0.05)
    [(bad_letter,), (good_letter,)] = sql(db, "SELECT msg_id FROM dead_letters ORDER BY created_at")
    sql(db, "UPDATE dead_letters SET created_at = 'x' WHERE msg_id = ?", bad_letter)
    sql(db, "UPDATE effects SET attempts = 'x' WHERE key = ?", key)
    async with fast(db) as rt:
        for _ in range(2):
            assert [d.msg_id for d in await rt.dead_letters.list()] == [good_letter]
            assert await rt.quarantine.list() == []
        with pytest.raises(tether.CorruptRecordError, match="column created_at holds the text"):
            await rt.dead_letters.retry(bad_letter)
    assert [e["msg_id"] for e in logs if e["event"] == "dead_letter_corrupt"] == [bad_letter]
    assert [e["effect_key"] for e in logs if e["event"] == "effect_record_corrupt"] == [key]
