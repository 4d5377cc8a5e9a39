"""The agent behind ``tether demo``: a refund agent, its tools and model, and its worker process.

The demo (``tether.demo``) runs :func:`main` in a child process, twice, on the same store:

* each customer gets a :class:`RefundAgent` session whose scripted model looks the order up,
  checks its fraud score, refunds it through the payments service (``tether.testing.payments``,
  which honors idempotency keys) and answers;
* ``check_fraud_score`` is flaky: the scoring service answers 503, so its breaker trips and the
  agent is told the tool is unavailable, and when to retry; the model goes on without it;
* a refund over :data:`APPROVAL_LIMIT` goes through ``big_refund``, which needs a person's
  approval: the session waits, the worker goes on with the other customers;
* in the first run, :func:`killing` SIGKILLs the worker right after the victim's refund
  succeeded at the payments service and right before its receipt is committed.

The worker reports what happens as JSON lines on stdout (``{"event": ..., ...}``); the demo
turns them into the story. tether's own logs (warnings and up) go to a log file.

This module is imported by name in the worker, so that the stored class paths
(``tether.demo_agent:RefundAgent``) import again after a restart.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import anyio
import msgspec
import structlog

import tether
from tether.actors.context import ChatMessage, ToolCallRecord
from tether.store.protocol import Store
from tether.store.records import Batch, BatchResult
from tether.testing.model import ScriptedModel
from tether.testing.payments import PaymentsClient

# -- the customers --------------------------------------------------------------------------


class Customer(msgspec.Struct, frozen=True):
    session: str  # the session id: one session per customer
    order_id: str
    amount_cents: int

    @property
    def request(self) -> str:
        return f"Please refund my order {self.order_id}."


CUSTOMERS = (
    Customer("alice", "A-1001", 2_500),
    Customer("bob", "B-2002", 4_000),
    Customer("carol", "C-3003", 125_000),
    Customer("dave", "D-4004", 6_000),
)
VICTIM = "dave"  # the session whose refund is caught by the kill
APPROVAL_LIMIT = 50_000  # cents: refunds above this go through big_refund (approval)
GOAL = "Refund delivered orders for customers who ask, exactly once each."
CONSTRAINTS = [
    "Check the fraud score before refunding; if the fraud check is unavailable, go on.",
    f"Refunds over {APPROVAL_LIMIT // 100} dollars use big_refund, which a person approves.",
]
FRAUD_BREAKER = "breaker:check_fraud_score"  # the breaker actor's id (rt.tree(), the CLI)


def money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def customer(session: str) -> Customer:
    return next(c for c in CUSTOMERS if c.session == session)


def dedup_key(c: Customer) -> str:
    """Each customer's request is sent once, whichever worker (re)sends it."""
    return f"refund-request-{c.order_id}"


# -- reporting ------------------------------------------------------------------------------


class _Config:
    """Set by the worker from its arguments."""

    payments_url = ""
    out: TextIO | None = None  # where events go (None: nowhere)
    fraud_calls = 0


CONFIG = _Config()


def emit(event: str, **fields: Any) -> None:
    """One line of the story, as JSON, for the demo process to print."""
    if CONFIG.out is not None:
        CONFIG.out.write(json.dumps({"event": event, **fields}) + "\n")
        CONFIG.out.flush()


# -- the tools ------------------------------------------------------------------------------


class Order(msgspec.Struct, frozen=True):
    order_id: str
    customer: str
    amount_cents: int
    status: str


class Refund(msgspec.Struct, frozen=True):
    refund_id: str
    order_id: str
    amount_cents: int
    replayed: bool = False  # the payments service answered from its record of the key


ORDERS = {c.order_id: Order(c.order_id, c.session, c.amount_cents, "delivered") for c in CUSTOMERS}
FRAUD_OUTAGE = 3  # the fraud-scoring service answers 503 to its first calls
FRAUD_BREAKER_POLICY = tether.BreakerPolicy(failure_threshold=2, window_size=2, open_duration=30.0)
QUICK_RETRY = tether.RetryPolicy(max_attempts=3, initial_delay=0.05, max_delay=0.1)


@tether.tool(recovery="retry", breaker="database")
async def lookup_order(order_id: str) -> Order:
    """Look an order up: who ordered it, its amount and its status."""
    if order_id not in ORDERS:
        raise KeyError(f"no order {order_id}")
    return ORDERS[order_id]


