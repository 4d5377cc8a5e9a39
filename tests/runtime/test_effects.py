"""The effects ledger in one process, on real stores (SQLite files and PostgreSQL): intent
before effect, receipts replayed, keys from the runtime, recovery policies, quarantine and its
resolution (I4, I5).

The crash cases (SIGKILL between intent, call, receipt and step) are in tests/chaos."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.runtime import effect_actors as fx
from tests.runtime.effect_actors import HANG, Agent, Do, Ping
from tether.runtime.effects import effect_key
from tether.store.records import Batch, LeaseAcquire
from tether.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    fx.reset()
    Agent.fail_once.clear()
    yield
    fx.reset()


def runtime(where: Path | str, **kw: Any) -> tether.Runtime:
    """A runtime on the store at ``where``: a folder (its SQLite file), or a store URL."""
    kw.setdefault("poll_interval", 0.02)
    return tether.Runtime(where / "agents.db" if isinstance(where, Path) else where, **kw)


async def effects(rt: tether.Runtime, actor_id: str) -> list[Any]:
    return await rt.store.find_effects(actor_id=actor_id)


async def eventually(check: Any, timeout: float = 5.0) -> Any:
    with anyio.fail_after(timeout):
        while True:
            value = await check()
            if value:
                return value
            await anyio.sleep(0.01)


async def test_an_effect_records_intent_and_receipt_and_hands_the_tool_the_runtime_key(
    store_url: str,
) -> None:
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        assert await a.ask(Do(effects=["refund"]), timeout=5) == ["refund o0 100"]
        [row] = await effects(rt, "a1")
    assert row.status == "done"
    assert row.attempts == 1
    assert row.tool == "refund"
    [(name, kwargs)] = fx.CALLS
    assert name == "refund"
    assert kwargs["key"] == row.key
    assert row.key == effect_key("a1", row.msg_id, 0, "refund", row.input_hash)


async def test_bad_tool_arguments_raise_tool_input_error_naming_the_field_and_record_nothing(
    store_url: str,
) -> None:
    async with runtime(store_url, max_attempts=1) as rt:
        a = await rt.spawn(Agent, "a1")
        with pytest.raises(tether.MessageDeadLettered) as caught:
            await a.ask(Do(effects=["bad"]), timeout=5)
        assert "at `$.amount_cents`" in caught.value.errors[0]
        assert await effects(rt, "a1") == []
    assert fx.CALLS == []
    with pytest.raises(tether.ToolInputError, match=r"\$\.amount_cents"):
        fx.refund.prepare({"order_id": "o", "amount_cents": "ten"})
    with pytest.raises(tether.ToolInputError, match="unknown field `surprise`"):
        fx.refund.prepare({"order_id": "o", "amount_cents": 1, "surprise": 1})
    with pytest.raises(tether.ToolInputError, match="missing required field `order_id`"):
        fx.refund.prepare({"amount_cents": 1})
    with pytest.raises(tether.ToolInputError, match="supplied by the runtime"):
        fx.refund.prepare({"order_id": "o", "amount_cents": 1, "idempotency_key": "mine"})


async def test_a_redelivered_step_replays_recorded_effects_without_calling_the_tools(
    store_url: str,
) -> None:
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        # The handler fails after both effects; the redelivery must not call them again.
        result = await a.ask(Do(effects=["refund", "charge"], fail_after=True), timeout=5)
        assert result == ["refund o0 100", "charged 5"]
        rows = await effects(rt, "a1")
    assert [name for name, _ in fx.CALLS] == ["refund", "charge"]
    assert [r.status for r in rows] == ["done", "done"]


async def test_the_same_input_in_another_step_gets_another_key(store_url: str) -> None:
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        await a.ask(Do(effects=["refund"]), timeout=5)
        await a.ask(Do(effects=["refund"]), timeout=5)
        rows = await effects(rt, "a1")
    assert len({r.key for r in rows}) == 2
    assert len({r.input_hash for r in rows}) == 1
    assert len(fx.CALLS) == 2


async def test_transient_failures_are_retried_with_the_same_key_and_each_attempt_recorded(
    store_url: str,
) -> None:
    fx.SCRIPT["refund"] = [
        tether.TransientToolError("refund", "rate limited", status_code=429),
        tether.TransientToolError("refund", "unavailable", status_code=503),
        None,
    ]
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        assert await a.ask(Do(effects=["refund"]), timeout=5) == ["refund o0 100"]
        [row] = await effects(rt, "a1")
    keys = {kwargs["key"] for _, kwargs in fx.CALLS}
    assert len(fx.CALLS) == 3
    assert keys == {row.key}
    assert row.attempts == 3
    assert row.status == "done"
    assert row.history[0].startswith("attempt 1: TransientToolError")
    assert row.history[1].startswith("attempt 2: TransientToolError")


class WaitsRecorded(FakeClock):
    """A fake clock that remembers how long each wait asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.asked.append(seconds)
        await super().sleep(seconds)


