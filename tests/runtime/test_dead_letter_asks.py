"""An ask whose message is dead-lettered is answered at once with ``MessageDeadLettered``
(I7), whichever way the message got there and wherever the asker is; an ask a stopped actor
deferred its reply to is answered with ``ActorStopped``. None waits for its timeout, nor for
the scheduler's next poll of stored replies (an hour away in these tests, where it could)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests import sample_actors
from tests.actors import session_agents as sa
from tests.sample_actors import Account, Deposit, Fail, Sleep, StopMe

pytestmark = pytest.mark.anyio

NEVER = 3600.0  # an ask's timeout, and the poll interval: nothing here may wait for either


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    sample_actors.failures.clear()
    sa.LOG.clear()  # "the task runs" is read from it: another module's entries would say so
    yield
    sample_actors.failures.clear()


def runtime(where: Path | str, **kw: Any) -> tether.Runtime:
    """A runtime on the store at ``where``: a folder (its SQLite file), or a store URL."""
    kw.setdefault("poll_interval", NEVER)
    return tether.Runtime(
        where / "store.db" if isinstance(where, Path) else where, max_attempts=2, **kw
    )


async def test_a_message_that_fails_max_attempts_times_answers_its_asker_at_once(
    store_url: str,
) -> None:
    async with runtime(store_url) as rt:
        acct = await rt.spawn(Account, "acct")
        with anyio.fail_after(30), pytest.raises(tether.MessageDeadLettered) as caught:
            await acct.ask(Fail(key="f"), timeout=NEVER)
    assert caught.value.errors == (
        "attempt 1: RuntimeError: boom f",
        "attempt 2: RuntimeError: boom f",
        "failed 2 times; max_attempts=2",
    )


async def test_the_messages_a_stop_dead_letters_answer_their_askers_at_once(
    store_url: str,
) -> None:
    """A stop lets the current message finish and moves the rest to the dead letters: their
    askers are told now (on main they waited for the scheduler's poll of stored replies)."""
    async with runtime(store_url) as rt:
        acct = await rt.spawn(Account, "acct")
        await acct.tell(Sleep(seconds=0.3))
        outcome: dict[str, BaseException] = {}

        async def ask() -> None:
            try:
                await acct.ask(Deposit(amount=5), timeout=NEVER)
            except tether.TetherError as exc:
                outcome["error"] = exc

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                while not rt.replies:  # the ask is stored and waits
                    await anyio.sleep(0.01)
                await rt.stop("acct", "closing the account")
    error = outcome["error"]
    assert isinstance(error, tether.MessageDeadLettered)
    assert error.errors == ("actor stopped: closing the account",)


async def test_an_actor_that_stops_itself_answers_the_asks_queued_behind_it(
    store_url: str,
) -> None:
    async with runtime(store_url) as rt:
        acct = await rt.spawn(Account, "acct")
        await acct.tell(Sleep(seconds=0.3))
        await acct.tell(StopMe(reason="done for the day"))
        with anyio.fail_after(30), pytest.raises(tether.MessageDeadLettered) as caught:
            await acct.ask(Deposit(amount=5), timeout=NEVER)
    assert caught.value.errors == ("actor stopped: done for the day",)


async def test_a_task_a_stopped_session_never_finishes_answers_its_asker_at_once(
    store_url: str,
) -> None:
    """A session defers the reply to a UserMessage until the task ends: stopped meanwhile,
    no step will ever answer it, so the asker gets ActorStopped now."""
    async with runtime(store_url) as rt:
        s = await rt.spawn(sa.SlowAgent, "s1", goal="Look orders up")
        outcome: dict[str, BaseException] = {}

        async def ask() -> None:
            try:
                await s.ask(tether.UserMessage("keep looking"), timeout=NEVER)
            except tether.TetherError as exc:
                outcome["error"] = exc

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                while len(sa.LOG) < 2:  # the task runs
                    await anyio.sleep(0.01)
                await rt.stop("s1", "the operator stopped it")
    error = outcome["error"]
    assert isinstance(error, tether.ActorStopped)
    assert error.reason == "the operator stopped it"


async def test_an_asker_in_another_process_gets_the_stored_dead_letter(store_url: str) -> None:
    """The asker is an administration process (the CLI, a web hook) on the same store: the
    dead letter's error history is stored as the ask's reply, and read back from there."""
    async with runtime(store_url, poll_interval=0.02) as rt:
        await rt.spawn(Account, "acct")
        async with tether.Runtime(store_url, serve=False, poll_interval=0.02) as admin:
            with anyio.fail_after(30), pytest.raises(tether.MessageDeadLettered) as caught:
                await admin.ref("acct").ask(Fail(key="f"), timeout=NEVER)
    assert caught.value.errors[-1] == "failed 2 times; max_attempts=2"
