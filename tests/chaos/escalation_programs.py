"""Child program for the escalation crash tests (I9): a session whose call was escalated to a
person, SIGKILLed after the decision is recorded and before the step that applies it commits.

Run from the repository root as

``python -m tests.chaos.escalation_programs agent DB OUTBOX PATH ON_TIMEOUT EXPIRY KILL``

It runs a Runtime on ``DB``, spawns (or resumes) the session ``s1`` of the class that escalates
by ``PATH`` (a key of ``tests.runtime.escalation_agents.AGENTS``; its ``send`` tools append a
line to ``OUTBOX`` for every message they really send) and tells it ``go`` (with a dedup key,
so a restarted agent sends nothing new). New requests get ``ApprovalPolicy(timeout=EXPIRY,
on_timeout=ON_TIMEOUT)``. The agent reports ``pending=[...]`` whenever the pending requests
change, and once the task has ended, ``answer=``, ``approvals=`` and ``finished``.

``KILL``: ``none``, or ``settled``: the agent SIGKILLs itself just before the first commit that
carries the gate's ``ApprovalSettled`` event. The session writes that event with its first
commit after it saw the request decided (by a person or by the deadline): the approved call's
intent, or the step that tells the model of a rejection. So the decision is in the store, and
nothing of what follows from it is.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import msgspec

import tether
from tests.chaos.approval_programs import RUN_TIMEOUT, die, requests_of
from tests.chaos.programs import LEASE_TTL, POLL, configure_logging, report
from tests.runtime.escalation_agents import AGENTS, OUTBOX
from tether.actors.session import GetSessionInfo
from tether.store.records import Batch, BatchResult

SESSION = "s1"
EXPIRY = 4.0  # the deadline of the timeout cases: long enough to see the request pending, loaded


class DieWhenSettled(tether.SqliteStore):
    """SIGKILLs its own process before applying the first batch that settles a request."""

    async def apply(self, batch: Batch) -> BatchResult:
        if any(
            step.actor_id.endswith("/gate")
            and any(b"ApprovalSettled" in row.payload for row in step.events)
            for step in batch.steps
        ):
            die("settled")
        return await super().apply(batch)


def _dumps(value: Any) -> str:
    return json.dumps(msgspec.to_builtins(value), sort_keys=True)


async def agent_program(
    db: str, outbox: str, path: str, on_timeout: str, expiry: str, kill: str
) -> None:
    OUTBOX.path = outbox
    if path not in AGENTS or kill not in ("settled", "none"):
        raise SystemExit(f"bad escalation path {path!r} or kill point {kill!r}")
    store = DieWhenSettled(db) if kill == "settled" else tether.SqliteStore(db)
    policy = tether.ApprovalPolicy(timeout=float(expiry), on_timeout=on_timeout)  # type: ignore[arg-type]
    async with tether.Runtime(
        db, store=store, lease_ttl=LEASE_TTL, poll_interval=POLL, approval_policy=policy
    ) as rt:
        session = await rt.spawn(AGENTS[path], SESSION, goal="send the messages")
        await session.tell(tether.UserMessage("go"), dedup_key="go-1")
        report(f"ready pid={os.getpid()}")
        last = ""
        with anyio.fail_after(RUN_TIMEOUT):
            while True:
                pending = _dumps(await rt.approvals.pending(include_expired=True))
                if pending != last and pending != "[]":
                    report(f"pending={pending}")
                last = pending
                info = await session.ask(GetSessionInfo(), timeout=RUN_TIMEOUT)
                if info.outcome:
                    break
                await anyio.sleep(0.02)
        report(f"answer={json.dumps([info.outcome, info.last_answer])}")
        report(f"approvals={_dumps(await requests_of(rt, SESSION))}")
        report("finished")


def main(argv: list[str]) -> None:
    configure_logging()
    scenario, *args = argv
    if scenario != "agent" or len(args) != 6:
        raise SystemExit(f"usage: agent DB OUTBOX PATH ON_TIMEOUT EXPIRY KILL, not {argv!r}")
    db, outbox, path, on_timeout, expiry, kill = args
    anyio.run(agent_program, db, outbox, path, on_timeout, expiry, kill)


if __name__ == "__main__":
    from tests.chaos import escalation_programs  # the same code, under its importable name

    escalation_programs.main(sys.argv[1:])