async def test_a_transient_failure_waits_for_the_receivers_retry_after_capped_at_max_delay(
    store_url: str,
) -> None:
    # The refund tool's policy backs off 0 s (initial_delay=0, max_delay 30 s): the waits are
    # the receiver's word, the second one capped.
    fx.SCRIPT["refund"] = [
        tether.TransientToolError("refund", "rate limited", status_code=429, retry_after=0.3),
        tether.TransientToolError("refund", "rate limited", status_code=429, retry_after=1000),
        None,
    ]
    clock = WaitsRecorded()
    async with runtime(store_url, clock=clock) as rt:
        a = await rt.spawn(Agent, "a1")
        async with anyio.create_task_group() as tg:
            answers: list[Any] = []

            async def ask() -> None:
                answers.append(await a.ask(Do(effects=["refund"]), timeout=10))

            tg.start_soon(ask)
            for wait in (0.3, 30.0):
                with anyio.fail_after(10):
                    while wait not in clock.asked:
                        await anyio.sleep(0.01)
                assert len(fx.CALLS) == (1 if wait == 0.3 else 2)  # it waited before calling
                clock.advance(wait)
    assert answers == [["refund o0 100"]]
    assert len(fx.CALLS) == 3


class PaymentDeclined(Exception):
    """A business error: retrying it would fail the same way."""


async def test_a_business_error_is_recorded_not_retried_and_replayed_as_tool_failed(
    store_url: str,
) -> None:
    fx.SCRIPT["refund"] = [PaymentDeclined("insufficient balance")]
    async with runtime(store_url, max_attempts=2) as rt:
        a = await rt.spawn(Agent, "a1")
        with pytest.raises(tether.MessageDeadLettered) as caught:
            await a.ask(Do(effects=["refund"]), timeout=5)
        [row] = await effects(rt, "a1")
    # Called once; the redelivery replayed the recorded failure.
    assert len(fx.CALLS) == 1
    assert row.status == "failed"
    assert "insufficient balance" in (row.error or "")
    assert all("insufficient balance" in e for e in caught.value.errors[:2])


async def test_retries_stop_at_the_policy_limit_and_the_failure_is_recorded(
    store_url: str,
) -> None:
    fx.SCRIPT["refund"] = [tether.TransientToolError("refund", "down", status_code=503)] * 3
    async with runtime(store_url, max_attempts=1) as rt:
        a = await rt.spawn(Agent, "a1")
        with pytest.raises(tether.MessageDeadLettered) as caught:
            await a.ask(Do(effects=["refund"]), timeout=5)
        assert "failed after 3 attempt" in caught.value.errors[0]
        [row] = await effects(rt, "a1")
    assert row.status == "failed"
    assert row.attempts == 3
    assert len(fx.CALLS) == 3


