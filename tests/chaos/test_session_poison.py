"""A session whose step kills its process every time (I7 meets the session's task): the step
is dead-lettered after max_attempts deaths, the task ends "failed" with the reason, and an
asker in another process is answered through the stored reply, not at its timeout."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import tether
from tests.chaos.harness import Children
from tests.chaos.programs import LEASE_TTL, POLL

pytestmark = pytest.mark.slow  # crash tests: real child processes, real signals

MAX_ATTEMPTS = 2


def _run_until_it_stops_dying(tmp_path: Path, db: Path) -> tuple[list[int], str | None]:
    children = Children(tmp_path)
    codes: list[int] = []
    try:
        for _ in range(MAX_ATTEMPTS + 3):
            child = children.start("session", "session-kill", db, MAX_ATTEMPTS)
            codes.append(child.wait(30))
            if codes[-1] >= 0:
                break
        assert codes[-1] == 0, f"exit codes {codes}\n{children.describe()}"
        return codes, children.started[-1].value("status")
    finally:
        children.close()


@pytest.mark.anyio
async def test_a_step_that_kills_its_process_fails_the_task_and_answers_its_asker(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store.db"
    async with tether.Runtime(db, lease_ttl=LEASE_TTL, poll_interval=POLL):
        pass  # the store exists before the administration process opens it
    async with tether.Runtime(db, serve=False, poll_interval=POLL) as admin:
        outcome: dict[str, object] = {}

        async def ask() -> None:
            with pytest.raises(tether.TaskFailed) as caught:  # noqa: PT012 - waits in a task
                while True:
                    try:
                        ref = await admin.lookup("s1")
                        break
                    except tether.ActorNotFound:
                        await anyio.sleep(POLL)
                await ref.ask(tether.UserMessage("go"), timeout=3600, dedup_key="task")
            outcome["failed"] = caught.value

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            codes, status = await anyio.to_thread.run_sync(_run_until_it_stops_dying, tmp_path, db)
            with anyio.fail_after(30):  # answered through the stored reply, not at 3600 s
                while "failed" not in outcome:
                    await anyio.sleep(POLL)
    # Each delivery of the step died in it; the next run dead-lettered it and failed the task.
    assert codes == [-9] * MAX_ATTEMPTS + [0]
    assert status == "failed"
    failed = outcome["failed"]
    assert isinstance(failed, tether.TaskFailed)
    assert (failed.session_id, failed.task, failed.status) == ("s1", 1, "failed")
    assert failed.reason.startswith(
        f"step 1 was dead-lettered (delivered {MAX_ATTEMPTS} times without finishing"
    )
    assert "did not finish (the process stopped during delivery)" in failed.reason
