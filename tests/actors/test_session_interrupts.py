"""A session is readable, and cancellable, while a step waits on a slow tool.

``rt.session_info`` and ``tether show`` answer from the committed journal, never through the
mailbox (where ``GetSessionInfo`` waits behind the step). ``CancelTask`` interrupts the call the
step waits on: the call's outcome goes to the tool's recovery policy, as after a timeout,
without calling again (nothing non-idempotent runs twice, nothing is lost), and the session then
ends the task as cancelled."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.actors import session_agents as sa
from tests.actors.session_agents import WaitingAgent
from tether.actors.session import GetSessionInfo
from tether.store.records import EffectRecord

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    sa.SLOW_CALLS.clear()
    sa.SLOW_VERDICTS.clear()
    yield
    sa.SLOW_CALLS.clear()
    sa.SLOW_VERDICTS.clear()


def runtime(path: Path, **kw: Any) -> tether.Runtime:
    kw.setdefault("poll_interval", 0.02)
    return tether.Runtime(path / "agents.db", **kw)


@asynccontextmanager
async def waiting_on(
    rt: tether.Runtime, tool: str, outcome: dict[str, BaseException]
) -> AsyncIterator[tether.ActorRef]:
    """Session ``s1`` with a task whose step waits in ``tool`` (until cancelled); what its
    asker got ends up in ``outcome``."""
    s = await rt.spawn(WaitingAgent, "s1", goal="Wait on slow tools")

    async def ask() -> None:
        try:
            await s.ask(tether.UserMessage(tool), timeout=3600)
        except tether.TetherError as exc:
            outcome["error"] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        with anyio.fail_after(10):
            while tool not in sa.SLOW_CALLS:
                await anyio.sleep(0.01)
        yield s
        with anyio.fail_after(10):  # the task's asker is answered
            while "error" not in outcome:
                await anyio.sleep(0.01)


async def test_session_info_answers_from_the_journal_while_a_step_waits(tmp_path: Path) -> None:
    outcome: dict[str, BaseException] = {}
    async with runtime(tmp_path) as rt, waiting_on(rt, "slow_retry", outcome) as s:
        with pytest.raises(tether.AskTimeout):  # the mailbox is behind the step
            await s.ask(GetSessionInfo(), timeout=0.3)
        with anyio.fail_after(5):
            info = await rt.session_info("s1")
        assert (info.status, info.task, info.task_text) == ("working", 1, "slow_retry")
        await s.tell(tether.CancelTask(reason="enough"))
    assert isinstance(outcome["error"], tether.TaskFailed)


async def test_session_info_is_refused_for_an_actor_that_is_not_a_session(tmp_path: Path) -> None:
    from tests.sample_actors import Account

    async with runtime(tmp_path) as rt:
        await rt.spawn(Account, "acct")
        with pytest.raises(tether.ConfigError, match=r"'acct' is a .*Account, not an agent"):
            await rt.session_info("acct")
        with pytest.raises(tether.ActorNotFound):
            await rt.session_info("nobody")


async def _ledger(rt: tether.Runtime, tool: str) -> EffectRecord:
    [row] = [e for e in await rt.store.find_effects(actor_id="s1") if e.tool == tool]
    return row


@pytest.mark.parametrize(
    ("tool", "verdict", "status", "error"),
    [
        # Its receiver honors the key: recorded as failed, safe to call again with it.
        (
            "slow_retry",
            None,
            "failed",
            "interrupted by CancelTask during the call: it may have been carried out; "
            "calling again with its key is safe",
        ),
        # An unknown side effect: held for a person, who records what happened.
        ("slow_quarantine", None, "quarantined", None),
        # The reconcile hook tells: the call did not happen.
        (
            "slow_reconcile",
            tether.NotDone(),
            "failed",
            "interrupted by CancelTask: reconciled: not done",
        ),
        # The hook cannot tell: held for a person.
        ("slow_reconcile", tether.Unknown("the bank is closed"), "quarantined", None),
        # The hook says it happened: its result stands, the step goes on with it.
        ("slow_reconcile", tether.Done(result="wired"), "done", None),
    ],
)
async def test_a_cancel_interrupts_the_call_a_step_waits_on_and_its_policy_records_it(
    tmp_path: Path, tool: str, verdict: Any, status: str, error: str | None
) -> None:
    if verdict is not None:
        sa.SLOW_VERDICTS.append(verdict)
    outcome: dict[str, BaseException] = {}
    async with runtime(tmp_path) as rt:
        async with waiting_on(rt, tool, outcome) as s:
            with anyio.fail_after(10):  # not behind the step: the step waits for ever
                assert await s.ask(tether.CancelTask(reason="customer hung up"), timeout=3600) == (
                    "cancelled"
                )
        row = await _ledger(rt, tool)
        info = await rt.session_info("s1")
        held = await rt.quarantine.list("s1")
    failed = outcome["error"]
    assert isinstance(failed, tether.TaskFailed)
    assert (failed.status, failed.reason) == ("cancelled", "customer hung up")
    assert (info.status, info.outcome) == ("cancelled", "cancelled: customer hung up")
    assert [tool] == sa.SLOW_CALLS  # made once, never again
    assert row.status == status
    assert row.error == error
    if status == "quarantined":
        assert [h.key for h in held] == [row.key]
        assert (row.reason or "").startswith("interrupted by CancelTask during the call")
    else:
        assert held == []
    [call] = failed.result.calls
    assert call.effect_key == row.key
    if status == "done":
        assert call.result == "wired"
    else:
        assert (call.error or "").startswith(f"tool '{tool}': call {row.key} interrupted")


async def test_a_cancel_from_another_process_interrupts_the_call_too(tmp_path: Path) -> None:
    """Stored by an administration process (the CLI, a web hook): the serving runtime sees it
    in its scan of new messages and interrupts the step, which does not rescan until it ends."""
    outcome: dict[str, BaseException] = {}
    async with (
        runtime(tmp_path) as rt,
        waiting_on(rt, "slow_quarantine", outcome),
        tether.Runtime(tmp_path / "agents.db", serve=False) as admin,
    ):
        await admin.ref("s1").tell(tether.CancelTask(reason="from the console"))
    failed = outcome["error"]
    assert isinstance(failed, tether.TaskFailed)
    assert failed.reason == "from the console"
    assert sa.SLOW_CALLS == ["slow_quarantine"]


async def test_tether_show_answers_while_a_step_waits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.cli import main

    outcome: dict[str, BaseException] = {}
    async with runtime(tmp_path) as rt, waiting_on(rt, "slow_retry", outcome) as s:
        argv = ["show", "s1", "--db", str(tmp_path / "agents.db")]
        with anyio.fail_after(30):
            code = await anyio.to_thread.run_sync(main, argv)
        shown = capsys.readouterr().out
        await s.tell(tether.CancelTask())
    assert code == 0
    # The committed state: the task has begun, its step is under way (its call is pending).
    assert "session: working\n" in shown
    assert re.search(r"^  task +1, 0 step\(s\) committed: slow_retry$", shown, re.M), shown
    assert '#1 slow_retry({"order_id":"42"}) pending, 1 attempt(s)' in shown


def test_a_tool_call_is_limited_to_300_seconds_unless_its_tool_says_otherwise() -> None:
    @tether.tool
    async def plain(x: int) -> int:
        return x

    @tether.tool(timeout=None)
    async def unbounded(x: int) -> int:
        return x

    assert plain.timeout == 300.0
    assert unbounded.timeout is None