async def test_a_timed_out_retry_tool_is_called_again_with_the_same_key(store_url: str) -> None:
    fx.SCRIPT["charge"] = [HANG, None]
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        assert await a.ask(Do(effects=["charge"]), timeout=5) == ["charged 5"]
        [row] = await effects(rt, "a1")
    assert [k["key"] for _, k in fx.CALLS] == [row.key, row.key]
    assert row.attempts == 2
    assert "TimeoutError" in row.history[0]


async def test_an_ambiguous_quarantine_tool_is_held_and_the_actor_serves_other_messages(
    store_url: str,
) -> None:
    fx.SCRIPT["send_email"] = [HANG]
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        await a.tell(Do(effects=["refund", "email"]))
        [held] = await eventually(rt.quarantine.list)
        assert held.tool == "send_email"
        assert held.args == {"to": "a@b.c", "body": "hello 1"}
        assert held.actor_id == "a1"
        assert held.index == 1
        assert "TimeoutError" in held.reason
        # The session is not blocked: other messages go through while the step waits.
        assert await a.ask(Ping(), timeout=5) == "pong"
        assert (await a.ask(Ping(), timeout=5)) == "pong"
        await rt.quarantine.mark_done(held.key, "sent to a@b.c (confirmed by phone)", by="ops")
        await eventually(lambda: _results(rt, "a1"))
        results = await _results(rt, "a1")
        assert results == [["refund o0 100", "sent to a@b.c (confirmed by phone)"]]
        [_, row] = await effects(rt, "a1")
        assert row.status == "done"
        assert row.history[-1] == "marked done by ops"
        assert await rt.quarantine.list() == []
    # The email was tried once (it hung), the refund once: nothing ran twice.
    assert [n for n, _ in fx.CALLS] == ["refund", "send_email"]


async def _results(rt: tether.Runtime, actor_id: str) -> list[list[str]]:
    a = rt.ref(actor_id)
    state = await a.ask(Ping(), timeout=5)
    assert state == "pong"
    cell = rt.cells.get(actor_id)
    return [] if cell is None else list(cell.state.results)


async def test_retrying_a_quarantined_effect_calls_again_with_the_same_key(
    store_url: str,
) -> None:
    fx.SCRIPT["send_email"] = [HANG, None]
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        await a.tell(Do(effects=["email"]))
        [held] = await eventually(rt.quarantine.list)
        await rt.quarantine.retry(held.key, by="ops")
        await eventually(lambda: _results(rt, "a1"))
        [row] = await effects(rt, "a1")
    assert row.status == "done"
    assert row.attempts == 2
    assert [n for n, _ in fx.CALLS] == ["send_email", "send_email"]


async def test_aborting_a_quarantined_effect_gives_the_step_effect_aborted(store_url: str) -> None:
    fx.SCRIPT["send_email"] = [HANG]
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        await a.tell(Do(effects=["email", "refund"]))
        [held] = await eventually(rt.quarantine.list)
        with pytest.raises(tether.ConfigError, match="needs a reason"):
            await rt.quarantine.abort(held.key, "")
        await rt.quarantine.abort(held.key, "customer already emailed", by="ops")
        await eventually(lambda: _results(rt, "a1"))
        assert await _results(rt, "a1") == [["aborted: customer already emailed", "refund o1 200"]]
        with pytest.raises(tether.EffectNotFound, match="aborted, not quarantined"):
            await rt.quarantine.retry(held.key)
        with pytest.raises(tether.EffectNotFound, match="no quarantined effect"):
            await rt.quarantine.retry("nope")


async def test_a_quarantine_is_resolved_from_a_second_runtime_on_the_same_store(
    store_url: str,
) -> None:
    fx.SCRIPT["send_email"] = [HANG]
    async with runtime(store_url) as owner:
        a = await owner.spawn(Agent, "a1")
        await a.tell(Do(effects=["email"]))
        await eventually(owner.quarantine.list)
        async with runtime(store_url) as other:
            [held] = await other.quarantine.list()
            await other.quarantine.mark_done(held.key, "sent", by="cli")
        await eventually(lambda: _results(owner, "a1"))
        assert await _results(owner, "a1") == [["sent"]]


