"""Inline dispatch (``tether.runtime.inline``): on a store that never waits, an ask of an idle
actor runs the actor's step in the asker's turn of the event loop. What the actor sees, and
what the asker sees, are the same as when the actor's own task runs it: the step runs as the
actor's task and in its log context, after the messages queued before it, never beside
another step of the actor; the asker's cancellation does not reach it, and a handler's
failure goes to supervision (a redelivery), not to the asker."""

from __future__ import annotations

import asyncio

import anyio
import pytest

import tether
from tests.runtime import inline_actors as ia

pytestmark = pytest.mark.anyio

TIMEOUT = 30.0


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ia.SEEN.clear()
    ia.RUNNING[:] = [0, 0]
    ia.FAILED.clear()


async def test_an_ask_of_an_idle_actor_runs_in_the_askers_turn_as_the_actors_task() -> None:
    async with tether.Runtime(":memory:") as rt:
        probe = await rt.spawn(ia.Probe, "probe")
        await probe.tell(ia.Add(n=1))  # delivered by the actor's own task
        assert await probe.ask(ia.Look(), timeout=TIMEOUT) == [1]
        actor_task = ia.SEEN[0].task
        assert actor_task is not None
        assert actor_task is not asyncio.current_task()
        ia.SEEN.clear()
        loop = asyncio.get_running_loop()
        inline = 0
        for n in range(2, 6):
            other_tasks_ran: list[bool] = []
            loop.call_soon(other_tasks_ran.append, True)
            await probe.ask(ia.Add(n=n), timeout=TIMEOUT)
            inline += not other_tasks_ran  # answered without a turn of the loop
        # Every 32nd write of the committer lets the other tasks run: at most one of these.
        assert inline >= 3
        assert await probe.ask(ia.Look(), timeout=TIMEOUT) == [1, 2, 3, 4, 5]
    assert all(seen.task is actor_task for seen in ia.SEEN)
    for seen in ia.SEEN:
        assert seen.log_context["actor_id"] == "probe"
        assert "msg_id" in seen.log_context


async def test_messages_queued_before_an_ask_are_handled_first() -> None:
    async with tether.Runtime(":memory:") as rt:
        probe = await rt.spawn(ia.Probe, "probe")
        for n in (1, 2, 3):
            await probe.tell(ia.Add(n=n))
        assert await probe.ask(ia.Look(), timeout=TIMEOUT) == [1, 2, 3]


async def test_a_step_begun_inline_that_waits_goes_on_in_the_actors_task_alone() -> None:
    """The step waits inside a cancel scope it entered in the asker's turn: it leaves it in
    the actor's task. Asks arriving meanwhile wait behind it, in order."""
    async with tether.Runtime(":memory:") as rt:
        probe = await rt.spawn(ia.Probe, "probe")
        await probe.ask(ia.Look(), timeout=TIMEOUT)
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: probe.ask(ia.Hold(seconds=0.2, n=1), timeout=TIMEOUT))
                await anyio.sleep(0.05)
                tg.start_soon(lambda: probe.ask(ia.Add(n=2), timeout=TIMEOUT))
                await anyio.sleep(0.01)
                tg.start_soon(lambda: probe.ask(ia.Hold(seconds=0.01, n=3), timeout=TIMEOUT))
        assert await probe.ask(ia.Look(), timeout=TIMEOUT) == [1, 2, 3]
    assert ia.RUNNING == [0, 1]  # never two steps at once
    actor_task = ia.SEEN[0].task
    assert all(seen.task is actor_task for seen in ia.SEEN)


async def test_cancelling_the_asker_does_not_cancel_a_step_begun_inline() -> None:
    async with tether.Runtime(":memory:") as rt:
        probe = await rt.spawn(ia.Probe, "probe")
        await probe.ask(ia.Look(), timeout=TIMEOUT)
        with anyio.move_on_after(0.05) as gave_up:
            await probe.ask(ia.Hold(seconds=0.3, n=7), timeout=TIMEOUT)
        assert gave_up.cancelled_caught
        # The step goes on in the actor's task and commits: the next ask waits behind it.
        assert await probe.ask(ia.Look(), timeout=TIMEOUT) == [7]


async def test_a_handler_that_fails_after_waiting_goes_to_supervision_not_to_the_asker() -> None:
    async with tether.Runtime(":memory:", max_attempts=3) as rt:
        probe = await rt.spawn(ia.Probe, "probe")
        await probe.ask(ia.Look(), timeout=TIMEOUT)
        # Fails once (after its wait, in the actor's task), is redelivered, then commits.
        assert await probe.ask(ia.Hold(seconds=0.01, n=5, fail=1), timeout=TIMEOUT) is None
        assert ia.FAILED == {5: 1}
        assert await probe.ask(ia.Look(), timeout=TIMEOUT) == [5]


async def test_a_handler_that_fails_in_the_askers_turn_is_redelivered_then_dead_lettered() -> None:
    async with tether.Runtime(":memory:", max_attempts=2) as rt:
        probe = await rt.spawn(ia.Probe, "probe")
        await probe.ask(ia.Look(), timeout=TIMEOUT)
        with pytest.raises(tether.MessageDeadLettered) as caught:
            await probe.ask(ia.Add(n=9, fail=5), timeout=TIMEOUT)
        assert caught.value.errors[:2] == (
            "attempt 1: RuntimeError: add 9 failed",
            "attempt 2: RuntimeError: add 9 failed",
        )
        # The actor goes on: the failed attempts left nothing in its state.
        assert await probe.ask(ia.Add(n=1), timeout=TIMEOUT) is None
        assert await probe.ask(ia.Look(), timeout=TIMEOUT) == [1]
