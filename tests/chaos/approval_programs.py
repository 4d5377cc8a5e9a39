"""Child programs for the approval crash tests (I9): an agent whose payment waits for a person,
SIGKILLed while it waits, and people deciding from processes of their own.

Run from the repository root as

* ``python -m tests.chaos.approval_programs agent DB LOG CLASS KILL``: the agent. It runs a
  Runtime on ``DB``, spawns (or resumes) the session ``payer`` of actor class ``CLASS`` (one of
  :data:`ACTORS`) and tells it to pay ``REQUESTED`` (with a dedup key, so that a restarted agent
  sends nothing new). The ``pay`` tool requires approval; when it really runs it appends one
  JSON line to ``LOG`` (arguments, idempotency key, pid, time): the count of executions across
  every process. The agent reports ``pending=[...]`` whenever the pending requests change, and
  once the session has an outcome, ``outcomes=``, ``ledger=``, ``approvals=`` and ``finished``.
  ``KILL``: ``none``, or where the agent SIGKILLs itself once the call was approved:
  ``before-intent`` (the call's intent is about to be committed) or ``after-intent`` (it is
  committed; the tool was not called).
* ``python -m tests.chaos.approval_programs decide DB REQUEST_ID KIND BY [EXTRA]``: a person
  deciding from another process, through ``Runtime(DB, serve=False)``. ``KIND`` is ``approve``,
  ``reject`` (``EXTRA``: the reason) or ``modify`` (``EXTRA``: the new arguments, JSON). Prints
  ``decided=<request as JSON>`` and exits 0, or prints ``closed=``/``not_found=``/``refused=``
  and exits with :data:`EXIT_CLOSED`/:data:`EXIT_NOT_FOUND`/:data:`EXIT_REFUSED`.

Like ``tests.chaos.programs``, the actors and the tool live at module level and the ``__main__``
guard re-imports this file under its real name, so that stored class and tool paths
(``tests.chaos.approval_programs:...``) import in every process.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

import tether
from tests.chaos.programs import LEASE_TTL, POLL, append_line, configure_logging, report
from tether.store.records import Batch, BatchResult

SESSION = "payer"
REQUESTED: dict[str, Any] = {"to": "acme", "cents": 5000}
# The deadline of the hasty policies: long enough to kill the agent before it and start a new
# one that finds the request still pending, on a loaded machine (a test suite in parallel
# workers, a second Python's pass: a new interpreter took over 2 s to report there).
EXPIRY = 6.0
RUN_TIMEOUT = 30.0  # an agent run gives up after this long
KILL_POINTS = ("before-intent", "after-intent")
EXIT_CLOSED = 3
EXIT_NOT_FOUND = 4
EXIT_REFUSED = 5


class _Config:
    log = ""  # set by the agent program: where the tool records that it ran


CONFIG = _Config()


@tether.tool(recovery="retry", requires_approval=True)
async def pay(to: str, cents: int, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    """Pay a supplier: irreversible, so every call waits for a person."""
    record = {"to": to, "cents": cents, "key": idempotency_key, "pid": os.getpid()}
    append_line(CONFIG.log, {**record, "at": time.time()})
    return f"paid {cents} to {to}"


class Pay(tether.Message):
    to: str
    cents: int


class GetOutcomes(tether.Message):
    pass


class Paid(tether.Event):
    outcome: str


class PayerState(msgspec.Struct):
    outcomes: list[str] = msgspec.field(default_factory=list)


class Payer(tether.Actor[PayerState]):
    """Pays through ``pay``; a rejection's reason becomes the outcome (what the agent is told)."""

    initial_state = PayerState()
    approval_policy = tether.ApprovalPolicy(timeout=3600)

    def apply(self, state: PayerState, event: Paid) -> PayerState:
        return PayerState(outcomes=[*state.outcomes, event.outcome])

    async def handle(self, msg: Pay | GetOutcomes) -> str | list[str]:
        if isinstance(msg, GetOutcomes):
            return list(self.state.outcomes)
        try:
            outcome: str = await self.effect(pay, to=msg.to, cents=msg.cents)
        except tether.ApprovalRejected as exc:
            outcome = f"rejected by {exc.by}: {exc.reason}"
        self.persist(Paid(outcome=outcome))
        return outcome

    def approval_context(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"goal": "pay the supplier", "if_rejected": "tell the supplier to wait"}


class QuorumPayer(Payer):
    approval_policy = tether.ApprovalPolicy(timeout=3600, approvers_needed=2)


class HastyPayer(Payer):
    approval_policy = tether.ApprovalPolicy(timeout=EXPIRY)  # on_timeout="reject"