async def test_reconcile_done_records_the_receipt_without_calling_again(store_url: str) -> None:
    fx.SCRIPT["transfer"] = [HANG]
    fx.VERDICTS.append(tether.Done("transferred 7 to bob (found upstream)"))
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        assert await a.ask(Do(effects=["transfer"]), timeout=5) == [
            "transferred 7 to bob (found upstream)"
        ]
        [row] = await effects(rt, "a1")
    assert [n for n, _ in fx.CALLS] == ["transfer", "check_transfer"]
    assert row.status == "done"
    assert row.history[-1] == "reconciled: done"


async def test_reconcile_not_done_calls_again_with_the_same_key(store_url: str) -> None:
    fx.SCRIPT["transfer"] = [HANG, None]
    fx.VERDICTS.append(tether.NotDone())
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        assert await a.ask(Do(effects=["transfer"]), timeout=5) == ["transferred 7 to bob"]
    calls = [(n, k["key"]) for n, k in fx.CALLS]
    assert [n for n, _ in calls] == ["transfer", "check_transfer", "transfer"]
    assert len({k for _, k in calls}) == 1


async def test_reconcile_unknown_quarantines(store_url: str) -> None:
    fx.SCRIPT["transfer"] = [HANG]
    fx.VERDICTS.append(tether.Unknown("the bank's API is down"))
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        await a.tell(Do(effects=["transfer"]))
        [held] = await eventually(rt.quarantine.list)
    assert "the bank's API is down" in held.reason
    assert [n for n, _ in fx.CALLS] == ["transfer", "check_transfer"]


async def test_a_replayed_step_asking_for_a_different_input_is_refused_and_quarantined(
    store_url: str,
) -> None:
    # First run: the email's input depends on a counter outside the actor's state; the handler
    # then fails, so the step is replayed and asks for a different email at the same index.
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        await a.tell(Do(effects=["drift"], fail_after=True))
        [held] = await eventually(rt.quarantine.list)
        assert held.reason.startswith("determinism violation")
        assert [n for n, _ in fx.CALLS] == ["send_email"]  # the second input never ran
        with pytest.raises(tether.ConfigError, match="determinism violation"):
            await rt.quarantine.retry(held.key)
        with pytest.raises(tether.ConfigError, match="determinism violation"):
            await rt.quarantine.mark_done(held.key, "x")
        await rt.quarantine.abort(held.key, "the handler is not deterministic", by="dev")
        # The replay now raises DeterminismViolation (a ToolError), which the handler does not
        # catch: the message fails its remaining attempts and is dead-lettered, never executed.
        letters = await eventually(rt.dead_letters.list)
    assert "determinism violation" in letters[0].errors[-2]
    assert [n for n, _ in fx.CALLS] == ["send_email"]


async def test_a_result_marked_done_that_does_not_fit_the_tool_is_held_again_not_dead_lettered(
    store_url: str,
) -> None:
    """``tether quarantine resolve --done --result`` runs where the tool's return type is not
    known: a result of the wrong shape reaches the ledger. The replay holds the effect for a
    person again, saying why, instead of failing the step until its message is dead-lettered."""
    fx.SCRIPT["send_email"] = [HANG]
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        await a.tell(Do(effects=["email"]))
        [held] = await eventually(rt.quarantine.list)
        await rt.quarantine.mark_done(held.key, {"sent": True}, by="ops")  # send_email -> str

        async def held_again() -> list[Any]:
            return [q for q in await rt.quarantine.list() if "does not decode" in q.reason]

        [again] = await eventually(held_again)
        assert again.key == held.key
        assert again.reason.startswith("its recorded result does not decode as str: Expected `str`")
        assert again.history[-2:] == ["marked done by ops", f"held: {again.reason}"]
        assert await rt.dead_letters.list() == []
        assert await a.ask(Ping(), timeout=5) == "pong"  # the actor serves other messages
        await rt.quarantine.mark_done(held.key, "sent (checked by hand)", by="ops")
        await eventually(lambda: _results(rt, "a1"))
        assert await _results(rt, "a1") == [["sent (checked by hand)"]]
    assert [n for n, _ in fx.CALLS] == ["send_email"]  # never called again