@tether.tool(recovery="retry", breaker=FRAUD_BREAKER_POLICY, retry=QUICK_RETRY, timeout=5.0)
async def check_fraud_score(order_id: str) -> int:
    """The order's fraud risk, 0 (none) to 100, from the fraud-scoring service."""
    CONFIG.fraud_calls += 1
    if CONFIG.fraud_calls <= FRAUD_OUTAGE:
        emit("fraud_503", order_id=order_id, call=CONFIG.fraud_calls)
        raise tether.TransientToolError(
            "check_fraud_score", "the fraud-scoring service answered 503", status_code=503
        )
    return 7


async def _refund(order_id: str, amount_cents: int, key: str) -> Refund:
    client = PaymentsClient(CONFIG.payments_url, timeout=5.0)
    refund = msgspec.convert(await client.refund(order_id, amount_cents, key), Refund)
    emit(
        "refunded",
        order_id=order_id,
        amount_cents=amount_cents,
        refund_id=refund.refund_id,
        replayed=refund.replayed,
        key=key,
    )
    return refund


@tether.tool(recovery="retry", retry=QUICK_RETRY, timeout=10.0)
async def refund(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> Refund:
    """Refund an order through the payments service (which honors the idempotency key)."""
    return await _refund(order_id, amount_cents, idempotency_key)


@tether.tool(recovery="retry", retry=QUICK_RETRY, timeout=10.0, requires_approval=True)
async def big_refund(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> Refund:
    """Refund a large amount: held until a person approves it."""
    return await _refund(order_id, amount_cents, idempotency_key)


# -- the model ------------------------------------------------------------------------------

_ORDER_ID = re.compile(r"\b[A-Z]-\d{4}\b")


def _task(request: tether.ModelRequest) -> tuple[str, list[ToolCallRecord]]:
    """The order the current task is about, and the tool calls made for it so far."""
    history = request.bundle.history
    starts = [i for i, m in enumerate(history) if isinstance(m, ChatMessage) and m.role == "user"]
    start = starts[-1] if starts else 0
    first = history[start] if starts else None
    text = first.text if isinstance(first, ChatMessage) else ""
    found = _ORDER_ID.search(text)
    calls = [item for item in history[start:] if isinstance(item, ToolCallRecord)]
    return (found.group(0) if found else ""), calls


def decide(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """The refund agent's model: each decision follows from what the session has seen."""
    order_id, calls = _task(request)
    if not order_id:
        return tether.FinalAnswer(text="Which order should I refund? I need its number.")
    last = calls[-1] if calls else None
    if last is None:
        return tether.ToolCall(
            tool="lookup_order", args={"order_id": order_id}, thought="Find the order first."
        )
    if last.tool == "lookup_order":
        if last.error:
            return tether.FinalAnswer(text=f"I could not find order {order_id}.")
        return tether.ToolCall(
            tool="check_fraud_score", args={"order_id": order_id}, thought="Check fraud risk."
        )
    if last.tool == "check_fraud_score":
        order = msgspec.json.decode(_result(calls, "lookup_order"), type=Order)
        if last.error:
            emit("fraud_skipped", session=request.session_id, reason=last.error)
            thought = "The fraud check is unavailable; the constraints say to go on without it."
        else:
            score = int(last.result or "0")
            if score >= 80:
                return tether.FinalAnswer(text=f"Order {order_id} looks fraudulent ({score}).")
            thought = f"Fraud score {score}: low risk."
        tool = "big_refund" if order.amount_cents > APPROVAL_LIMIT else "refund"
        return tether.ToolCall(
            tool=tool,
            args={"order_id": order_id, "amount_cents": order.amount_cents},
            thought=f"{thought} Refund {money(order.amount_cents)} with {tool}.",
        )
    if last.tool in ("refund", "big_refund"):
        if last.error:
            return tether.FinalAnswer(text=f"The refund of {order_id} was not made: {last.error}")
        done = msgspec.json.decode(last.result or "{}", type=Refund)
        return tether.FinalAnswer(
            text=f"Refunded {money(done.amount_cents)} for order {order_id} ({done.refund_id})."
        )
    return tether.FinalAnswer(text=f"I stopped: I did not expect a call to {last.tool}.")


def _result(calls: Sequence[ToolCallRecord], tool: str) -> str:
    return next((c.result or "{}") for c in reversed(calls) if c.tool == tool)


class RefundAgent(tether.AgentSession):
    """One customer's refund session."""

    tools = (lookup_order, check_fraud_score, refund, big_refund)
    model = ScriptedModel(decide)


# -- the kill -------------------------------------------------------------------------------


def killing(store: Store, *, victim: str) -> Store:
    """``store``, made to SIGKILL its own process right before committing the batch that holds
    the receipt of ``victim``'s refund: the payments service has made the refund, the store
    will never know it did. (A tool with ``recovery="retry"`` has its receipt committed with
    the step, so this is also the step's commit.) Any backend: SQLite or PostgreSQL."""
    commit = store.apply

    async def apply(batch: Batch) -> BatchResult:
        for w in batch.effects:
            rec = w.record
            if rec.actor_id == victim and rec.tool == "refund" and rec.status == "done":
                emit("dying", session=victim, key=rec.key, pid=os.getpid())
                os.kill(os.getpid(), signal.SIGKILL)
        return await commit(batch)

    store.apply = apply  # type: ignore[method-assign]  # this instance only
    return store


# -- the worker -----------------------------------------------------------------------------

ASK_TIMEOUT = 30.0


async def work(db: str, kill: bool) -> None:
    """Open the store, (re)spawn a session per customer, send each its request (with a dedup
    key, so a second worker re-sending them starts nothing new) and report what happens."""
    store = tether.open_store(db)
    if kill:
        store = killing(store, victim=VICTIM)
    async with tether.Runtime(store=store, poll_interval=0.05) as rt:
        for c in CUSTOMERS:
            await rt.spawn(RefundAgent, c.session, goal=GOAL, constraints=CONSTRAINTS)
        emit("ready", pid=os.getpid(), sessions=[c.session for c in CUSTOMERS])
        answers: dict[str, str] = {}
        reported: set[str] = set()
        breaker_shown = False
        async with anyio.create_task_group() as tg:
            for c in CUSTOMERS:  # one customer at a time, so that the story reads in order
                done = anyio.Event()
                tg.start_soon(_ask, rt, c, answers, done)
                while not done.is_set():  # until it answers, or waits for a person
                    if await _report_held(rt, c.session, reported):
                        break
                    with anyio.move_on_after(0.05):
                        await done.wait()
                if not breaker_shown:
                    breaker_shown = await _report_breaker(rt)
            waiting = [c.session for c in CUSTOMERS if c.session not in answers]
            if waiting:
                emit("waiting", sessions=waiting)
        emit("finished", answered=sorted(answers))


async def _ask(rt: tether.Runtime, c: Customer, answers: dict[str, str], done: anyio.Event) -> None:
    try:
        result = await rt.ref(c.session).ask(
            tether.UserMessage(c.request), timeout=ASK_TIMEOUT, dedup_key=dedup_key(c)
        )
    except tether.TaskFailed as exc:  # its last word, and why the task did not finish
        result = exc.result
    finally:
        done.set()
    answers[c.session] = result.answer
    emit("answer", session=c.session, text=result.answer, status=result.status)


async def _report_held(rt: tether.Runtime, session: str, reported: set[str]) -> bool:
    held = await rt.approvals.pending(session)
    for request in held:
        if request.request_id not in reported:
            reported.add(request.request_id)
            emit(
                "held",
                session=session,
                request_id=request.request_id,
                tool=request.tool,
                args=request.args,
                reason=request.reason,
            )
    return bool(held)


async def _report_breaker(rt: tether.Runtime) -> bool:
    """Report the fraud check's breaker as ``rt.tree()`` shows it, once it is open."""
    for root in await rt.tree():
        node = root.find(FRAUD_BREAKER)
        if node is not None and node.detail and not node.detail.startswith("closed"):
            emit("breaker", detail=node.detail)
            return True
    return False


def _quiet_logs(path: str) -> TextIO:
    """tether's logs, warnings and up, as JSON lines in ``path`` (stdout carries the story)."""
    log = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's lifetime
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(log),
    )
    return log


def main(argv: Sequence[str] | None = None) -> None:
    """``python -c 'from tether.demo_agent import main; main()' DB PAYMENTS_URL LOG [--kill]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    kill = "--kill" in args
    db, url, log = [a for a in args if a != "--kill"]
    _quiet_logs(log)
    CONFIG.payments_url = url
    CONFIG.out = sys.stdout
    anyio.run(work, db, kill)
