"""Guards with two runtimes on one store (two ``Runtime`` objects in one process, each its own
registered runtime with its own leases, as two processes have): a session's loop guard and
gate start where the session runs and leave with it; a guard another live runtime holds is
known as such at once, not after a poll, and a call that needs a person still waits for one.
On SQLite and PostgreSQL."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest

import tether
from tests.actors import session_agents as sa
from tether.actors.guards.actors import GetGateState, GetLoopState, LoopGuard
from tether.testing import FakeClock

pytestmark = pytest.mark.anyio

REFUND_43 = ("big_refund", ("43", 90_000))  # the call a person must approve (LOG's record)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    sa.LOG.clear()
    yield
    sa.LOG.clear()


def runtime(url: str, clock: FakeClock) -> tether.Runtime:
    return tether.Runtime(url, clock=clock, poll_interval=0.02)


def count_activations(rt: tether.Runtime) -> Counter[str]:
    """How many times ``rt``'s services (the guards among them) ask to activate each actor."""
    asked: Counter[str] = Counter()
    activate: Callable[[str], Awaitable[Any]] = rt.activate

    async def counting(actor_id: str) -> Any:
        asked[actor_id] += 1
        return await activate(actor_id)

    rt.activate = counting  # type: ignore[assignment]
    return asked


async def held(rt: tether.Runtime, session_id: str) -> tether.ApprovalRequest:
    """The request of ``session_id``'s held call, once there is one."""
    with anyio.fail_after(60):
        while True:
            for request in await rt.approvals.pending():
                if request.session_id == session_id:
                    return request
            await anyio.sleep(0.01)


async def finished(rt: tether.Runtime, session_id: str) -> str:
    """The answer of ``session_id``'s task, once it ended."""
    with anyio.fail_after(60):
        while (info := await rt.session_info(session_id)).status == "working":
            await anyio.sleep(0.01)
    assert info.status == "finished", info.outcome
    return info.last_answer


async def refund_43_on(rt: tether.Runtime, session_id: str) -> None:
    """``session_id`` refunds order 43 on ``rt``, a person approving the refund."""
    await rt.ref(session_id).tell(tether.UserMessage("please refund order 43"))
    request = await held(rt, session_id)
    await rt.approvals.decide(request.request_id, tether.Approve(by="ann"))
    assert await finished(rt, session_id) == "Done: refunded 90000 on 43 (approved)."


async def leave(rt: tether.Runtime, actor_id: str) -> None:
    """``actor_id`` leaves ``rt`` (as when it passivates), its lease given back."""
    rt.cells[actor_id].leave()
    with anyio.fail_after(10):
        while actor_id in rt.cells:
            await anyio.sleep(0.01)


async def test_guards_another_runtime_holds_are_known_at_once_and_approval_still_holds(
    store_url: str,
) -> None:
    """Runtime A runs the guards' supervisor, the breakers, and session s2's loop guard and
    gate (an operator asked them for their state there), while s2 runs on runtime B. On B,
    each of those guards is asked of the activation once: the store refuses its lease (A is
    alive), and B goes on without it at once, instead of polling for seconds on every call.
    s2's refund still waits for a person: it is not made before the approval, and is made
    once after it."""
    clock = FakeClock()
    async with runtime(store_url, clock) as a:
        await a.spawn(sa.Refund43Agent, "s2", goal="refund the customer's orders")
        await refund_43_on(a, "s2")  # its guards exist now, in A
        await leave(a, "s2")
        await a.ref("s2/gate").ask(GetGateState(), timeout=10)  # A holds them (again)
        await a.ref("s2/loops").ask(GetLoopState(), timeout=10)
        assert sa.LOG.count(REFUND_43) == 1

        async with runtime(store_url, clock) as b:
            asked = count_activations(b)
            await b.spawn(sa.Refund43Agent, "s2", goal="refund the customer's orders")  # here
            await b.ref("s2").tell(tether.UserMessage("please refund order 43"))
            request = await held(b, "s2")
            assert "s2" in b.cells
            assert sa.LOG.count(REFUND_43) == 1  # held: not made
            assert (request.tool, request.args) == (
                "big_refund",
                {"order_id": "43", "amount_cents": 90_000},
            )
            await b.approvals.decide(request.request_id, tether.Approve(by="bob"))
            assert await finished(b, "s2") == "Done: refunded 90000 on 43 (approved)."
            guards_here = sorted(k for k in b.cells if k != "s2")
            [decided] = await b.store.find_approvals(request_id=request.request_id)
        assert sa.LOG.count(REFUND_43) == 2  # made once, after the approval
        assert decided.status == "approved"
        assert guards_here == []  # every guard s2 used is A's
        held_by_a = ["s2/gate", "s2/loops", "breaker:model", "breaker:big_refund"]
        assert {g: asked[g] for g in held_by_a} == dict.fromkeys(held_by_a, 1)
        assert max(asked.values()) == 1  # no guard was polled