async def test_a_call_whose_result_cannot_be_recorded_is_held_for_a_person_not_failed(
    store_url: str,
) -> None:
    """The call was made but returned something the ledger cannot record as the tool's type.
    Telling the handler "failed" would invite it to do the same thing another way: for a tool
    with an unknown side effect, a person decides, and the tool is not called again."""
    fx.RETURNS["post_letter"] = {"not": "a str"}
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        await a.tell(Do(effects=["letter"]))
        [held] = await eventually(rt.quarantine.list)
        assert held.tool == "post_letter"
        assert held.reason.startswith(
            "the call was made, but its result {'not': 'a str'} cannot be recorded as str"
        )
        assert await a.ask(Ping(), timeout=5) == "pong"  # the actor serves other messages
        await rt.quarantine.mark_done(held.key, "posted (receipt on paper)", by="ops")
        await eventually(lambda: _results(rt, "a1"))
        assert await _results(rt, "a1") == [["posted (receipt on paper)"]]
        assert await rt.dead_letters.list() == []
    assert [n for n, _ in fx.CALLS] == ["post_letter"]


async def test_finished_receipts_are_purged_after_their_retention(store_url: str) -> None:
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        await a.ask(Do(effects=["refund"]), timeout=5)
        assert await rt.store.purge_receipts(rt.clock() - 60) == 0
        assert await rt.store.purge_receipts(rt.clock() + 1) == 1
        assert await effects(rt, "a1") == []


async def test_effects_are_refused_outside_a_handler_and_for_undeclared_tools(
    store_url: str,
) -> None:
    async with runtime(store_url) as rt:
        await rt.spawn(Agent, "a1")
        cell = rt.cells.get("a1") or await _activate(rt, "a1")
        with pytest.raises(tether.ConfigError, match="only allowed inside handle"):
            await cell.instance.effect(fx.refund, order_id="o", amount_cents=1)  # type: ignore[union-attr]

    async def plain(x: int) -> int:
        return x

    def not_async() -> None:
        return None

    with pytest.raises(tether.ConfigError, match="async def"):
        tether.tool(not_async)  # type: ignore[arg-type]  # a plain def on purpose: refused
    with pytest.raises(tether.ConfigError, match="recovery must be one of"):
        tether.tool(recovery="maybe")(plain)  # type: ignore[call-overload]
    with pytest.raises(tether.ConfigError, match="max_attempts"):
        tether.RetryPolicy(max_attempts=0)


async def _activate(rt: tether.Runtime, actor_id: str) -> Any:
    await rt.ref(actor_id).ask(Ping(), timeout=5)
    return rt.cells[actor_id]


async def test_the_tool_spec_carries_the_json_schema_of_its_input() -> None:
    spec = fx.refund.spec()
    assert spec["name"] == "refund"
    assert spec["description"].startswith("Refund an order")
    schema = spec["input_schema"]
    assert "idempotency_key" not in str(schema)
    assert "amount_cents" in str(schema)


