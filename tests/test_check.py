"""``tether check`` and ``tether.testing.check_store``: a whole store's integrity.

A store after a real workload — effects done, a call approved by a person and one rejected,
a quarantined effect, a dead letter, snapshots — checks clean. Each kind of violation is then
built by damaging a copy of that store behind tether's back (SQL on the closed file, or a
page overwritten), and the check names it with its actor, key, request or message, and
fails (exit 1).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import tether
from tests import sample_actors as sa
from tests.actors import session_agents
from tests.actors.session_agents import LoopingAgent, RefundAgent
from tests.badinput.test_corrupt_store import sql
from tests.cli_runs import cli
from tests.runtime import effect_actors as fx
from tests.runtime.effect_actors import HANG, Agent, Banker, Do, Wire
from tests.test_cli import _fresh as _fresh  # the autouse fixture: fresh scripts and failures
from tests.test_cli import eventually
from tether.actors.session import GetSessionInfo
from tether.cli.check import ProgressBar
from tether.runtime.check import check_runtime_store
from tether.runtime.check_report import KINDS
from tether.testing import check_store, check_store_async


async def _workload(db: Path) -> None:
    """'paid' wired money a person approved; 'refused' was rejected; 'a1' refunded, and its
    email is quarantined (the call hung); 'acct' has snapshots and a dead letter."""
    fx.SCRIPT["send_email"] = [HANG]
    async with tether.Runtime(db, poll_interval=0.02, max_attempts=2, snapshot_every=2) as rt:
        paid = await rt.spawn(Banker, "paid")
        refused = await rt.spawn(Banker, "refused")
        await paid.tell(Wire(to="acme", cents=500))
        await refused.tell(Wire(to="evil", cents=900))
        a1 = await rt.spawn(Agent, "a1")
        await a1.tell(Do(effects=["refund", "email"]))
        acct = await rt.spawn(sa.Account, "acct")
        for amount in (5, 6, 7):
            await acct.tell(sa.Deposit(amount=amount))
        await acct.tell(sa.Fail(key="always"))
        requests = await eventually(
            lambda: _two(rt.approvals.pending())  # both wires wait for a person
        )
        for request in requests:
            if request.session_id == "paid":
                await rt.approvals.decide(request.request_id, tether.Approve(by="ops"))
            else:
                await rt.approvals.decide(request.request_id, tether.Reject(by="ops", reason="no"))
        for who in ("paid", "refused"):
            await eventually(lambda who=who: _has_result(rt, who))
        await eventually(rt.quarantine.list)
        await eventually(rt.dead_letters.list)
        assert await acct.ask(sa.GetBalance(), timeout=10) == 18
    fx.reset()


async def _two(pending: Any) -> Any:
    found = await pending
    return found if len(found) == 2 else None


async def _has_result(rt: tether.Runtime, actor_id: str) -> bool:
    rows = await rt.store.load_journal(actor_id, 0, 10)
    return bool(rows)


@pytest.fixture(scope="module")
def _template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("check") / "agents.db"
    anyio.run(_workload, db, backend="asyncio")
    return db


@pytest.fixture
def db(_template: Path, tmp_path: Path) -> Path:
    path = tmp_path / "agents.db"
    shutil.copy(_template, path)
    return path


def check_json(capsys: pytest.CaptureFixture[str], db: Path) -> tuple[int, dict[str, Any], str]:
    """``tether check --json``: its exit code, its report (stdout's last line), its stderr."""
    code, out, err = cli(capsys, "--db", db, "check", "--json")
    report: dict[str, Any] = json.loads(out.splitlines()[-1])
    return code, report, err


def violations(capsys: pytest.CaptureFixture[str], db: Path) -> list[dict[str, Any]]:
    """The violations ``tether check --json`` names; it must exit 1."""
    code, report, _ = check_json(capsys, db)
    assert (code, report["ok"]) == (1, False), report
    found: list[dict[str, Any]] = report["violations"]
    return found


def of_kind(found: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    assert kind in KINDS
    return [v for v in found if v["kind"] == kind]


# -- a clean store --------------------------------------------------------------------------------


def test_a_store_after_a_real_workload_checks_clean_with_exit_0_and_a_summary(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    statuses = dict(sql(db, "SELECT status, COUNT(*) FROM effects GROUP BY status"))
    assert statuses.keys() >= {"done", "quarantined"}
    assert sql(db, "SELECT COUNT(*) FROM dead_letters") == [(1,)]
    assert sql(db, "SELECT COUNT(*) FROM snapshots") >= [(1,)]
    assert len(sql(db, "SELECT status FROM approvals")) == 2
    code, out, err = cli(capsys, "--db", db, "check")
    assert (code, err) == (0, "")
    assert out.rstrip().endswith(f"{db}: clean, no violation found")
    assert "storage: integrity_check ok" in out
    [read] = [line for line in out.splitlines() if line.startswith("read: ")]
    assert "2 approvals" in read
    assert "1 dead letters" in read


def test_check_json_of_a_clean_store_reports_counts_and_no_violation(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report, _ = check_json(capsys, db)
    assert (code, report["ok"], report["violations"]) == (0, True, [])
    assert report["counts"]["effects"] >= 3
    assert report["counts"]["approvals"] == 2
    assert report["counts"]["dead letters"] == 1
    assert report["storage"] == "integrity_check ok"


def test_check_store_from_tether_testing_returns_the_report(db: Path) -> None:
    report = check_store(db)
    assert report.ok, report.summary()
    assert report.counts["snapshots"] >= 1


@pytest.mark.anyio
async def test_check_store_inside_an_event_loop_says_to_await_the_async_one(db: Path) -> None:
    with pytest.raises(tether.ConfigError, match="check_store_async"):
        check_store(db)
    report = await check_store_async(db)
    assert report.ok, report.summary()


def test_check_of_a_missing_store_fails_without_creating_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "--db", tmp_path / "none.db", "check")
    assert code == 1
    assert err.startswith("tether: error: no store at")
    assert not (tmp_path / "none.db").exists()


# -- each violation, named ------------------------------------------------------------------------


def test_a_gap_in_a_journal_is_named_with_its_actor(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql(db, "DELETE FROM journal WHERE actor_id = 'acct' AND seq = 2")
    [v] = of_kind(violations(capsys, db), "journal_gap")
    assert v["actor_id"] == "acct"
    assert "skips from seq 1 to seq 3" in v["message"]


def test_events_after_the_head_are_named(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql(db, "UPDATE actors SET head_seq = 1 WHERE actor_id = 'acct'")
    found = violations(capsys, db)
    [v] = of_kind(found, "journal_past_head")
    assert v["actor_id"] == "acct"
    [s] = of_kind(found, "snapshot_past_head")
    assert s["actor_id"] == "acct"


def test_a_snapshot_that_is_not_the_fold_of_its_journal_is_named(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [(seq, state)] = sql(db, "SELECT seq, state FROM snapshots WHERE actor_id = 'acct'")
    wrong = msgspec.msgpack.decode(state)
    wrong["balance"] = wrong["balance"] + 1000
    sql(db, "UPDATE snapshots SET state = ? WHERE actor_id = 'acct'", msgspec.msgpack.encode(wrong))
    [v] = of_kind(violations(capsys, db), "snapshot_mismatch")
    assert v["actor_id"] == "acct"
    assert f"at seq {seq}" in v["message"]


def test_a_snapshot_of_a_class_that_does_not_import_is_listed_unchecked_not_failed(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql(db, "UPDATE actors SET class_path = 'gone.module:Account' WHERE actor_id = 'acct'")
    code, report, _ = check_json(capsys, db)
    assert (code, report["ok"]) == (0, True)
    [note] = [u for u in report["unchecked"] if "'acct'" in u]
    assert "gone.module:Account" in note


def test_an_effect_whose_key_is_not_its_calls_is_named_with_its_key(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [(key,)] = sql(db, "SELECT key FROM effects WHERE actor_id = 'a1' AND tool = 'refund'")
    sql(db, "UPDATE effects SET key = 'forged' WHERE key = ?", key)
    [v] = of_kind(violations(capsys, db), "effect_key_mismatch")
    assert (v["actor_id"], v["key"]) == ("a1", "forged")


def test_a_key_held_by_two_ledger_rows_is_executed_twice(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [(key,)] = sql(db, "SELECT key FROM effects WHERE actor_id = 'a1' AND tool = 'refund'")
    sql(
        db,
        "INSERT INTO effects SELECT actor_id, msg_id || '-again', idx, key, tool, input_hash, "
        "args, status, attempts, result, error, reason, history, created_at, updated_at "
        "FROM effects WHERE key = ?",
        key,
    )
    [v] = of_kind(violations(capsys, db), "key_executed_twice")
    assert v["key"] == key
    assert "2 ledger rows" in v["message"]


def test_a_receipt_without_its_result_is_named(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [(key,)] = sql(db, "SELECT key FROM effects WHERE actor_id = 'a1' AND tool = 'refund'")
    sql(db, "UPDATE effects SET result = NULL WHERE key = ?", key)
    [v] = of_kind(violations(capsys, db), "receipt_incomplete")
    assert v["key"] == key


def test_an_intent_left_without_receipt_quarantine_or_owner_is_named(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The step committed (its message is gone), but its effect's receipt is not there."""
    [(key,)] = sql(db, "SELECT key FROM effects WHERE actor_id = 'paid' AND tool = 'wire'")
    sql(db, "UPDATE effects SET status = 'pending', result = NULL WHERE key = ?", key)
    [v] = of_kind(violations(capsys, db), "intent_without_receipt")
    assert (v["actor_id"], v["key"]) == ("paid", key)


def test_a_retry_whose_message_was_acknowledged_is_named_as_left_behind(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row that says "call again when the step runs again", whose step committed: nothing
    will ever make or settle it (a step that went on without the call settles it itself)."""
    [(key,)] = sql(db, "SELECT key FROM effects WHERE actor_id = 'paid' AND tool = 'wire'")
    sql(db, "UPDATE effects SET status = 'retry', result = NULL WHERE key = ?", key)
    [v] = of_kind(violations(capsys, db), "retry_left_behind")
    assert (v["actor_id"], v["key"]) == ("paid", key)
    assert "nothing will make or settle it" in v["message"]


def test_a_call_of_a_tool_that_requires_approval_without_one_is_named(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [(rid,)] = sql(db, "SELECT request_id FROM approvals WHERE actor_id = 'paid'")
    sql(db, "DELETE FROM approvals WHERE request_id = ?", rid)
    [v] = of_kind(violations(capsys, db), "unapproved_call")
    assert (v["actor_id"], v["request_id"]) == ("paid", rid)
    assert "requires approval" in v["message"]


def test_a_call_run_under_an_approval_of_another_call_is_named(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [(rid, blob)] = sql(db, "SELECT request_id, record FROM approvals WHERE actor_id = 'paid'")
    record = msgspec.msgpack.decode(blob)
    record["fingerprint"] = "0" * 32
    sql(
        db,
        "UPDATE approvals SET record = ? WHERE request_id = ?",
        msgspec.msgpack.encode(record),
        rid,
    )
    [v] = of_kind(violations(capsys, db), "approval_mismatch")
    assert v["request_id"] == rid


def test_a_call_that_ran_although_its_request_was_rejected_is_named(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [(rid, blob)] = sql(db, "SELECT request_id, record FROM approvals WHERE actor_id = 'paid'")
    record = msgspec.msgpack.decode(blob)
    record["status"] = "rejected"
    sql(
        db,
        "UPDATE approvals SET record = ? WHERE request_id = ?",
        msgspec.msgpack.encode(record),
        rid,
    )
    [v] = of_kind(violations(capsys, db), "unapproved_call")
    assert v["request_id"] == rid
    assert "is rejected" in v["message"]


def test_a_message_both_waiting_and_dead_lettered_is_named(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [(msg_id,)] = sql(db, "SELECT msg_id FROM dead_letters")
    sql(
        db,
        "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, created_at) "
        "SELECT msg_id, actor_id, type, payload, created_at, created_at FROM dead_letters",
    )
    [v] = of_kind(violations(capsys, db), "message_also_dead_lettered")
    assert (v["actor_id"], v["msg_id"]) == ("acct", msg_id)


def test_mail_for_an_actor_the_store_does_not_hold_is_named(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql(
        db,
        "INSERT INTO mailbox (msg_id, actor_id, type, payload, deliver_at, created_at) "
        "VALUES ('stray-1', 'nobody', 'Deposit', x'80', 1.0, 1.0)",
    )
    [v] = of_kind(violations(capsys, db), "mail_for_unknown_actor")
    assert (v["actor_id"], v["msg_id"]) == ("nobody", "stray-1")


def test_a_message_parked_for_good_with_nothing_to_wake_it_is_named(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its quarantined effect was turned into an abort behind tether's back: no person will
    ever be asked about it, and the message waits for ever."""
    [(key, msg_id)] = sql(db, "SELECT key, msg_id FROM effects WHERE status = 'quarantined'")
    sql(db, "UPDATE effects SET status = 'aborted' WHERE key = ?", key)
    [v] = of_kind(violations(capsys, db), "parked_without_reason")
    assert (v["actor_id"], v["msg_id"]) == ("a1", msg_id)


def test_a_row_of_the_wrong_type_is_named_unreadable(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [(msg_id,)] = sql(db, "SELECT msg_id FROM dead_letters")
    sql(db, "UPDATE dead_letters SET created_at = 'yesterday'")
    [v] = of_kind(violations(capsys, db), "unreadable_row")
    assert v["key"] == msg_id


def overwrite_last_page_of(db: Path, name: str) -> None:
    size = int(sql(db, "PRAGMA page_size")[0][0])
    [(page,)] = sql(
        db, "SELECT pageno FROM dbstat WHERE name = ? ORDER BY pageno DESC LIMIT 1", name
    )
    with db.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(bytes([0xA5]) * size)


def test_a_registry_too_damaged_to_list_is_named_and_the_rest_is_still_checked(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overwrite_last_page_of(db, "actors")
    code, report, err = check_json(capsys, db)
    assert (code, report["ok"]) == (1, False)
    assert "Traceback" not in err
    assert any("the actors cannot be read" in v["message"] for v in report["violations"])
    assert report["counts"]["effects"] >= 3  # the ledger was still read and checked


def test_an_overwritten_page_fails_sqlites_integrity_check(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    overwrite_last_page_of(db, "effects_by_status")
    found = violations(capsys, db)
    assert of_kind(found, "storage_damaged")
    code, out, _ = cli(capsys, "--db", db, "check")
    assert code == 1
    assert "storage: integrity_check failed" in out
    assert "storage_damaged" in out.splitlines()[-1]


def test_each_violation_line_names_its_ids_and_the_summary_counts_them(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql(db, "DELETE FROM journal WHERE actor_id = 'acct' AND seq = 2")
    sql(db, "DELETE FROM journal WHERE actor_id = 'paid'")
    code, out, _ = cli(capsys, "--db", db, "check")
    assert code == 1
    lines = out.splitlines()
    assert any(line.startswith("journal_gap:") and "'acct'" in line for line in lines)
    assert any(line.startswith("journal_gap:") and "'paid'" in line for line in lines)
    assert lines[-1] == f"{db}: 2 violation(s): 2 journal_gap"


def test_the_progress_bar_is_drawn_on_a_terminal_and_erased() -> None:
    class Tty:
        def __init__(self) -> None:
            self.text = ""

        def write(self, s: str) -> int:
            self.text += s
            return len(s)

        def flush(self) -> None:
            pass

    out = Tty()
    bar = ProgressBar(out)  # type: ignore[arg-type]
    bar(1, 4)
    bar(4, 4)
    assert "checking actors [" in out.text
    assert "1/4" in out.text
    assert "4/4" in out.text
    assert out.text.endswith("\r")


# -- agent sessions: snapshots of every step, a loop guard, a modified approval --------------------


@pytest.fixture
def session_log() -> Iterator[None]:
    """The session agents' tool log, empty before and after (other modules' tests read it)."""
    session_agents.LOG.clear()
    yield
    session_agents.LOG.clear()


@pytest.mark.anyio
@pytest.mark.usefixtures("session_log")
async def test_agent_sessions_with_a_snapshot_every_event_check_clean(tmp_path: Path) -> None:
    """Sessions, their gates, loop guards and breakers snapshot at every event; a person
    modifies one call's arguments before approving it; a looping session is stopped. The
    loop guard's snapshots also hold the calls it rebuilds from the ledger: listed as not
    compared, not as a violation."""
    db = tmp_path / "agents.db"
    async with tether.Runtime(db, snapshot_every=1, poll_interval=0.02) as rt:
        small = await rt.spawn(RefundAgent, "small", goal="Refund delivered orders")
        await small.tell(tether.UserMessage("refund order 42"))
        looping = await rt.spawn(LoopingAgent, "looping", goal="look")
        await looping.tell(tether.UserMessage("look up 42"))
        big = await rt.spawn(RefundAgent, "big", goal="Refund delivered orders")
        await big.tell(tether.UserMessage("refund order 43"))
        [request] = await eventually(rt.approvals.pending)
        await rt.approvals.decide(
            request.request_id,
            tether.Modify(by="ops", args={"order_id": "43", "amount_cents": 100}),
        )
        for session in (small, looping, big):

            async def settled(session: tether.ActorRef = session) -> bool:
                info = await session.ask(GetSessionInfo(), timeout=10)
                return bool(info.status != "working")

            await eventually(settled)
    report = await check_store_async(db)
    assert report.ok, report.summary()
    assert report.counts["snapshots"] >= 6
    assert any("LoopGuard" in note for note in report.unchecked)
    [approval] = await _approvals(db)
    assert approval.approved_args != approval.args  # the modified call is the one that ran


async def _approvals(db: Path) -> list[Any]:
    async with tether.Runtime(db, serve=False) as rt:
        return await rt.store.find_approvals()


@pytest.mark.anyio
async def test_the_check_reads_only_through_the_store_protocol_so_a_memory_store_checks_too() -> (
    None
):
    """The same checks on another backend (here the memory store): a store without a check of
    its own storage says so, and a clean workload is clean."""
    async with tether.Runtime(":memory:", max_attempts=1, snapshot_every=2) as rt:
        acct = await rt.spawn(sa.Account, "acct")
        for amount in (1, 2, 3):
            await acct.tell(sa.Deposit(amount=amount))
        await acct.tell(sa.Fail(key="always"))
        await eventually(rt.dead_letters.list)
        assert await acct.ask(sa.GetBalance(), timeout=10) == 6
        report = await check_runtime_store(rt)
    assert report.ok, report.summary()
    assert report.storage == "the backend offers no check of its own storage"
    assert (report.counts["events"], report.counts["snapshots"]) == (3, 1)
    assert report.counts["dead letters"] == 1
