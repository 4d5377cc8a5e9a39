"""Who decides, and the audit log: a quorum counts distinct authenticated identities (names
nobody checked count as one), every attempted decision or resolution — allowed or refused —
is audited, an allowed one in the decision's own transaction, on both stores."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import tether
from tests.runtime import effect_actors as fx
from tests.runtime.effect_actors import Banker, HastyBanker, QuorumBanker, Wire
from tests.runtime.test_approvals import one_pending, outcomes
from tether.store.records import AuditRecord
from tether.testing import FakeClock

pytestmark = pytest.mark.anyio

ALICE = tether.Identity(name="alice", via="console", remote="10.0.0.7")
BOB = tether.Identity(name="bob", via="api")


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    fx.reset()
    yield
    fx.reset()


@pytest.fixture(params=["sqlite", "memory"])
async def rt(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tether.Runtime]:
    where = str(tmp_path / "agents.db") if request.param == "sqlite" else ":memory:"
    async with tether.Runtime(where, poll_interval=0.02) as runtime:
        yield runtime


async def held(rt: tether.Runtime, cls: type[Any] = QuorumBanker) -> tether.ApprovalRequest:
    b = await rt.spawn(cls, "b1")
    await b.tell(Wire(to="acme", cents=500))
    return await one_pending(rt)


async def log(rt: tether.Runtime) -> list[AuditRecord]:
    """The audit log, oldest first."""
    return list(reversed(await rt.store.list_audit(limit=1000)))


def approve(who: tether.Identity) -> tether.Approve:
    return tether.Approve(by=who.name)


async def test_one_identity_approving_twice_does_not_meet_a_quorum_of_two(
    rt: tether.Runtime,
) -> None:
    request = await held(rt)
    first = await rt.approvals.decide(request.request_id, approve(ALICE), identity=ALICE)
    assert (first.status, first.approvals_counted) == ("pending", 1)
    with pytest.raises(tether.ConfigError, match="'alice' has already approved"):
        await rt.approvals.decide(request.request_id, approve(ALICE), identity=ALICE)
    # the same person, typing her name at the CLI, is still alice
    typed = tether.Identity(name="alice", via="cli", authenticated=False)
    with pytest.raises(tether.ConfigError, match="already approved"):
        await rt.approvals.decide(request.request_id, approve(typed), identity=typed)
    assert (await rt.approvals.get(request.request_id)).status == "pending"
    assert fx.CALLS == []
    done = await rt.approvals.decide(request.request_id, approve(BOB), identity=BOB)
    assert (done.status, done.approved_by, done.approvals_counted) == (
        "approved",
        ["alice", "bob"],
        2,
    )
    assert await outcomes(rt, "b1") == [["wired 500 to acme"]]


async def test_names_nobody_checked_count_as_one_approver_together(rt: tether.Runtime) -> None:
    """One person typing two names at the CLI is one approver: the second typed name is
    refused, and an authenticated person completes the quorum."""
    request = await held(rt)
    one = tether.Identity(name="al", via="cli", authenticated=False)
    other = tether.Identity(name="al2", via="cli", authenticated=False)
    await rt.approvals.decide(request.request_id, approve(one), identity=one)
    with pytest.raises(tether.ConfigError, match="count as one approver together"):
        await rt.approvals.decide(request.request_id, approve(other), identity=other)
    now = await rt.approvals.get(request.request_id)
    assert (now.status, now.approvals_counted) == ("pending", 1)
    done = await rt.approvals.decide(request.request_id, approve(BOB), identity=BOB)
    assert done.status == "approved"
    decisions = [(d["by"], d["via"], d["authenticated"]) for d in done.decisions]
    assert decisions == [("al", "cli", False), ("bob", "api", True)]


async def test_every_attempt_is_audited_allowed_or_refused(rt: tether.Runtime) -> None:
    request = await held(rt)
    rid = request.request_id
    await rt.approvals.decide(rid, approve(ALICE), identity=ALICE)
    with pytest.raises(tether.ConfigError):
        await rt.approvals.decide(rid, approve(ALICE), identity=ALICE)
    with pytest.raises(tether.ApprovalNotFound):
        await rt.approvals.decide("apr-nope", approve(BOB), identity=BOB)
    await rt.approvals.decide(rid, tether.Reject(by="bob", reason="wrong payee"), identity=BOB)
    with pytest.raises(tether.ApprovalClosed):
        await rt.approvals.decide(rid, approve(BOB), identity=BOB)

    rows = await log(rt)
    assert [(r.identity, r.via, r.action, r.target, r.outcome) for r in rows] == [
        ("alice", "console", "approve", rid, "allowed"),
        ("alice", "console", "approve", rid, "refused"),
        ("bob", "api", "approve", "apr-nope", "refused"),
        ("bob", "api", "reject", rid, "allowed"),
        ("bob", "api", "approve", rid, "refused"),
    ]
    allowed, twice, unknown, rejected, closed = rows
    assert (allowed.version_before, allowed.version_after) == (0, 1)
    assert allowed.fingerprint == request.fingerprint
    assert allowed.remote == "10.0.0.7"
    assert allowed.actor_id == "b1"
    assert allowed.detail == "pending: 1 of 2 approval(s)"
    assert "already approved" in twice.detail
    assert twice.version_after is None
    assert "no approval request" in unknown.detail or "apr-nope" in unknown.detail
    assert unknown.actor_id is None
    assert rejected.detail == "rejected: wrong payee"
    assert (rejected.version_before, rejected.version_after) == (1, 2)
    assert "already rejected" in closed.detail
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)


async def test_a_decision_on_a_request_that_changed_since_it_was_read_is_refused(
    rt: tether.Runtime,
) -> None:
    request = await held(rt)
    rid = request.request_id
    seen = request.version
    modified = await rt.approvals.decide(
        rid, tether.Modify(by="bob", args={"to": "acme", "cents": 50}), identity=BOB
    )
    assert modified.version == seen + 1
    assert modified.fingerprint != request.fingerprint  # the new call, fingerprinted anew
    with pytest.raises(tether.ApprovalChanged, match="changed since it was read"):
        await rt.approvals.decide(rid, approve(ALICE), identity=ALICE, expected_version=seen)
    assert (await rt.approvals.get(rid)).approved_by == ["bob"]
    done = await rt.approvals.decide(
        rid, approve(ALICE), identity=ALICE, expected_version=modified.version
    )
    assert done.status == "approved"
    *_, refused, allowed = await log(rt)
    assert (refused.outcome, refused.version_before) == ("refused", 1)
    assert allowed.fingerprint == modified.fingerprint
    assert await outcomes(rt, "b1") == [["wired 50 to acme"]]


async def test_an_identity_that_may_only_look_is_refused_and_audited(rt: tether.Runtime) -> None:
    request = await held(rt, Banker)
    viewer = tether.Identity(name="vic", via="console", forbidden="role view may only look")
    with pytest.raises(tether.NotPermitted, match="vic may not do this: role view"):
        await rt.approvals.decide(request.request_id, approve(viewer), identity=viewer)
    assert (await rt.approvals.get(request.request_id)).status == "pending"
    [row] = await log(rt)
    assert (row.identity, row.outcome, row.detail) == (
        "vic",
        "refused",
        "vic may not do this: role view may only look",
    )


async def test_a_decision_must_be_made_by_the_authenticated_identity(rt: tether.Runtime) -> None:
    request = await held(rt, Banker)
    with pytest.raises(tether.ConfigError, match="not the deciding identity's name"):
        await rt.approvals.decide(request.request_id, tether.Approve(by="mallory"), identity=ALICE)
    assert (await rt.approvals.get(request.request_id)).status == "pending"


async def test_an_invalid_modification_is_refused_naming_the_field_and_audited(
    rt: tether.Runtime,
) -> None:
    request = await held(rt, Banker)
    with pytest.raises(tether.ToolInputError, match="cents"):
        await rt.approvals.decide(
            request.request_id,
            tether.Modify(by="alice", args={"to": "acme", "cents": "lots"}),
            identity=ALICE,
        )
    [row] = await log(rt)
    assert (row.action, row.outcome) == ("modify", "refused")
    assert "cents" in row.detail


async def test_a_deadlines_default_outcome_is_audited_as_the_policys(store_url: str) -> None:
    clock = FakeClock()
    async with tether.Runtime(store_url, clock=clock, poll_interval=0.02) as rt:
        await held(rt, HastyBanker)
        clock.advance(1.0)
        assert await outcomes(rt, "b1") == [
            ["rejected by timeout: no decision within the deadline; policy on_timeout='reject'"]
        ]
        [row] = await log(rt)
        assert (row.identity, row.via, row.action, row.outcome) == (
            "timeout",
            "policy",
            "timeout",
            "allowed",
        )
        assert row.detail.startswith("deadline passed: rejected")


async def test_a_handlers_decision_is_audited_as_the_policys(rt: tether.Runtime) -> None:
    async def bot(request: tether.ApprovalRequest) -> tether.Approve:
        return tether.Approve(by="small-amounts-bot")

    rt.approvals.attach(bot)
    b = await rt.spawn(Banker, "b1")
    await b.tell(Wire(to="acme", cents=5))
    assert await outcomes(rt, "b1") == [["wired 5 to acme"]]
    [row] = await log(rt)
    assert (row.identity, row.via, row.outcome) == ("small-amounts-bot", "policy", "allowed")


async def test_an_audit_row_that_cannot_be_written_rolls_the_decision_back(
    store_url: str,
) -> None:
    """On SQLite the decision and its audit row are one transaction: an audit row the store
    cannot write leaves the request as it was."""
    async with tether.Runtime(store_url, poll_interval=0.02) as rt:
        request = await held(rt, Banker)
        [record] = await rt.store.find_approvals(request_id=request.request_id)
        decided = msgspec.structs.replace(record, status="approved", version=1, decided_at=1.0)
        unwritable = AuditRecord(
            at=1.0,
            identity="alice",
            authenticated=True,
            via="app",
            action="approve",
            target=record.request_id,
            outcome="allowed",
            detail=object(),  # type: ignore[arg-type]  # no SQLite type binds it
        )
        with pytest.raises(Exception, match="type"):
            await rt.store.update_approval(decided, 0, audit=unwritable)
        [after] = await rt.store.find_approvals(request_id=request.request_id)
        assert (after.status, after.version) == ("pending", 0)
        assert await rt.store.list_audit() == []
