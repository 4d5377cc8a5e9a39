"""Approvals in one process and across runtimes on one store (I9): approve, reject with a
reason, modify, deadlines with a default outcome, quorum, handlers, and what was approved is
what runs, once. Crash cases (SIGKILL with a pending request) are in tests/chaos."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.runtime import effect_actors as fx
from tests.runtime.effect_actors import (
    Banker,
    CarefulBanker,
    DriftingBanker,
    HastyBanker,
    Ping,
    QuorumBanker,
    TrustingBanker,
    Wire,
)
from tether.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    fx.reset()
    yield
    fx.reset()


def runtime(where: Path | str, **kw: Any) -> tether.Runtime:
    """A runtime on the store at ``where``: a folder (its SQLite file), or a store URL."""
    kw.setdefault("poll_interval", 0.02)
    return tether.Runtime(where / "agents.db" if isinstance(where, Path) else where, **kw)


async def one_pending(rt: tether.Runtime) -> tether.ApprovalRequest:
    with anyio.fail_after(5):
        while not (pending := await rt.approvals.pending()):
            await anyio.sleep(0.01)
    [request] = pending
    return request


async def outcomes(rt: tether.Runtime, actor_id: str, n: int = 1) -> list[list[str]]:
    with anyio.fail_after(5):
        while True:
            assert await rt.ref(actor_id).ask(Ping(), timeout=5) == "pong"
            cell = rt.cells.get(actor_id)
            if cell is not None and len(cell.state.results) >= n:
                return list(cell.state.results)
            await anyio.sleep(0.01)


async def test_a_call_that_requires_approval_waits_and_runs_once_approved(store_url: str) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(Banker, "b1")
        await b.tell(Wire(to="acme", cents=500))
        request = await one_pending(rt)
        assert request.tool == "wire"
        assert request.args == {"to": "acme", "cents": 500}
        assert request.session_id == "b1"
        assert request.reason == "tool wire requires approval"
        assert request.context == {
            "goal": "pay the supplier",
            "if_rejected": "tell the supplier to wait",
        }
        assert request.deadline > rt.clock() + 3000
        assert fx.CALLS == []  # nothing ran before the decision
        assert await b.ask(Ping(), timeout=5) == "pong"  # the session serves other messages
        decided = await rt.approvals.decide(request.request_id, tether.Approve(by="alice"))
        assert decided.status == "approved"
        assert await outcomes(rt, "b1") == [["wired 500 to acme"]]
        assert await rt.approvals.pending() == []
    assert [n for n, _ in fx.CALLS] == ["wire"]


async def test_a_rejection_reason_goes_back_to_the_agent_and_nothing_runs(store_url: str) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(Banker, "b1")
        await b.tell(Wire(to="acme", cents=500))
        request = await one_pending(rt)
        with pytest.raises(tether.ConfigError, match="needs a reason"):
            await rt.approvals.decide(request.request_id, tether.Reject(by="bob", reason=""))
        await rt.approvals.decide(
            request.request_id, tether.Reject(by="bob", reason="supplier invoice not received")
        )
        assert await outcomes(rt, "b1") == [["rejected by bob: supplier invoice not received"]]
    assert fx.CALLS == []


async def test_modified_arguments_are_validated_and_exactly_those_run(store_url: str) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(Banker, "b1")
        await b.tell(Wire(to="acme", cents=5000))
        request = await one_pending(rt)
        with pytest.raises(tether.ToolInputError, match=r"\$\.cents"):
            await rt.approvals.decide(
                request.request_id, tether.Modify(by="carol", args={"to": "acme", "cents": "lots"})
            )
        decided = await rt.approvals.decide(
            request.request_id, tether.Modify(by="carol", args={"to": "acme", "cents": 500})
        )
        assert decided.status == "approved"
        assert decided.args == {"to": "acme", "cents": 500}
        assert decided.requested_args == {"to": "acme", "cents": 5000}
        assert await outcomes(rt, "b1") == [["wired 500 to acme"]]
    [(_, kwargs)] = fx.CALLS
    assert kwargs["cents"] == 500


async def test_the_deadline_applies_the_default_outcome_reject(store_url: str) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(HastyBanker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        request = await one_pending(rt)
        [[outcome]] = await outcomes(rt, "b1")
        assert outcome.startswith("rejected by timeout: no decision within the deadline")
        with pytest.raises(tether.ApprovalClosed, match="already rejected"):
            await rt.approvals.decide(request.request_id, tether.Approve(by="late"))
    assert fx.CALLS == []


async def test_the_deadline_can_default_to_approve(store_url: str) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(TrustingBanker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        await one_pending(rt)
        assert await outcomes(rt, "b1") == [["wired 5 to acme"]]


async def test_an_expired_request_refuses_a_late_decision(store_url: str) -> None:
    clock = FakeClock()
    async with runtime(store_url, clock=clock) as rt:
        b = await rt.spawn(HastyBanker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        request = await one_pending(rt)
        clock.advance(1.0)  # past the deadline; the session has not looked yet
        with pytest.raises(tether.ApprovalClosed, match="deadline passed"):
            await rt.approvals.decide(request.request_id, tether.Approve(by="late"))


async def test_a_quorum_needs_distinct_approvers(store_url: str) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(QuorumBanker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        request = await one_pending(rt)
        first = await rt.approvals.decide(request.request_id, tether.Approve(by="alice"))
        assert first.status == "pending"
        assert first.approved_by == ["alice"]
        with pytest.raises(tether.ConfigError, match="already approved"):
            await rt.approvals.decide(request.request_id, tether.Approve(by="alice"))
        await anyio.sleep(0.1)
        assert fx.CALLS == []
        second = await rt.approvals.decide(request.request_id, tether.Approve(by="bob"))
        assert second.status == "approved"
        assert await outcomes(rt, "b1") == [["wired 5 to acme"]]


async def test_a_modification_restarts_the_quorum_count(store_url: str) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(QuorumBanker, "b1")
        await b.tell(Wire(to="acme", cents=5000))
        request = await one_pending(rt)
        await rt.approvals.decide(request.request_id, tether.Approve(by="alice"))
        modified = await rt.approvals.decide(
            request.request_id, tether.Modify(by="bob", args={"to": "acme", "cents": 50})
        )
        assert modified.status == "pending"
        assert modified.approved_by == ["bob"]  # alice approved another call
        done = await rt.approvals.decide(request.request_id, tether.Approve(by="alice"))
        assert done.status == "approved"
        assert await outcomes(rt, "b1") == [["wired 50 to acme"]]


async def test_an_attached_handler_decides_in_process(store_url: str) -> None:
    seen: list[tether.ApprovalRequest] = []

    async def small_amounts_only(request: tether.ApprovalRequest) -> tether.Approve | tether.Reject:
        seen.append(request)
        if request.args["cents"] <= 100:
            return tether.Approve(by="bot")
        return tether.Reject(by="bot", reason="over the bot's limit")

    async with runtime(store_url) as rt:
        rt.approvals.attach(small_amounts_only)
        b = await rt.spawn(Banker, "b1")
        await b.tell(Wire(to="acme", cents=50))
        await b.tell(Wire(to="acme", cents=5000))
        assert await outcomes(rt, "b1", 2) == [
            ["wired 50 to acme"],
            ["rejected by bot: over the bot's limit"],
        ]
    assert [r.args["cents"] for r in seen] == [50, 5000]


async def test_a_policy_callback_escalates_a_call(store_url: str) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(CarefulBanker, "b1")
        await b.tell(Wire(to="acme", cents=10))
        await b.tell(Wire(to="acme", cents=5000))
        request = await one_pending(rt)
        assert request.reason == "over 1000 cents"
        assert request.args["cents"] == 5000
        await rt.approvals.decide(request.request_id, tether.Approve(by="alice"))
        assert await outcomes(rt, "b1", 2) == [["wired 10 to acme"], ["wired 5000 to acme"]]


async def test_a_decision_from_a_second_runtime_on_the_same_store_releases_the_call(
    store_url: str,
) -> None:
    async with runtime(store_url) as owner:
        b = await owner.spawn(Banker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        await one_pending(owner)
        async with runtime(store_url) as other:
            [request] = await other.approvals.pending()
            await other.approvals.decide(request.request_id, tether.Approve(by="cli"))
        assert await outcomes(owner, "b1") == [["wired 5 to acme"]]


async def test_decisions_on_unknown_or_decided_requests_are_clear_errors(store_url: str) -> None:
    async with runtime(store_url) as rt:
        with pytest.raises(tether.ApprovalNotFound, match="apr-nope"):
            await rt.approvals.decide("apr-nope", tether.Approve(by="x"))
        b = await rt.spawn(Banker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        request = await one_pending(rt)
        with pytest.raises(tether.ConfigError, match="who made it"):
            await rt.approvals.decide(request.request_id, tether.Approve(by=""))
        with pytest.raises(tether.ConfigError, match=r"tether\.Approve"):
            await rt.approvals.decide(request.request_id, "yes")  # type: ignore[arg-type]
        await rt.approvals.decide(request.request_id, tether.Approve(by="a"))
        with pytest.raises(tether.ApprovalClosed, match="already approved"):
            await rt.approvals.decide(request.request_id, tether.Reject(by="b", reason="no"))


async def test_an_approval_policy_is_validated() -> None:
    with pytest.raises(tether.ConfigError, match="approvers"):
        tether.ApprovalPolicy(approvers_needed=0)
    with pytest.raises(tether.ConfigError, match="on_timeout"):
        tether.ApprovalPolicy(on_timeout="maybe")  # type: ignore[arg-type]
    with pytest.raises(tether.ConfigError, match="timeout"):
        tether.ApprovalPolicy(timeout=0)


async def test_an_approval_of_one_call_never_runs_another(store_url: str) -> None:
    # The handler asks for a different amount each time it runs: the approval was given for
    # the first amount, so the replay's call is refused, never executed.
    async with runtime(store_url, max_attempts=2) as rt:
        b = await rt.spawn(DriftingBanker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        request = await one_pending(rt)
        await rt.approvals.decide(request.request_id, tether.Approve(by="alice"))
        with anyio.fail_after(5):
            while not (letters := await rt.dead_letters.list()):
                await anyio.sleep(0.01)
    assert "was asked for another call" in letters[0].errors[0]
    assert fx.CALLS == []


async def test_a_handler_attached_after_a_restart_gets_the_requests_still_pending(
    store_url: str,
) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(Banker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        await one_pending(rt)
    seen: list[str] = []

    async def approve_all(request: tether.ApprovalRequest) -> tether.Approve:
        seen.append(request.request_id)
        return tether.Approve(by="bot")

    async with runtime(store_url) as rt:
        rt.approvals.attach(approve_all)
        with anyio.fail_after(5):
            while not fx.CALLS:
                await anyio.sleep(0.01)
    assert len(seen) == 1
    assert [n for n, _ in fx.CALLS] == ["wire"]


async def test_an_admin_process_asks_and_gets_the_answer_from_the_serving_runtime(
    store_url: str,
) -> None:
    async with runtime(store_url) as rt:
        await rt.spawn(Banker, "b1")
        async with runtime(store_url, serve=False) as admin:
            assert await admin.ref("b1").ask(Ping(), timeout=5) == "pong"
            assert not admin.cells  # it ran nothing itself


async def test_the_sessions_gate_journals_each_held_call_and_how_it_was_settled(
    store_url: str,
) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(Banker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        request = await one_pending(rt)
        [guards] = [n for n in await rt.tree() if n.id == "tether.guards"]
        gate = guards.find("b1/gate")
        assert gate is not None
        assert gate.detail == "1 pending; 0 approved, 0 rejected"
        await rt.approvals.decide(request.request_id, tether.Reject(by="bob", reason="no"))
        await outcomes(rt, "b1")
        await b.tell(Wire(to="acme", cents=6))
        second = await one_pending(rt)
        await rt.approvals.decide(second.request_id, tether.Approve(by="ann"))
        await outcomes(rt, "b1", 2)
    # The gate's state is the fold of its journal: a new runtime sees the same.
    async with runtime(store_url) as rt:
        from tether.actors.guards.actors import GetGateState

        state = await rt.ref("b1/gate").ask(GetGateState(), timeout=5)
    # The answer may come through the store, where a tuple is stored as a list.
    state["pending"] = list(state["pending"])
    assert state == {"session": "b1", "pending": [], "requested": 2, "approved": 1, "rejected": 1}


async def test_a_decision_needs_a_request_id_a_named_person_and_a_reason_in_text(
    store_url: str,
) -> None:
    async with runtime(store_url) as rt:
        b = await rt.spawn(QuorumBanker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        request = await one_pending(rt)
        rid = request.request_id
        # None is not "any request": it used to decide the oldest pending one.
        for missing in (None, ""):
            with pytest.raises(tether.ApprovalNotFound):
                await rt.approvals.decide(missing, tether.Approve(by="ann"))  # type: ignore[arg-type]
            with pytest.raises(tether.ApprovalNotFound):
                await rt.approvals.get(missing)  # type: ignore[arg-type]
        # A blank name used to count as one more approver towards the quorum.
        with pytest.raises(tether.ConfigError, match="who made it"):
            await rt.approvals.decide(rid, tether.Approve(by="  "))
        # A reason that is not text used to be stored, and the record no longer decoded.
        for reason in (5, "   "):
            with pytest.raises(tether.ConfigError, match="needs a reason"):
                await rt.approvals.decide(rid, tether.Reject(by="ann", reason=reason))  # type: ignore[arg-type]
        for args in (None, "to=acme", [("to", "acme"), ("cents", 1)]):
            with pytest.raises(tether.ToolInputError, match=r"Modify\.args must be a dict"):
                await rt.approvals.decide(rid, tether.Modify(by="ann", args=args))  # type: ignore[arg-type]
        after = await rt.approvals.get(rid)
        assert after.status == "pending"
        assert after.decisions == []
        await rt.approvals.decide(rid, tether.Approve(by="ann"))
        assert (await rt.approvals.get(rid)).status == "pending"  # the quorum is two people
        await rt.approvals.decide(rid, tether.Approve(by="bob"))
        assert await outcomes(rt, "b1") == [["wired 5 to acme"]]


async def test_a_handler_returning_arguments_that_are_not_a_dict_is_refused_and_the_runtime_serves_on(
    store_url: str,
) -> None:
    async def handler(request: tether.ApprovalRequest) -> tether.Modify:
        return tether.Modify(by="bot", args=None)  # type: ignore[arg-type]

    async with runtime(store_url) as rt:
        rt.approvals.attach(handler)
        b = await rt.spawn(Banker, "b1")
        await b.tell(Wire(to="acme", cents=5))
        request = await one_pending(rt)
        await anyio.sleep(0.2)  # the handler has been offered the request
        assert await b.ask(Ping(), timeout=5) == "pong"
        assert (await rt.approvals.get(request.request_id)).status == "pending"
