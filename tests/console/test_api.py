"""The console's JSON API under Starlette's test client: credentials and roles, each status
code (401, 403, 404, 409, 410, 415, 422), quorums of distinct identities, the audit rows of
allowed and refused attempts, and that what was approved is what runs, once — on an SQLite
file and on PostgreSQL (each audit row is written in its decision's transaction on both)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import anyio
import pytest

import tether
from tests.console.agents import HastyRefundAgent
from tests.console.conftest import ORDERS, Client, Store, Tokens, audit, bearer, copy_of, hold
from tests.pg import dump as pg_dump
from tests.sqlite_files import dump as sqlite_dump
from tether.render.records import journal_after

pytestmark = pytest.mark.usefixtures("store")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, _template: Store, tmp_path: Path) -> Store:
    """The console's store (``tests/console/conftest.py``), once as an SQLite file and once
    in PostgreSQL (made by a runtime in a fresh schema)."""
    if request.param == "sqlite":
        return copy_of(_template, tmp_path)
    return hold(str(request.getfixturevalue("pg_url")), ORDERS)


def dump(db: Path | str) -> list[str]:
    """Every row of the store, whichever its backend."""
    return sqlite_dump(db) if isinstance(db, Path) else pg_dump(db)


def post(client: object, path: str, token: str, body: object) -> object:
    return client.post(path, headers=bearer(token), json=body)  # type: ignore[attr-defined]


def test_requests_without_valid_credentials_get_401(console: Client, store: Store) -> None:
    c = console()
    rid = store.requests["refund-42"]
    for response in (
        c.get("/api/approvals"),
        c.get(f"/api/approvals/{rid}"),
        c.post(f"/api/approvals/{rid}/approve", json={}),
        c.get("/api/approvals", headers=bearer("tct_nope_nope")),
        c.get("/api/approvals", headers={"Authorization": "Basic YWxpY2U6cHc="}),
    ):
        assert response.status_code == 401
        assert response.json()["error"] == "unauthenticated"
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert audit(store.db) == []  # nobody to audit: no identity


def test_pending_requests_are_listed_and_read_with_their_call(
    console: Client, store: Store, tokens: Tokens
) -> None:
    c = console()
    listed = c.get("/api/approvals", headers=bearer(tokens.victor)).json()
    assert sorted(r["session_id"] for r in listed) == ["refund-42", "refund-43", "refund-44"]
    rid = store.requests["refund-43"]
    got = c.get(f"/api/approvals/{rid}", headers=bearer(tokens.victor)).json()
    assert got["tool"] == "refund"
    assert got["args"] == {"order_id": "43", "amount_cents": 90_000}
    assert got["context"]["goal"] == "Resolve the customer's refund request"
    assert got["version"] == 0
    assert len(got["fingerprint"]) == 32
    one = c.get("/api/approvals?session=refund-44", headers=bearer(tokens.victor)).json()
    assert [r["approvers_needed"] for r in one] == [2]
    assert c.get("/api/approvals?status=all", headers=bearer(tokens.alice)).status_code == 200
    bad = c.get("/api/approvals?status=maybe", headers=bearer(tokens.alice))
    assert bad.status_code == 422


def test_a_viewer_is_refused_403_and_the_refusal_is_audited(
    console: Client, store: Store, tokens: Tokens
) -> None:
    rid = store.requests["refund-42"]
    r = console().post(f"/api/approvals/{rid}/approve", headers=bearer(tokens.victor), json={})
    assert r.status_code == 403
    assert r.json()["error"] == "forbidden"
    [row] = audit(store.db)
    assert (row.identity, row.via, row.action, row.outcome) == (
        "victor",
        "api",
        "approve",
        "refused",
    )
    assert "role 'view' may only look" in row.detail


def test_the_decider_is_the_token_never_the_body(
    console: Client, store: Store, tokens: Tokens
) -> None:
    rid = store.requests["refund-42"]
    r = console().post(
        f"/api/approvals/{rid}/approve",
        headers=bearer(tokens.alice),
        json={"by": "mallory", "identity": "mallory", "comment": "checked the order"},
    )
    assert r.status_code == 200
    decided = r.json()
    assert decided["status"] == "approved"
    [decision] = decided["decisions"]
    assert (decision["by"], decision["via"], decision["reason"]) == (
        "alice",
        "api",
        "checked the order",
    )
    [row] = audit(store.db)
    assert (row.identity, row.authenticated, row.outcome) == ("alice", True, "allowed")
    assert row.remote == "127.0.0.1"


def test_unknown_requests_are_404_and_audited(
    console: Client, store: Store, tokens: Tokens
) -> None:
    c = console()
    assert c.get("/api/approvals/apr-missing", headers=bearer(tokens.alice)).status_code == 404
    r = c.post("/api/approvals/apr-missing/approve", headers=bearer(tokens.alice), json={})
    assert (r.status_code, r.json()["error"]) == (404, "not_found")
    [row] = audit(store.db)
    assert (row.target, row.outcome) == ("apr-missing", "refused")


def test_a_decision_on_a_version_that_changed_is_409(
    console: Client, store: Store, tokens: Tokens
) -> None:
    c = console()
    rid = store.requests["refund-44"]
    seen = c.get(f"/api/approvals/{rid}", headers=bearer(tokens.bob)).json()["version"]
    modified = c.post(
        f"/api/approvals/{rid}/modify",
        headers=bearer(tokens.alice),
        json={"args": {"order_id": "44", "amount_cents": 5_000}, "version": seen},
    )
    assert modified.status_code == 200
    late = c.post(
        f"/api/approvals/{rid}/approve", headers=bearer(tokens.bob), json={"version": seen}
    )
    assert (late.status_code, late.json()["error"]) == (409, "changed")
    assert "changed since it was read" in late.json()["detail"]
    fresh = c.post(
        f"/api/approvals/{rid}/approve",
        headers=bearer(tokens.bob),
        json={"version": modified.json()["version"]},
    )
    assert fresh.status_code == 200
    assert fresh.json()["status"] == "approved"
    outcomes = [(r.identity, r.action, r.outcome) for r in audit(store.db)]
    assert outcomes == [
        ("alice", "modify", "allowed"),
        ("bob", "approve", "refused"),
        ("bob", "approve", "allowed"),
    ]


def test_a_quorum_of_two_needs_two_identities_not_one_identity_twice(
    console: Client, store: Store, tokens: Tokens
) -> None:
    c = console()
    rid = store.requests["refund-44"]
    first = c.post(f"/api/approvals/{rid}/approve", headers=bearer(tokens.alice), json={})
    assert (first.status_code, first.json()["status"], first.json()["approvals_counted"]) == (
        200,
        "pending",
        1,
    )
    again = c.post(f"/api/approvals/{rid}/approve", headers=bearer(tokens.alice), json={})
    assert (again.status_code, again.json()["error"]) == (409, "already_approved")
    assert (
        c.get(f"/api/approvals/{rid}", headers=bearer(tokens.alice)).json()["status"] == "pending"
    )
    second = c.post(f"/api/approvals/{rid}/approve", headers=bearer(tokens.bob), json={})
    assert second.json()["status"] == "approved"
    assert second.json()["approved_by"] == ["alice", "bob"]


def test_a_decided_request_is_410(console: Client, store: Store, tokens: Tokens) -> None:
    c = console()
    rid = store.requests["refund-42"]
    assert (
        c.post(
            f"/api/approvals/{rid}/reject",
            headers=bearer(tokens.alice),
            json={"reason": "duplicate request"},
        ).status_code
        == 200
    )
    r = c.post(f"/api/approvals/{rid}/approve", headers=bearer(tokens.bob), json={})
    assert (r.status_code, r.json()["error"]) == (410, "closed")
    assert "already rejected" in r.json()["detail"]


@pytest.mark.parametrize(
    ("kind", "body", "code", "fragment"),
    [
        (
            "modify",
            {"args": {"order_id": "42", "amount_cents": "lots"}},
            "invalid_arguments",
            "amount_cents",
        ),
        ("modify", {"args": {"order_id": "42"}}, "invalid_arguments", "amount_cents"),
        ("modify", {"args": ["42", 5]}, "invalid_arguments", "JSON object"),
        ("reject", {}, "reason_required", "needs a reason"),
        ("reject", {"reason": "   "}, "reason_required", "needs a reason"),
        ("approve", {"version": "0"}, "invalid", "version"),
        ("approve", {"comment": 5}, "invalid", "comment"),
    ],
)
def test_invalid_bodies_are_422_naming_the_problem(
    console: Client,
    store: Store,
    tokens: Tokens,
    kind: str,
    body: dict[str, object],
    code: str,
    fragment: str,
) -> None:
    rid = store.requests["refund-42"]
    r = console().post(f"/api/approvals/{rid}/{kind}", headers=bearer(tokens.alice), json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == code
    assert fragment in r.json()["detail"]
    assert (
        console().get(f"/api/approvals/{rid}", headers=bearer(tokens.alice)).json()["version"] == 0
    )


def test_a_decision_the_rules_refuse_is_audited_as_refused(
    console: Client, store: Store, tokens: Tokens
) -> None:
    """A rejection without a reason and a modification whose arguments are not the tool's are
    attempted decisions: refused, and audited with why."""
    c = console()
    rid = store.requests["refund-42"]
    attempts = (
        ("reject", {"reason": "  "}, "reason_required"),
        ("modify", {"args": ["42", 5]}, "invalid_arguments"),
        ("modify", {"args": {"order_id": "42", "amount_cents": "all"}}, "invalid_arguments"),
    )
    for kind, body, code in attempts:
        r = c.post(f"/api/approvals/{rid}/{kind}", headers=bearer(tokens.alice), json=body)
        assert (r.status_code, r.json()["error"]) == (422, code), r.text
    rows = audit(store.db)
    assert [(r.identity, r.action, r.outcome) for r in rows] == [
        ("alice", "reject", "refused"),
        ("alice", "modify", "refused"),
        ("alice", "modify", "refused"),
    ]
    assert "needs a reason" in rows[0].detail
    assert "amount_cents" in rows[2].detail


def test_a_request_whose_deadline_passed_is_410(
    console: Client, store: Store, tokens: Tokens
) -> None:
    rid = hold(store.db, {"45": HastyRefundAgent}).requests["refund-45"]
    c = console()
    deadline = c.get(f"/api/approvals/{rid}", headers=bearer(tokens.alice)).json()["deadline"]
    while time.time() <= deadline:  # the deadline is half a second after the request
        time.sleep(0.05)
    r = c.post(f"/api/approvals/{rid}/approve", headers=bearer(tokens.alice), json={})
    assert (r.status_code, r.json()["error"]) == (410, "closed")
    assert "deadline passed" in r.json()["detail"]
    pending = c.get("/api/approvals", headers=bearer(tokens.alice)).json()
    assert rid not in [p["request_id"] for p in pending]
    [row] = audit(store.db)
    assert (row.target, row.action, row.outcome) == (rid, "approve", "refused")


def test_a_body_that_is_not_json_is_refused(console: Client, store: Store, tokens: Tokens) -> None:
    c = console()
    rid = store.requests["refund-42"]
    form = c.post(f"/api/approvals/{rid}/approve", headers=bearer(tokens.alice), data={"a": "b"})
    assert form.status_code == 415
    broken = c.post(
        f"/api/approvals/{rid}/approve",
        headers={**bearer(tokens.alice), "Content-Type": "application/json"},
        content=b"{nope",
    )
    assert (broken.status_code, broken.json()["error"]) == (422, "invalid_json")


def test_a_body_nested_deeper_than_the_decoder_goes_is_refused_by_name(
    console: Client, store: Store, tokens: Tokens
) -> None:
    """It raised a bare RecursionError, answered 500."""
    rid = store.requests["refund-42"]
    deep = b"[" * 100_000 + b"]" * 100_000
    r = console().post(
        f"/api/approvals/{rid}/modify",
        headers={**bearer(tokens.alice), "Content-Type": "application/json"},
        content=b'{"args": ' + deep + b"}",
    )
    assert (r.status_code, r.json()["error"]) == (422, "invalid_json"), r.text
    assert "more than 256 levels deep" in r.json()["detail"]
    assert (
        console().get(f"/api/approvals/{rid}", headers=bearer(tokens.alice)).json()["version"] == 0
    )


def test_a_read_only_console_refuses_every_change_and_writes_nothing(
    console: Client, store: Store, tokens: Tokens
) -> None:
    before = dump(store.db)
    c = console(read_only=True)
    rid = store.requests["refund-42"]
    for kind, body in (("approve", {}), ("reject", {"reason": "no"}), ("modify", {"args": {}})):
        r = c.post(f"/api/approvals/{rid}/{kind}", headers=bearer(tokens.alice), json=body)
        assert (r.status_code, r.json()["error"]) == (403, "read_only")
    assert (
        c.get(f"/api/approvals/{rid}", headers=bearer(tokens.alice)).json()["status"] == "pending"
    )
    assert audit(store.db) == []
    assert dump(store.db) == before


def test_what_was_approved_through_the_api_is_what_runs_once(
    console: Client, store: Store, tokens: Tokens, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Modified by alice, approved by bob (a quorum of two): the agent, served again, refunds
    the modified amount once and answers with it."""
    log = tmp_path / "refunds.jsonl"
    monkeypatch.setenv("REFUNDS_LOG", str(log))
    c = console()
    rid = store.requests["refund-44"]
    c.post(
        f"/api/approvals/{rid}/modify",
        headers=bearer(tokens.alice),
        json={"args": {"order_id": "44", "amount_cents": 5000}},
    )
    assert (
        c.post(
            f"/api/approvals/{rid}/approve", headers=bearer(tokens.bob), json={"version": 1}
        ).json()["status"]
        == "approved"
    )

    async def serve() -> str:
        async with tether.Runtime(store.db, poll_interval=0.02) as rt:
            with anyio.fail_after(20):
                while True:
                    info = await rt.session_info("refund-44")
                    if info.status != "working":
                        return info.last_answer
                    await anyio.sleep(0.02)

    answer = anyio.run(serve, backend="asyncio")
    assert answer == "Done: refunded 5000 cents on order 44."
    [line] = [json.loads(x) for x in log.read_text().splitlines()]
    assert (line["order_id"], line["cents"]) == ("44", 5000)
    assert os.environ["REFUNDS_LOG"] == str(log)


