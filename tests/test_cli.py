"""The ``tether`` command on real store files: listings, ``show``, approvals, quarantine,
dead letters and the tree; ``--json`` everywhere; one-line errors with exit codes 1 and 2.

The state is built with a real Runtime (a wire transfer waiting for approval, an email whose
outcome is ambiguous and quarantined, a message that failed into the dead letters); the CLI
then runs in-process through ``tether.cli.main`` and, in the last tests, as the installed
console script in its own process while a serving runtime waits for its decision."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests import sample_actors as sa
from tests.cli_runs import cli, cli_json
from tests.runtime import effect_actors as fx
from tests.runtime.effect_actors import HANG, Agent, Banker, Do, Ping, Wire
from tests.schema_v2 import as_schema_v2
from tests.sqlite_files import audit_rows, dump, dump_but_audit
from tether.render.records import is_session
from tether.store.records import ActorRecord
from tether.store.sqlite.schema import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    fx.reset()
    Agent.fail_once.clear()
    sa.failures.clear()
    yield
    fx.reset()
    sa.failures.clear()


async def eventually(check: Any, timeout: float = 10.0) -> Any:
    with anyio.fail_after(timeout):
        while True:
            value = await check()
            if value:
                return value
            await anyio.sleep(0.01)


async def _build(db: Path | str) -> None:
    """b1 waits for approval of a wire; a1's email is quarantined after its refund ran; acct
    has one event in its journal and one message in the dead letters."""
    fx.SCRIPT["send_email"] = [HANG]
    async with tether.Runtime(db, poll_interval=0.02, max_attempts=2) as rt:
        b1 = await rt.spawn(Banker, "b1")
        await b1.tell(Wire(to="acme", cents=500))
        a1 = await rt.spawn(Agent, "a1")
        await a1.tell(Do(effects=["refund", "email"]))
        acct = await rt.spawn(sa.Account, "acct")
        await acct.tell(sa.Deposit(amount=5))
        await acct.tell(sa.Fail(key="always"))
        await eventually(rt.approvals.pending)
        await eventually(rt.quarantine.list)
        await eventually(rt.dead_letters.list)
    fx.reset()


@pytest.fixture(scope="module")
def _template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("template") / "agents.db"
    anyio.run(_build, db, backend="asyncio")
    fx.reset()
    return db


@pytest.fixture
def db(_template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the built store for each test."""
    path = tmp_path / "agents.db"
    shutil.copy(_template, path)
    return path


def one_request_id(capsys: pytest.CaptureFixture[str], db: Path) -> str:
    [request] = cli_json(capsys, "approvals", "list", "--db", db)
    return str(request["request_id"])


def one_quarantined_key(capsys: pytest.CaptureFixture[str], db: Path) -> str:
    [effect] = cli_json(capsys, "quarantine", "list", "--db", db)
    return str(effect["key"])


def results_after_serving(db: Path, actor_id: str) -> list[list[str]]:
    """Open a serving runtime on ``db`` and wait until ``actor_id`` has recorded a result."""

    async def run() -> list[list[str]]:
        async with tether.Runtime(db, poll_interval=0.02) as rt:

            async def results() -> list[list[str]]:
                assert await rt.ref(actor_id).ask(Ping(), timeout=5) == "pong"
                cell = rt.cells.get(actor_id)
                return [] if cell is None else list(cell.state.results)

            found: list[list[str]] = await eventually(results)
            return found

    return anyio.run(run, backend="asyncio")


def assert_one_line_error(err: str, *fragments: str) -> None:
    assert err.startswith("tether: error: ")
    assert err.count("\n") == 1
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err


# -- listings -----------------------------------------------------------------------------------


def test_actors_lists_every_actor_with_mailbox_journal_and_lease(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "--db", db, "actors")
    assert (code, err) == (0, "")
    header, *lines = out.splitlines()
    assert header.split() == ["ID", "CLASS", "STATUS", "MAILBOX", "PARKED", "JOURNAL", "LEASE"]
    b1 = next(line for line in lines if line.startswith("b1 "))
    # The store says "active"; the listing says it in the tree's words (tether.ActorStatus).
    assert b1.split()[:6] == ["b1", "tests.runtime.effect_actors:Banker", "running", "1", "1", "0"]
    rows = {r["id"]: r for r in cli_json(capsys, "actors", "--db", db)}
    assert {"b1", "a1", "acct"} <= rows.keys()
    assert rows["acct"]["journal"] == 1
    assert rows["acct"]["mailbox"] == 0
    assert rows["a1"]["parked"] == 1
    assert rows["b1"]["class"] == "tests.runtime.effect_actors:Banker"
    assert not any(r["lease_live"] for r in rows.values())  # nobody serves the store now