async def test_a_stale_owner_records_no_intent_and_calls_no_tool(store_url: str) -> None:
    async with runtime(store_url) as rt:
        a = await rt.spawn(Agent, "a1")
        assert await a.ask(Ping(), timeout=5) == "pong"
        cell = rt.cells["a1"]
        # Another owner (a live runtime on another host) takes the lease behind this cell's
        # back, this runtime having been taken for dead (its registration removed): the
        # fencing token goes up.
        await rt.store.register_runtime("intruder", "elsewhere", 1, rt.clock())
        await rt.store.remove_runtime(rt.runtime_id)
        taken = await rt.store.apply(Batch(acquires=[LeaseAcquire("a1", "intruder", 600.0)]))
        assert taken.leases["a1"] == cell.fence + 1
        await a.tell(Do(effects=["refund"]))
        with anyio.fail_after(5):
            while rt.cells.get("a1") is cell:
                await anyio.sleep(0.01)
        # The stale cell's intent was rejected before any call, and it left.
        assert await effects(rt, "a1") == []
    assert fx.CALLS == []


async def test_the_fault_injector_fails_delays_and_hangs_chosen_calls(store_url: str) -> None:
    from tether.testing import FaultInjector

    faults = FaultInjector()
    faults.fail(
        fx.charge, calls=[1], error=tether.TransientToolError("charge", "busy", status_code=429)
    )
    faults.hang(fx.charge, calls=[2])
    faults.delay(fx.charge, calls=[3], seconds=0.01)
    flaky = faults.wrap(fx.charge)
    assert flaky.name == "charge"
    assert flaky.recovery == "retry"
    with pytest.raises(tether.TransientToolError):
        await flaky(account="a", cents=1, idempotency_key="k")
    with anyio.move_on_after(0.05) as scope:
        await flaky(account="a", cents=1, idempotency_key="k")
    assert scope.cancelled_caught
    assert await flaky(account="a", cents=2, idempotency_key="k") == 2
    assert faults.calls(fx.charge) == 3
    assert [n for n, _ in fx.CALLS] == ["charge"]  # only the delayed call reached the tool
    with pytest.raises(tether.ConfigError, match="start at 1"):
        faults.fail(fx.charge, calls=[0], error=RuntimeError())


async def test_retrying_a_dead_letter_replays_its_recorded_effects(store_url: str) -> None:
    from tests.runtime.effect_actors import FlakyAfterEffect

    FlakyAfterEffect.broken[0] = True
    async with runtime(store_url, max_attempts=2) as rt:
        a = await rt.spawn(FlakyAfterEffect, "f1")
        await a.tell(Do(effects=[]))
        letters = await eventually(rt.dead_letters.list)
        FlakyAfterEffect.broken[0] = False  # fixed; now retry it
        await rt.dead_letters.retry(letters[0].msg_id)
        await eventually(lambda: _results(rt, "f1"))
        assert await _results(rt, "f1") == [["sent to c@d.e"]]
    assert [n for n, _ in fx.CALLS] == ["send_email"]  # once, before the dead letter


async def test_a_reconcile_hook_that_hangs_is_cut_at_the_tool_timeout_and_quarantines(
    store_url: str,
) -> None:
    fx.SCRIPT["slow_transfer"] = [HANG]
    async with runtime(store_url) as rt:
        a = await rt.spawn(fx.Misuser, "a1")
        await a.tell(fx.Misuse(tool="slow_transfer"))
        [held] = await eventually(rt.quarantine.list)
    assert "the reconcile hook did not answer within 0.2 s" in held.reason
    assert [n for n, _ in fx.CALLS] == ["slow_transfer", "check_slow_transfer"]


async def test_a_tool_error_whose_message_cannot_be_shown_is_recorded_as_a_failure(
    store_url: str,
) -> None:
    async with runtime(store_url) as rt:
        a = await rt.spawn(fx.Misuser, "a1")
        reply = await a.ask(fx.Misuse(tool="unprintable"), timeout=5)
        [row] = await effects(rt, "a1")
    assert reply == "failed: Unprintable: (its message cannot be shown: str() raised)"
    assert row.status == "failed"  # not an intent left "pending", quarantined as ambiguous
    assert [n for n, _ in fx.CALLS] == ["unprintable"]