async def test_a_session_that_moves_to_another_runtime_takes_its_guards_with_it(
    store_url: str,
) -> None:
    """s3 runs a task on A (its loop guard and gate start there), then leaves A: its guards
    leave with it, giving their leases back. Its next task runs on B, and so do its guards,
    although A still runs the guards' supervisor; its held call waits for a person there."""
    clock = FakeClock()
    async with runtime(store_url, clock) as a:
        await a.spawn(sa.Refund43Agent, "s3", goal="refund the customer's orders")
        await refund_43_on(a, "s3")
        assert {"s3/gate", "s3/loops", "tether.guards"} <= set(a.cells)
        await leave(a, "s3")
        with anyio.fail_after(10):
            while {"s3/gate", "s3/loops"} & set(a.cells):
                await anyio.sleep(0.01)

        async with runtime(store_url, clock) as b:
            asked = count_activations(b)
            await b.spawn(sa.Refund43Agent, "s3", goal="refund the customer's orders")  # here
            await refund_43_on(b, "s3")
            assert {"s3", "s3/gate", "s3/loops"} <= set(b.cells)
            assert "tether.guards" in a.cells
            assert "tether.guards" not in b.cells
            gate = await b.ref("s3/gate").ask(GetGateState(), timeout=10)
        assert (gate["requested"], gate["approved"]) == (2, 2)  # journaled in A, then in B
        assert sa.LOG.count(REFUND_43) == 2
        assert (asked["s3/gate"], asked["s3/loops"]) == (1, 1)


async def test_a_sessions_guard_that_fails_away_from_its_supervisor_is_restarted_where_it_runs(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s4's loop guard runs on B, its supervisor on A. Its handler fails once: B decides, as
    the supervisor would, and restarts it in place (its state re-folded); the message is
    delivered again and answered. It is not held waiting for a supervisor that is not here."""
    clock = FakeClock()
    async with runtime(store_url, clock) as a:
        await a.spawn(sa.Refund43Agent, "s0", goal="refund the customer's orders")
        await refund_43_on(a, "s0")  # A runs the guards' supervisor
        async with runtime(store_url, clock) as b:
            await b.spawn(sa.Refund43Agent, "s4", goal="refund the customer's orders")
            await refund_43_on(b, "s4")
            first = b.cells["s4/loops"]
            handle = LoopGuard.handle
            failed: list[str] = []

            async def fails_once(self: LoopGuard, msg: Any) -> Any:
                if not failed:
                    failed.append(self.session_id)
                    raise RuntimeError("a guard's handler failed")
                return await handle(self, msg)

            monkeypatch.setattr(LoopGuard, "handle", fails_once)
            state = await b.ref("s4/loops").ask(GetLoopState(), timeout=10)
            assert failed == ["s4"]
            assert state["session"] == "s4"
            assert b.cells["s4/loops"] is first  # restarted in place, not left for A to start
            assert "s4/loops" not in b.supervision.held
            assert "tether.guards" in a.cells