class TrustingPayer(Payer):
    approval_policy = tether.ApprovalPolicy(timeout=EXPIRY, on_timeout="approve")


ACTORS: dict[str, type[Payer]] = {
    c.__name__: c for c in (Payer, QuorumPayer, HastyPayer, TrustingPayer)
}


def die(point: str) -> None:
    report(f"dying={point}")
    os.kill(os.getpid(), signal.SIGKILL)


class KillingStore(tether.SqliteStore):
    """SIGKILLs its own process around the first commit of the ``pay`` call's intent: the call
    was approved (the gate let it through) and has not been made."""

    def __init__(self, path: str, *, point: str) -> None:
        super().__init__(path)
        self.point = point

    async def apply(self, batch: Batch) -> BatchResult:
        intent = any(w.record.tool == "pay" and w.record.status == "pending" for w in batch.effects)
        if intent and self.point == "before-intent":
            die(self.point)
        result = await super().apply(batch)
        if intent and self.point == "after-intent":
            die(self.point)
        return result


def _dumps(value: Any) -> str:
    return json.dumps(msgspec.to_builtins(value), sort_keys=True)


async def agent_program(db: str, log: str, class_name: str, kill: str) -> None:
    CONFIG.log = log
    if class_name not in ACTORS or kill not in (*KILL_POINTS, "none"):
        raise SystemExit(f"bad actor class {class_name!r} or kill point {kill!r}")
    store = KillingStore(db, point=kill) if kill != "none" else tether.SqliteStore(db)
    async with tether.Runtime(db, store=store, lease_ttl=LEASE_TTL, poll_interval=POLL) as rt:
        ref = await rt.spawn(ACTORS[class_name], SESSION)
        await ref.tell(
            Pay(to=str(REQUESTED["to"]), cents=int(REQUESTED["cents"])), dedup_key="pay-1"
        )
        report(f"ready pid={os.getpid()}")
        last = ""
        with anyio.fail_after(RUN_TIMEOUT):
            while True:
                pending = _dumps(await rt.approvals.pending())
                if pending != last and pending != "[]":
                    report(f"pending={pending}")
                last = pending
                outcomes = await ref.ask(GetOutcomes(), timeout=RUN_TIMEOUT)
                if outcomes:
                    break
                await anyio.sleep(0.02)
        report(f"outcomes={json.dumps(outcomes)}")
        ledger = [
            {
                "key": r.key,
                "tool": r.tool,
                "status": r.status,
                "attempts": r.attempts,
                "args": msgspec.msgpack.decode(r.args),
                "history": r.history,
            }
            for r in await rt.store.find_effects(actor_id=SESSION)
        ]
        report(f"ledger={json.dumps(ledger)}")
        report(f"approvals={_dumps(await requests_of(rt, SESSION))}")
        report("finished")


async def requests_of(rt: tether.Runtime, session: str) -> list[tether.ApprovalRequest]:
    """Every request of ``session``, whatever its status, as a person sees it."""
    return [
        await rt.approvals.get(r.request_id)
        for r in await rt.store.find_approvals(actor_id=session)
    ]


async def decide_program(db: str, request_id: str, kind: str, by: str, extra: str = "") -> None:
    decision: tether.Approve | tether.Reject | tether.Modify
    if kind == "approve":
        decision = tether.Approve(by=by)
    elif kind == "reject":
        decision = tether.Reject(by=by, reason=extra)
    elif kind == "modify":
        decision = tether.Modify(by=by, args=json.loads(extra))
    else:
        raise SystemExit(f"bad decision {kind!r}")
    async with tether.Runtime(db, serve=False) as rt:
        try:
            request = await rt.approvals.decide(request_id, decision)
        except tether.ApprovalClosed as exc:
            report(f"closed={exc}")
            code = EXIT_CLOSED
        except tether.ApprovalNotFound as exc:
            report(f"not_found={exc}")
            code = EXIT_NOT_FOUND
        except (tether.ConfigError, tether.ToolInputError) as exc:
            report(f"refused={exc}")
            code = EXIT_REFUSED
        else:
            report(f"decided={_dumps(request)}")
            code = 0
    if code:
        raise SystemExit(code)


PROGRAMS: dict[str, Callable[..., Awaitable[None]]] = {
    "agent": agent_program,
    "decide": decide_program,
}


def main(argv: list[str]) -> None:
    configure_logging()
    scenario, *args = argv
    anyio.run(PROGRAMS[scenario], *args)


if __name__ == "__main__":
    from tests.chaos import approval_programs  # the same code, under the name stored paths use

    approval_programs.main(sys.argv[1:])