def test_sessions_lists_agent_sessions_only(
    db: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert cli_json(capsys, "sessions", "--db", db) == []  # plain actors are not sessions
    store = tmp_path / "sessions.db"

    async def build() -> None:
        from tests.actors.session_agents import RefundAgent

        async with tether.Runtime(store) as rt:
            s = await rt.spawn(RefundAgent, "chat-1", goal="Refund delivered orders")
            await s.ask(tether.UserMessage("please refund order 42"), timeout=10)

    anyio.run(build)
    capsys.readouterr()  # the runtime's own log lines
    ids = [r["id"] for r in cli_json(capsys, "sessions", "--db", store)]
    assert ids == ["chat-1"]
    code, out, _ = cli(capsys, "sessions", "--db", store)
    assert code == 0
    assert out.splitlines()[0].startswith("ID")


def record(actor_id: str, parent_id: str | None = None, init: bytes = b"\x80") -> ActorRecord:
    return ActorRecord(actor_id, "m:C", init, parent_id, "active", None, 0, None, 0.0, 0.0)


GOAL = b"\x81\xa4goal\xa6refund"  # msgpack of {"goal": "refund"}: how every session is spawned


@pytest.mark.parametrize(
    ("actor_id", "parent_id", "init", "expected"),
    [
        ("chat-42", None, GOAL, True),
        ("worker-1", "sup", GOAL, True),  # a session under the application's supervisor
        ("agents", None, b"\x80", False),  # the application's supervisor: no goal
        ("tether.guards", None, b"\x80", False),
        ("breaker:send_email", None, b"\x80", False),
        ("chat-42/loops", None, GOAL, False),
        ("chat-43", None, b"\xc1", False),  # init that does not decode
    ],
)
def test_an_unimportable_class_counts_as_a_session_when_spawned_with_a_goal_and_not_internal(
    actor_id: str, parent_id: str | None, init: bytes, expected: bool
) -> None:
    assert is_session(record(actor_id, parent_id, init)) is expected


def test_show_gives_record_state_journal_mailbox_effects_and_approvals(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "--db", db, "show", "a1")
    assert (code, err) == (0, "")
    assert "class    tests.runtime.effect_actors:Agent" in out
    assert "mailbox: 1 message(s)" in out
    assert "parked" in out
    assert "effects: 2" in out
    assert "refund" in out
    assert "quarantined" in out
    shown = cli_json(capsys, "show", "a1", "--db", db)
    assert shown["actor"]["id"] == "a1"
    [msg] = shown["mailbox"]
    assert msg["type"] == "Do"
    assert msg["parked"] is True
    assert msg["payload"] == {"type": "Do", "effects": ["refund", "email"], "fail_after": False}
    statuses = [(e["index"], e["tool"], e["status"]) for e in shown["effects"]]
    assert statuses == [(0, "refund", "done"), (1, "send_email", "quarantined")]
    assert shown["effects"][0]["result"]["order_id"] == "o0"
    assert shown["pending_approvals"] == []

    banker = cli_json(capsys, "show", "b1", "--db", db)
    [request] = banker["pending_approvals"]
    assert request["tool"] == "wire"
    assert request["args"] == {"to": "acme", "cents": 500}


def test_show_decodes_the_journal_and_limits_it_with_events(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = cli_json(capsys, "show", "acct", "--db", db)
    assert shown["journal"] == [{"seq": 1, "event": {"type": "Deposited", "amount": 5}}]
    assert shown["snapshot"] is None
    assert shown["events_since_snapshot"] == 1
    assert shown["actor"]["journal"] == 1
    assert cli_json(capsys, "show", "acct", "--events", "0", "--db", db)["journal"] == []
    code, out, _ = cli(capsys, "show", "acct", "--db", db)
    assert code == 0
    assert "state: no snapshot; the initial state folded with 1 event(s)" in out
    assert "Deposited: amount=5" in out  # an application's event: its type and fields


def test_tree_renders_the_roots_and_their_children(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "tree", "--db", db)
    assert code == 0
    assert "b1 (Banker) running" in out
    roots = cli_json(capsys, "tree", "--db", db)
    assert {"a1", "b1", "acct"} <= {r["id"] for r in roots}
    assert all("children" in r for r in roots)


@pytest.mark.parametrize(
    "argv",
    [
        ["actors"],
        ["show", "b1"],
        ["tree"],
        ["approvals", "list"],
        ["approvals", "list", "--status", "all", "--session", "b1"],
        ["quarantine", "list"],
        ["quarantine", "list", "--actor", "a1"],
        ["dead-letters", "list"],
        ["dead-letters", "list", "--actor", "acct"],
    ],
)
def test_every_listing_prints_parseable_json(
    db: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    value = cli_json(capsys, *argv, "--db", db)
    assert value  # every listing has something in the built store


# -- approvals ----------------------------------------------------------------------------------


def test_approvals_list_and_show_describe_the_held_call(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "--db", db, "approvals", "list")
    assert code == 0
    header, line = out.splitlines()
    assert header.split()[:4] == ["REQUEST", "SESSION", "TOOL", "ARGS"]
    assert " b1 " in line
    assert '{"to":"acme","cents":500}' in line
    request_id = one_request_id(capsys, db)
    code, out, _ = cli(capsys, "--db", db, "approvals", "show", request_id)
    assert code == 0
    assert f"request              {request_id}" in out
    assert "context.goal         pay the supplier" in out
    assert "then reject" in out
    shown = cli_json(capsys, "--db", db, "approvals", "show", request_id)
    assert shown["status"] == "pending"
    assert shown["approvers_needed"] == 1


def test_approving_from_the_cli_lets_the_session_finish(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_id = one_request_id(capsys, db)
    code, out, err = cli(capsys, "--db", db, "approvals", "approve", request_id, "--by", "alice")
    assert (code, err) == (0, "")
    assert f"{request_id}: approved" in out
    assert cli_json(capsys, "--db", db, "approvals", "list") == []
    assert results_after_serving(db, "b1") == [["wired 500 to acme"]]


def test_deciding_an_already_decided_request_fails_with_a_clear_message(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_id = one_request_id(capsys, db)
    assert cli(capsys, "--db", db, "approvals", "approve", request_id, "--by", "alice")[0] == 0
    code, out, err = cli(
        capsys, "--db", db, "approvals", "reject", request_id, "--by", "bob", "--reason", "no"
    )
    assert code == 1
    assert out == ""
    assert_one_line_error(err, request_id, "closed", "already approved")


def test_rejecting_sends_the_reason_back_to_the_session(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_id = one_request_id(capsys, db)
    decided = cli_json(
        capsys,
        *("--db", db, "approvals", "reject", request_id),
        *("--by", "bob", "--reason", "invoice missing"),
    )
    assert decided["status"] == "rejected"
    assert results_after_serving(db, "b1") == [["rejected by bob: invoice missing"]]
    assert fx.CALLS == []


def test_modifying_runs_the_call_with_the_new_arguments(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_id = one_request_id(capsys, db)
    new_args = json.dumps({"to": "acme", "cents": 50})
    code, out, _ = cli(
        capsys, "--db", db, "approvals", "modify", request_id, "--by", "carol", "--args", new_args
    )
    assert code == 0
    assert "approved" in out
    assert results_after_serving(db, "b1") == [["wired 50 to acme"]]


def test_modify_with_arguments_the_tool_refuses_names_the_field(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_id = one_request_id(capsys, db)
    bad = json.dumps({"to": "acme", "cents": "lots"})
    code, out, err = cli(
        capsys, "--db", db, "approvals", "modify", request_id, "--by", "carol", "--args", bad
    )
    assert code == 1
    assert out == ""
    assert_one_line_error(err, "wire", "$.cents")
    assert cli_json(capsys, "--db", db, "approvals", "show", request_id)["status"] == "pending"


@pytest.mark.parametrize(
    ("args_json", "problem"),
    [("{to: acme}", "--args is not valid JSON"), ("[1, 2]", "not an array")],
)
def test_modify_with_malformed_json_is_a_usage_error(
    db: Path, capsys: pytest.CaptureFixture[str], args_json: str, problem: str
) -> None:
    request_id = one_request_id(capsys, db)
    code, _, err = cli(
        capsys, "--db", db, "approvals", "modify", request_id, "--by", "c", "--args", args_json
    )
    assert code == 2
    assert_one_line_error(err, problem.replace("not an array", "JSON object"))


def test_an_unknown_request_id_is_an_error_naming_it(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["show", "apr-nope"], ["approve", "apr-nope", "--by", "alice"]):
        code, out, err = cli(capsys, "--db", db, "approvals", *argv)
        assert code == 1
        assert out == ""
        assert_one_line_error(err, "no approval request with id 'apr-nope'")


def damage_a_copy_of_the_request(db: Path) -> str:
    """A second pending request for b1, its record undecodable: the id of the damaged one."""
    con = sqlite3.connect(db)
    try:
        with con:
            con.execute(
                "INSERT INTO approvals SELECT 'apr-damaged', actor_id, status, version, "
                "created_at + 1, x'c1ffff' FROM approvals"
            )
    finally:
        con.close()
    return "apr-damaged"


def test_approvals_list_shows_a_corrupt_request_by_id_and_every_other_one(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    request_id = one_request_id(capsys, db)
    damaged = damage_a_copy_of_the_request(db)
    for argv in (["approvals", "list"], ["approvals", "list", "--session", "b1"]):
        code, out, err = cli(capsys, "--db", db, *argv)
        assert code == 1  # listed, and a script learns that one could not be read
        assert_one_line_error(
            err, f"1 approval request(s) cannot be decoded (listed as corrupt): {damaged}"
        )
        header, line, corrupt = out.splitlines()
        assert header.startswith("REQUEST")
        assert line.startswith(request_id)
        assert corrupt.startswith(f"corrupt: approval request '{damaged}' cannot be decoded: ")
    code, out, err = cli(capsys, "--db", db, "approvals", "list", "--json")
    assert code == 1
    good, bad = json.loads(out)
    assert good["request_id"] == request_id
    assert bad["request_id"] == damaged
    assert bad["status"] == "corrupt"
    assert "cannot be decoded" in bad["error"]
    code, out, err = cli(capsys, "--db", db, "approvals", "show", damaged)
    assert (code, out) == (1, "")
    assert_one_line_error(err, f"approval request '{damaged}' cannot be decoded")


def test_a_decision_without_its_required_options_is_a_usage_error(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "--db", db, "approvals", "reject", "apr-x", "--by", "bob")
    assert code == 2
    assert "--reason" in err
    code, _, err = cli(capsys, "--db", db, "approvals", "approve", "apr-x", "--by", " ")
    assert code == 2
    assert "must not be empty" in err


# -- quarantine ---------------------------------------------------------------------------------


def test_quarantine_list_and_show_describe_the_ambiguous_effect(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "--db", db, "quarantine", "list")
    assert code == 0
    header, line = out.splitlines()
    assert header.split()[:4] == ["KEY", "ACTOR", "#", "TOOL"]
    assert "send_email" in line
    key = one_quarantined_key(capsys, db)
    code, out, _ = cli(capsys, "--db", db, "quarantine", "show", key)
    assert code == 0
    assert "TimeoutError" in out
    shown = cli_json(capsys, "--db", db, "quarantine", "show", key)
    assert shown["args"] == {"to": "a@b.c", "body": "hello 1"}
    assert cli_json(capsys, "--db", db, "quarantine", "list", "--actor", "b1") == []


def test_marking_a_quarantined_effect_done_gives_the_step_its_result(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = one_quarantined_key(capsys, db)
    code, out, err = cli(
        capsys,
        *("--db", db, "quarantine", "resolve", key),
        *("--done", "--result", '"sent (confirmed)"', "--by", "ops"),
    )
    assert (code, err) == (0, "")
    assert "marked done" in out
    assert cli_json(capsys, "--db", db, "quarantine", "list") == []
    assert results_after_serving(db, "a1") == [["refund o0 100", "sent (confirmed)"]]
    assert [name for name, _ in fx.CALLS] == []  # nothing was called again
    code, _, err = cli(capsys, "--db", db, "quarantine", "resolve", key, "--retry", "--by", "ops")
    assert code == 1
    assert_one_line_error(err, key, "done, not quarantined")


def test_retrying_a_quarantined_effect_calls_the_tool_again(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = one_quarantined_key(capsys, db)
    resolved = cli_json(capsys, "--db", db, "quarantine", "resolve", key, "--retry", "--by", "ops")
    assert resolved["resolution"] == "retry"
    assert results_after_serving(db, "a1") == [["refund o0 100", "sent to a@b.c"]]
    assert [name for name, _ in fx.CALLS] == ["send_email"]


def test_aborting_a_quarantined_effect_tells_the_step_why(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = one_quarantined_key(capsys, db)
    code, _, err = cli(capsys, "--db", db, "quarantine", "resolve", key, "--abort", "--by", "ops")
    assert code == 2
    assert_one_line_error(err, "--abort needs --reason")
    code, out, _ = cli(
        capsys,
        *("--db", db, "quarantine", "resolve", key),
        *("--abort", "--reason", "already emailed", "--by", "ops"),
    )
    assert code == 0
    assert "aborted: already emailed" in out
    assert results_after_serving(db, "a1") == [["refund o0 100", "aborted: already emailed"]]


def test_resolving_needs_exactly_one_way_and_a_known_key(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = one_quarantined_key(capsys, db)
    code, _, err = cli(capsys, "--db", db, "quarantine", "resolve", key, "--by", "ops")
    assert code == 2
    assert "one of the arguments --done --retry --abort is required" in err
    code, _, err = cli(
        capsys, "--db", db, "quarantine", "resolve", key, "--done", "--retry", "--by", "ops"
    )
    assert code == 2
    code, _, err = cli(
        capsys, "--db", db, "quarantine", "resolve", key, "--done", "--result", "{", "--by", "o"
    )
    assert code == 2
    assert_one_line_error(err, "--result is not valid JSON")
    code, _, err = cli(capsys, "--db", db, "quarantine", "resolve", "nope", "--done", "--by", "o")
    assert code == 1
    assert_one_line_error(err, "effect 'nope'", "no quarantined effect")


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("--result", "NaN", "NaN is not a JSON value"),
        ("--result", "[1, -Infinity]", "-Infinity is not a JSON value"),
        ("--result", "1e400", "the number 1e400 is too large"),
        ("--result", "9" * 5000, "4300 digits"),
        ("--args", '{"to": "acme", "cents": Infinity}', "Infinity is not a JSON value"),
    ],
)
def test_json_options_refuse_nan_infinity_and_unreadable_numbers_as_usage_errors(
    db: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, problem: str
) -> None:
    # Python's json reads these; none is JSON, and stored they reach the agent as values no
    # JSON consumer reads back (or, for 5000 digits, failed with a traceback).
    before = dump(db)
    if option == "--result":
        key = one_quarantined_key(capsys, db)
        argv = ["quarantine", "resolve", key, "--done", "--result", value, "--by", "ops"]
    else:
        argv = ["approvals", "modify", one_request_id(capsys, db), "--by", "c", "--args", value]
    code, out, err = cli(capsys, "--db", db, *argv)
    assert (code, out) == (2, "")
    assert_one_line_error(err, f"{option} is not valid JSON", problem)
    assert dump(db) == before


@pytest.mark.parametrize("option", ["--result", "--args"])
@pytest.mark.parametrize("levels", [1000, 300])
def test_json_options_nested_too_deep_are_usage_errors_in_one_line(
    db: Path, capsys: pytest.CaptureFixture[str], option: str, levels: int
) -> None:
    # 1000 levels: deeper than Python's json parser goes (it raised a bare RecursionError, with
    # a traceback); 300: parsed, but deeper than anything tether stores.
    deep = "[" * levels + "]" * levels
    before = dump(db)
    if option == "--result":
        key = one_quarantined_key(capsys, db)
        argv = ["quarantine", "resolve", key, "--done", "--result", deep, "--by", "ops"]
    else:
        value = '{"to": ' + deep + ', "cents": 5}'
        argv = ["approvals", "modify", one_request_id(capsys, db), "--by", "c", "--args", value]
    code, out, err = cli(capsys, "--db", db, *argv)
    assert (code, out) == (2, "")
    assert_one_line_error(err, f"{option} cannot be stored", "more than 256 levels deep")
    assert dump(db) == before


def test_a_number_beyond_64_bits_is_refused_naming_it_and_nothing_is_stored(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = dump(db)
    key = one_quarantined_key(capsys, db)
    code, _, err = cli(
        capsys,
        *("--db", db, "quarantine", "resolve", key),
        *("--done", "--result", str(10**30), "--by", "ops"),
    )
    assert code == 1
    assert_one_line_error(err, f"result for effect {key} cannot be recorded", "ints")
    request_id = one_request_id(capsys, db)
    code, _, err = cli(
        capsys,
        *("--db", db, "approvals", "modify", request_id, "--by", "c"),
        *("--args", json.dumps({"to": "acme", "cents": 10**30})),
    )
    assert code == 1
    assert_one_line_error(err, "tool 'wire': invalid arguments", "cannot be stored")
    # Nothing but the two refused attempts' audit rows
    assert dump_but_audit(db) == before
    refusals = [(r["action"], r["outcome"], r["via"], r["authenticated"]) for r in audit_rows(db)]
    assert refusals == [("effect.done", "refused", "cli", 0), ("modify", "refused", "cli", 0)]


# -- dead letters -------------------------------------------------------------------------------


def test_dead_letters_list_retry_and_discard(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "--db", db, "dead-letters", "list")
    assert code == 0
    assert "boom always" in out
    [letter] = cli_json(capsys, "--db", db, "dead-letters", "list", "--actor", "acct")
    assert letter["type"] == "Fail"
    assert letter["payload"] == {"type": "Fail", "key": "always", "times": 1_000_000}
    assert letter["attempts"] == 2
    assert cli_json(capsys, "--db", db, "dead-letters", "list", "--actor", "b1") == []

    code, out, _ = cli(capsys, "--db", db, "dead-letters", "retry", letter["msg_id"])
    assert code == 0
    assert "back in its actor's mailbox" in out
    assert cli_json(capsys, "--db", db, "dead-letters", "list") == []
    acct = next(r for r in cli_json(capsys, "--db", db, "actors") if r["id"] == "acct")
    assert acct["mailbox"] == 1

    code, _, err = cli(capsys, "--db", db, "dead-letters", "discard", letter["msg_id"])
    assert code == 1
    assert_one_line_error(err, f"no dead letter with message id {letter['msg_id']!r}")


def test_discarding_a_dead_letter_deletes_it(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [letter] = cli_json(capsys, "--db", db, "dead-letters", "list")
    code, out, _ = cli(capsys, "--db", db, "dead-letters", "discard", letter["msg_id"])
    assert code == 0
    assert "discarded" in out
    assert cli_json(capsys, "--db", db, "dead-letters", "list") == []


# -- errors -------------------------------------------------------------------------------------


def test_a_missing_store_is_an_error_and_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.db"
    code, out, err = cli(capsys, "--db", missing, "actors")
    assert code == 1
    assert out == ""
    assert_one_line_error(err, f"no store at {str(missing)!r}")
    assert not missing.exists()


def test_the_store_defaults_to_tether_db_env_then_tether_db(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TETHER_DB", raising=False)
    code, _, err = cli(capsys, "actors")
    assert code == 1
    assert_one_line_error(err, "no store at 'tether.db'", "TETHER_DB")
    assert not (tmp_path / "tether.db").exists()
    monkeypatch.setenv("TETHER_DB", str(db))
    assert {"a1", "b1", "acct"} <= {r["id"] for r in cli_json(capsys, "actors")}


def test_the_store_is_named_by_url_on_the_command_line_and_in_tether_db(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--db`` and ``$TETHER_DB`` take the URLs ``tether.open_store`` takes: sqlite:/// with a
    relative or an absolute path."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TETHER_DB", raising=False)
    by_path = {r["id"] for r in cli_json(capsys, "--db", db, "actors")}
    assert {"a1", "b1", "acct"} <= by_path
    assert {r["id"] for r in cli_json(capsys, "--db", f"sqlite:///{db}", "actors")} == by_path
    assert {r["id"] for r in cli_json(capsys, "--db", "sqlite:///agents.db", "actors")} == by_path
    monkeypatch.setenv("TETHER_DB", f"sqlite:///{db}")
    assert {r["id"] for r in cli_json(capsys, "actors")} == by_path
    code, out, _ = cli(capsys, "migrate")
    assert (code, out.strip()) == (
        0,
        f"sqlite:///{db}: schema version {SCHEMA_VERSION} already; nothing to do",
    )


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (":memory:", "exists only inside the process that made it"),
        ("memory://", "exists only inside the process that made it"),
        ("postgresql://postgres@127.0.0.1:1/agents", "cannot open store"),
        ("nosuch://x", "unknown store URL scheme 'nosuch'"),
        ("sqlite:///nope.db", "no store at 'nope.db'"),
    ],
)
def test_a_store_url_the_cli_cannot_open_is_one_line_naming_why(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    problem: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    for command in (["actors"], ["migrate"]):
        code, out, err = cli(capsys, "--db", url, *command)
        assert (code, out) == (1, ""), command
        assert_one_line_error(err, problem)
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize("class_path", ["", ".relative:Actor"])
def test_an_actor_with_a_malformed_class_path_is_still_listed_in_actors_and_the_tree(
    db: Path, capsys: pytest.CaptureFixture[str], class_path: str
) -> None:
    # importlib raises ValueError / TypeError for these, not ImportError: they were tracebacks
    with closing(sqlite3.connect(db)) as con, con:
        con.execute("UPDATE actors SET class_path = ? WHERE actor_id = 'acct'", (class_path,))
    assert "acct" in [a["id"] for a in cli_json(capsys, "--db", db, "actors")]
    # Not importable, spawned without a goal: not taken for a session, and no traceback.
    assert "acct" not in [s["id"] for s in cli_json(capsys, "--db", db, "sessions")]
    code, out, err = cli(capsys, "--db", db, "tree")
    assert (code, err) == (0, "")
    assert "acct" in out


def damage(db: Path, statement: str) -> None:
    with closing(sqlite3.connect(db)) as con, con:
        con.execute(statement)


@pytest.mark.parametrize(
    ("column", "value"), [("created_at", "x"), ("lease_expires", "abc"), ("fence", "z")]
)
def test_an_actor_row_with_a_value_of_the_wrong_type_is_named_and_every_other_one_is_listed(
    db: Path, capsys: pytest.CaptureFixture[str], column: str, value: str
) -> None:
    damage(db, f"UPDATE actors SET {column} = '{value}' WHERE actor_id = 'acct'")
    code, out, err = cli(capsys, "--db", db, "show", "acct")
    assert (code, out) == (1, "")
    assert_one_line_error(err, "actors row 'acct'", f"column {column}", repr(value))
    for command in ("actors", "sessions", "tree"):
        code, out, err = cli(capsys, "--db", db, command)
        assert code == 1, command
        assert_one_line_error(err, "1 damaged row(s)", "acct")
        if command != "sessions":  # none of the others is a session
            assert "b1" in out
            assert "a1" in out
        assert f"corrupt: actors row 'acct' is damaged: column {column}" in out
    code, out, err = cli(capsys, "--db", db, "actors", "--json")
    assert code == 1
    rows = json.loads(out)
    assert {"b1", "a1"} <= {r["id"] for r in rows}
    assert [r["id"] for r in rows if r.get("status") == "corrupt"] == ["acct"]


def test_mailbox_dead_letter_and_effect_rows_of_the_wrong_type_are_named_in_listings(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage(db, "UPDATE mailbox SET parks = 'x' WHERE actor_id = 'b1'")
    damage(db, "UPDATE dead_letters SET created_at = 'x'")
    damage(db, "UPDATE effects SET updated_at = 'x' WHERE status = 'quarantined'")
    for argv, named in [
        (("actors",), "mailbox row"),
        (("show", "b1"), "mailbox row"),
        (("show", "a1"), "effects row"),
        (("dead-letters", "list"), "dead_letters row"),
        (("quarantine", "list"), "effects row"),
    ]:
        code, out, err = cli(capsys, "--db", db, *argv)
        assert code == 1, argv
        assert_one_line_error(err, "1 damaged row(s)")
        assert f"corrupt: {named}" in out, argv
    assert "acct" in cli(capsys, "--db", db, "actors")[1]


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "is a directory"), (b"", "empty file"), (b"not sqlite" * 100, "cannot open store")],
)
def test_a_path_that_is_not_a_store_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, problem: str
) -> None:
    path = tmp_path / "thing"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    code, _, err = cli(capsys, "--db", path, "tree")
    assert code == 1
    assert_one_line_error(err, problem)


def test_an_unknown_actor_is_an_error_naming_it(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "--db", db, "show", "ghost")
    assert code == 1
    assert out == ""
    assert_one_line_error(err, "no actor with id 'ghost'")


def test_usage_errors_exit_2(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "--db", db)[0] == 2
    assert cli(capsys, "--db", db, "frobnicate")[0] == 2
    assert cli(capsys, "--db", db, "show", "b1", "--events", "-1")[0] == 2
    code, out, _ = cli(capsys, "--help")
    assert code == 0
    assert "approvals" in out


def test_an_interrupt_exits_130_without_a_traceback(
    db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def interrupted(rt: tether.Runtime, args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("tether.cli.sessions.cmd_tree", interrupted)
    code, _, err = cli(capsys, "--db", db, "tree")
    assert code == 130
    assert err == "tether: interrupted\n"


# -- the real command, in its own process -------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("TETHER_DB", None)
    return env


@pytest.mark.anyio
async def test_the_installed_command_approves_while_a_serving_runtime_waits(
    tmp_path: Path,
) -> None:
    db = tmp_path / "agents.db"
    command = Path(sys.executable).with_name("tether")
    assert command.exists(), "the tether console script is not installed in this environment"
    async with tether.Runtime(db, poll_interval=0.02) as rt:
        b1 = await rt.spawn(Banker, "b1")
        await b1.tell(Wire(to="acme", cents=700))
        [request] = await eventually(rt.approvals.pending)

        listed = await anyio.run_process(
            [sys.executable, "-m", "tether", "--db", str(db), "approvals", "list", "--json"],
            cwd=tmp_path,
            env=_env(),
        )
        [row] = json.loads(listed.stdout)
        assert row["request_id"] == request.request_id

        approved = await anyio.run_process(
            [
                str(command),
                "--db",
                str(db),
                "approvals",
                "approve",
                request.request_id,
                "--by",
                "alice",
            ],
            cwd=tmp_path,
            env=_env(),
        )
        assert approved.returncode == 0
        assert b"approved" in approved.stdout
        assert approved.stderr == b""

        async def outcome() -> list[list[str]]:
            assert await b1.ask(Ping(), timeout=5) == "pong"
            cell = rt.cells.get("b1")
            return [] if cell is None else list(cell.state.results)

        assert await eventually(outcome) == [["wired 700 to acme"]]

        again = await anyio.run_process(
            [
                str(command),
                "--db",
                str(db),
                "approvals",
                "approve",
                request.request_id,
                "--by",
                "bob",
            ],
            cwd=tmp_path,
            env=_env(),
            check=False,
        )
        assert again.returncode == 1
        assert again.stdout == b""
        assert again.stderr.decode().startswith("tether: error: approval request")
    assert [name for name, _ in fx.CALLS] == ["wire"]


def test_the_installed_command_reports_a_missing_store_without_a_traceback(
    tmp_path: Path,
) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "tether", "--db", str(tmp_path / "x.db"), "actors"],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("tether: error: no store at")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "x.db").exists()


# -- migrate ------------------------------------------------------------------------------------


def effect_rows(db: Path) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(db)
    try:
        return sorted(con.execute("SELECT * FROM effects").fetchall())
    finally:
        con.close()


def test_a_store_of_the_previous_schema_version_is_refused_naming_the_upgrade(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    as_schema_v2(db)
    before = dump(db)
    code, out, err = cli(capsys, "--db", db, "actors")
    assert (code, out) == (1, "")
    assert_one_line_error(err, "schema version '2'", "never migrates silently", "migrate")
    assert dump(db) == before


def test_migrate_upgrades_a_version_2_store_keeping_every_effect_usable(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every ledger row survives the re-keying, and the quarantined effect it held is found
    and resolved as before: the session finishes with the result a person gave."""
    rows = effect_rows(db)
    assert {r[7] for r in rows} == {"done", "quarantined"}
    as_schema_v2(db)
    code, out, err = cli(capsys, "--db", db, "migrate")
    assert (code, err) == (0, "")
    assert f"upgraded from schema version 2 to {SCHEMA_VERSION}" in out
    assert effect_rows(db) == rows
    code, out, _ = cli(capsys, "--db", db, "migrate")
    assert (code, out.strip()) == (
        0,
        f"{db}: schema version {SCHEMA_VERSION} already; nothing to do",
    )

    key = one_quarantined_key(capsys, db)
    code, _, err = cli(
        capsys,
        *("--db", db, "quarantine", "resolve", key),
        *("--done", "--result", '"sent (confirmed)"', "--by", "ops"),
    )
    assert (code, err) == (0, "")
    assert results_after_serving(db, "a1") == [["refund o0 100", "sent (confirmed)"]]
    assert [name for name, _ in fx.CALLS] == []  # replayed from the migrated ledger


def test_migrate_refuses_a_store_a_live_runtime_lists_unless_forced(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """This very process, registered as a runtime, is alive: the upgrade waits for it to stop.
    A runtime whose process has exited is no obstacle."""
    from tether.store.hosts import process_start, this_host

    as_schema_v2(db)
    con = sqlite3.connect(db)
    con.execute(
        "INSERT INTO runtimes VALUES (?, ?, ?, ?)",
        ("live-one", this_host(), os.getpid(), process_start(os.getpid())),
    )
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    con.execute(
        "INSERT INTO runtimes VALUES (?, ?, ?, ?)",
        ("gone-one", this_host(), int(gone.stdout), 1.0),
    )
    con.commit()
    con.close()
    before = dump(db)
    code, _, err = cli(capsys, "--db", db, "migrate")
    assert code == 1
    assert_one_line_error(err, "live-one", f"pid {os.getpid()}", "--force", "no change was made")
    assert "gone-one" not in err
    assert dump(db) == before
    code, out, err = cli(capsys, "--db", db, "migrate", "--force")
    assert (code, err) == (0, "")
    assert f"to {SCHEMA_VERSION}" in out


def test_migrate_refuses_a_version_it_has_no_upgrade_from(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    before = dump(db)
    code, _, err = cli(capsys, "--db", db, "migrate")
    assert code == 1
    assert_one_line_error(err, "schema version 999", "no upgrade from 999")
    assert dump(db) == before


# -- audit --------------------------------------------------------------------------------------


def test_audit_lists_every_cli_decision_and_resolution_marked_unauthenticated(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's --by is a name nobody checked: audited with via=cli, shown as such; refused
    attempts are listed too, newest first."""
    request_id = one_request_id(capsys, db)
    key = one_quarantined_key(capsys, db)
    [letter] = cli_json(capsys, "--db", db, "dead-letters", "list")
    assert cli(capsys, "--db", db, "approvals", "approve", request_id, "--by", "ann")[0] == 0
    assert cli(capsys, "--db", db, "approvals", "approve", request_id, "--by", "ann")[0] == 1
    assert cli(capsys, "--db", db, "quarantine", "resolve", key, "--retry", "--by", "ops")[0] == 0
    argv = ("dead-letters", "retry", letter["msg_id"], "--by", "dora")
    assert cli(capsys, "--db", db, *argv)[0] == 0

    rows = cli_json(capsys, "--db", db, "audit")
    assert [(r["identity"], r["action"], r["outcome"]) for r in rows] == [
        ("dora", "dead_letter.retry", "allowed"),
        ("ops", "effect.retry", "allowed"),
        ("ann", "approve", "refused"),
        ("ann", "approve", "allowed"),
    ]
    assert {(r["via"], r["authenticated"]) for r in rows} == {("cli", False)}
    assert rows[-1]["target"] == request_id
    assert (rows[-1]["version_before"], rows[-1]["version_after"]) == (0, 1)

    code, out, _ = cli(capsys, "--db", db, "audit", "--target", request_id)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["SEQ", "WHEN", "WHO"]
    assert len(lines) == 3
    assert all("ann (unauthenticated)" in line for line in lines[1:])
    assert "refused" in lines[1]
    assert "0->1" in lines[2]
    assert cli_json(capsys, "--db", db, "audit", "--actor", "acct")[0]["action"] == (
        "dead_letter.retry"
    )
    newest = rows[0]["seq"]
    assert len(cli_json(capsys, "--db", db, "audit", "--before", str(newest))) == 3
    assert len(cli_json(capsys, "--db", db, "audit", "--limit", "1")) == 1


def test_audit_of_a_store_with_no_attempts_says_so(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "--db", db, "audit") == (0, "no audit rows\n", "")