def test_the_sessions_record_of_a_modified_call_names_the_arguments_that_ran(
    console: Client, store: Store, tokens: Tokens, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alice halves refund-42: the refund of 750 cents runs, and the session's own record of
    the call — its journal, its model's history, the TaskResult's calls — says 750, not the
    1500 the model asked for, lest the model believe it refunded the whole order."""
    monkeypatch.setenv("REFUNDS_LOG", str(tmp_path / "refunds.jsonl"))
    rid = store.requests["refund-42"]
    halved = {"order_id": "42", "amount_cents": 750}
    r = console().post(
        f"/api/approvals/{rid}/modify", headers=bearer(tokens.alice), json={"args": halved}
    )
    assert r.json()["status"] == "approved"

    async def record_of_the_refund() -> dict[str, object]:
        async with tether.Runtime(store.db, poll_interval=0.02) as rt:
            with anyio.fail_after(20):
                while (await rt.session_info("refund-42")).status == "working":
                    await anyio.sleep(0.02)
            events = await journal_after(rt.store, "refund-42", 0)
        [record] = [
            e["record"]
            for _, e in events
            if e.get("type") == "ToolResult" and e["record"]["tool"] == "refund"
        ]
        return dict(record)

    record = anyio.run(record_of_the_refund, backend="asyncio")
    assert record["result"] == "refunded 750 cents on order 42"  # what ran: the halved call
    assert record["args"] == halved
    assert record["asked"] == {"order_id": "42", "amount_cents": 1500}  # what the model asked
