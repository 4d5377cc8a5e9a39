"""Child programs for the effects-ledger crash tests (I4, I5): agents refunding orders through
the fake payments service, SIGKILLed between intent, call, receipt and step.

Run as ``python -m tests.chaos.effect_programs refunds DB URL PAYDB CALLS PREFIX POLICY KILL
RESOLVE`` from the repository root:

* ``DB``: the agents' tether store; ``URL``/``PAYDB``: the payments service and its SQLite file;
* ``CALLS``: an append-only JSON-lines file where every tool call (and reconcile hook) records
  its order, key and pid *before* it talks to the service: what the agents sent, whatever died;
* ``PREFIX``: names the three sessions ``PREFIX-s0..2`` and their orders ``PREFIX-o0..2``;
  session 1 is the victim of the kill;
* ``POLICY``: ``retry``, ``quarantine`` or ``reconcile``: which refund tool the agents use;
* ``KILL``: where the first run dies: ``after-intent`` (a), ``during-call`` (b: the test kills
  this process while the service holds its answer), ``before-receipt`` (c), ``before-step``
  (d); ``none`` is a clean (re)start, which sends the three refunds again (same dedup keys)
  and sees them through;
* ``RESOLVE``: in a clean run, what to do with a quarantined effect: ``retry``, ``mark-done``
  (with the refund found in the service's own file), ``wait`` (for another process to resolve
  it), ``die`` (SIGKILL this process while the step is parked) or ``none`` (stop waiting).

The kills (a), (c) and (d) are exact: :class:`KillingStore` SIGKILLs its own process right
after the intent's batch is applied, or right before the receipt's (or the step's) batch is.
Sessions are refunded one after the other, victim last, so the service numbers the calls
predictably (the test delays the victim's call by its number).

Like ``tests.chaos.programs``, the actors live at module level and the ``__main__`` guard
re-imports this file under its real name, so stored class paths can be imported again.
Progress goes to stdout as ``key=value`` lines; tether's logs go to stderr as JSON lines.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

import tether
from tests.chaos.programs import LEASE_TTL, POLL, append_line, configure_logging, report
from tether.store.records import Batch, BatchResult
from tether.testing.payments import PaymentsClient, refund_count, refunds

SESSIONS = 3
VICTIM = 1  # the session whose refund is caught by the kill
ORDER = (0, 2, 1)  # refund order in every run: the victim's call is always the last one
CALL_TIMEOUT = 5.0  # the HTTP client's and the tool's; longer than nothing the tests wait for
ASK_TIMEOUT = 20.0
KILL_POINTS = ("after-intent", "during-call", "before-receipt", "before-step")
RETRY = tether.RetryPolicy(max_attempts=3, initial_delay=0.05, max_delay=0.2)


class _Config:
    """Set by the program from its arguments: where the tools find the service."""

    url = ""
    calls_log = ""


CONFIG = _Config()


def session(prefix: str, i: int) -> str:
    return f"{prefix}-s{i}"


def order(prefix: str, i: int) -> str:
    return f"{prefix}-o{i}"


def amount(i: int) -> int:
    return 100 * (i + 1)


# -- the tools: one per recovery policy, all refunding through the service -------------------


class Refund(msgspec.Struct, frozen=True):
    refund_id: str
    order_id: str
    amount_cents: int
    replayed: bool = False


async def _refund(tool: str, order_id: str, amount_cents: int, key: str) -> Refund:
    append_line(
        CONFIG.calls_log, {"tool": tool, "order_id": order_id, "key": key, "pid": os.getpid()}
    )
    client = PaymentsClient(CONFIG.url, timeout=CALL_TIMEOUT)
    answer = await client.refund(order_id, amount_cents, idempotency_key=key)
    return msgspec.convert(answer, Refund)


@tether.tool(recovery="retry", timeout=CALL_TIMEOUT, retry=RETRY)
async def refund_retry(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> Refund:
    """Refund an order; the service is trusted to honor the key, so ambiguity is retried."""
    return await _refund("refund_retry", order_id, amount_cents, idempotency_key)


@tether.tool(timeout=CALL_TIMEOUT, retry=RETRY)  # recovery="quarantine", the default
async def refund_quarantine(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> Refund:
    """Refund an order; an ambiguous call is held for a person."""
    return await _refund("refund_quarantine", order_id, amount_cents, idempotency_key)


@tether.tool(recovery="reconcile", timeout=CALL_TIMEOUT, retry=RETRY)
async def refund_reconcile(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> Refund:
    """Refund an order; an ambiguous call is settled by asking the service."""
    return await _refund("refund_reconcile", order_id, amount_cents, idempotency_key)


@refund_reconcile.reconciler
async def refund_was_made(
    order_id: str, amount_cents: int, idempotency_key: str
) -> tether.Done | tether.NotDone | tether.Unknown:
    """Ask the service which refunds it holds for the order: none means not done."""
    append_line(
        CONFIG.calls_log,
        {"tool": "reconcile", "order_id": order_id, "key": idempotency_key, "pid": os.getpid()},
    )
    found = [
        r
        for r in await PaymentsClient(CONFIG.url, timeout=CALL_TIMEOUT).refunds()
        if r["order_id"] == order_id
    ]
    if not found:
        return tether.NotDone()
    if len(found) > 1:
        return tether.Unknown(f"{len(found)} refunds for {order_id}")
    first = found[0]
    return tether.Done(Refund(first["refund_id"], order_id, first["amount_cents"], replayed=True))


TOOLS = {"retry": refund_retry, "quarantine": refund_quarantine, "reconcile": refund_reconcile}


# -- the agent --------------------------------------------------------------------------------


class RefundOrder(tether.Message):
    order_id: str
    amount_cents: int
    policy: str


class GetRefunds(tether.Message):
    pass


class Refunded(tether.Event):
    order_id: str
    refund_id: str


class ShopState(msgspec.Struct):
    refunds: dict[str, str] = msgspec.field(default_factory=dict)  # order id -> refund id


class Shop(tether.Actor[ShopState]):
    """One customer session: refunds an order through the ledger and remembers the refund."""

    initial_state = ShopState()

    def apply(self, state: ShopState, event: Refunded) -> ShopState:
        return ShopState(refunds={**state.refunds, event.order_id: event.refund_id})

    async def handle(self, msg: RefundOrder | GetRefunds) -> dict[str, Any]:
        match msg:
            case RefundOrder(order_id=order_id, amount_cents=cents, policy=policy):
                refund: Refund = await self.effect(
                    TOOLS[policy], order_id=order_id, amount_cents=cents
                )
                self.persist(Refunded(order_id=refund.order_id, refund_id=refund.refund_id))
                return msgspec.to_builtins(refund)  # type: ignore[no-any-return]
            case GetRefunds():
                return dict(self.state.refunds)
        raise AssertionError(msg)  # pragma: no cover


# -- the exact kill points --------------------------------------------------------------------


def die(point: str) -> None:
    report(f"dying={point}")
    os.kill(os.getpid(), signal.SIGKILL)


class KillingStore(tether.SqliteStore):
    """A store that SIGKILLs its own process at one point of the victim's effect:

    * ``after-intent``: right after the batch holding its intent (status pending) is applied;
    * ``before-receipt``: right before the batch holding its receipt (status done) is applied;
    * ``before-step``: right before the batch holding the step of the message whose receipt was
      committed is applied — or, for a tool whose receipt rides with the step (recovery
      "retry"), right before the batch holding both.
    """

    def __init__(self, path: str, *, point: str, victim: str) -> None:
        super().__init__(path)
        self.point = point
        self.victim = victim
        self.receipt_of: str | None = None  # msg id of the victim's committed receipt

    def _effects(self, batch: Batch, status: str) -> list[str]:
        return [
            w.record.msg_id
            for w in batch.effects
            if w.record.actor_id == self.victim and w.record.status == status
        ]

    async def apply(self, batch: Batch) -> BatchResult:
        receipts = self._effects(batch, "done")
        if self.point == "before-receipt" and receipts:
            die(self.point)
        if self.point == "before-step" and any(
            s.actor_id == self.victim and s.msg_id in (self.receipt_of, *receipts)
            for s in batch.steps
        ):
            die(self.point)
        result = await super().apply(batch)
        if self.point == "after-intent" and self._effects(batch, "pending"):
            die(self.point)
        if receipts and self.victim not in result.stale:
            self.receipt_of = receipts[0]
        return result


# -- the program ------------------------------------------------------------------------------


async def refunds_program(
    db: str,
    url: str,
    paydb: str,
    calls_log: str,
    prefix: str,
    policy: str,
    kill: str,
    resolve: str,
) -> None:
    CONFIG.url, CONFIG.calls_log = url, calls_log
    if policy not in TOOLS or kill not in (*KILL_POINTS, "none"):
        raise SystemExit(f"bad policy {policy!r} or kill point {kill!r}")
    victim = session(prefix, VICTIM)
    store = (
        KillingStore(db, point=kill, victim=victim)
        if kill in ("after-intent", "before-receipt", "before-step")
        else tether.SqliteStore(db)
    )
    async with tether.Runtime(db, store=store, lease_ttl=LEASE_TTL, poll_interval=POLL) as rt:
        refs = [await rt.spawn(Shop, session(prefix, i)) for i in range(SESSIONS)]
        report("ready")
        replies: dict[str, Any] = {}

        async def refund(i: int) -> None:
            msg = RefundOrder(order_id=order(prefix, i), amount_cents=amount(i), policy=policy)
            replies[order(prefix, i)] = await refs[i].ask(
                msg, timeout=ASK_TIMEOUT, dedup_key=f"refund-{order(prefix, i)}"
            )
            report(f"refunded {order(prefix, i)}")

        if kill != "none":  # the first run: dies during the victim's refund
            for i in ORDER:
                if i == VICTIM:
                    report("victim")
                await refund(i)
            report("survived")  # the kill point was never reached: the test fails on this
            return

        seen: set[str] = set()  # keys of the quarantined effects reported
        with anyio.fail_after(ASK_TIMEOUT):
            async with anyio.create_task_group() as tg:
                done = anyio.Event()

                async def refund_all() -> None:
                    for i in ORDER:
                        await refund(i)
                    done.set()

                tg.start_soon(refund_all)
                # Meanwhile: resolve what the recovery quarantined, as a person would.
                while not done.is_set():
                    held = [h for h in await rt.quarantine.list() if h.key not in seen]
                    if not held:
                        await anyio.sleep(0.02)
                        continue
                    seen.update(h.key for h in held)
                    report(f"quarantined={json.dumps([msgspec.to_builtins(h) for h in held])}")
                    report(f"count_when_quarantined={refund_count(paydb, order(prefix, VICTIM))}")
                    if resolve == "none":
                        tg.cancel_scope.cancel()
                        break
                    if resolve == "die":
                        die("parked")
                    for h in held:
                        if resolve != "wait":  # wait: someone else resolves it
                            await _resolve(rt, h, resolve, paydb)
        report(f"replies={json.dumps(replies)}")
        states = {ref.id: await ref.ask(GetRefunds(), timeout=ASK_TIMEOUT) for ref in refs}
        report(f"states={json.dumps(states)}")
        fields = ("msg_id", "key", "tool", "status", "attempts", "history")
        ledger = {
            ref.id: [
                {k: getattr(r, k) for k in fields}
                for r in await rt.store.find_effects(actor_id=ref.id)
            ]
            for ref in refs
        }
        report(f"ledger={json.dumps(ledger)}")
        report(f"quarantined_after={len(await rt.quarantine.list())}")
        report("finished")


async def _resolve(rt: tether.Runtime, held: Any, how: str, paydb: str) -> None:
    if how == "retry":
        await rt.quarantine.retry(held.key, by="chaos-test")
    elif how == "mark-done":
        # What a person would do: look the refund up in the payments service and record it.
        [found] = [r for r in refunds(paydb) if r["order_id"] == held.args["order_id"]]
        result = Refund(found["refund_id"], found["order_id"], found["amount_cents"])
        await rt.quarantine.mark_done(held.key, result, by="chaos-test")
    else:
        raise SystemExit(f"bad resolution {how!r}")
    report(f"resolved={how}")


PROGRAMS: dict[str, Callable[..., Awaitable[None]]] = {"refunds": refunds_program}


def main(argv: list[str]) -> None:
    configure_logging()
    scenario, *args = argv
    anyio.run(PROGRAMS[scenario], *args)


if __name__ == "__main__":
    from tests.chaos import effect_programs  # the same code, under the name recovery imports

    effect_programs.main(sys.argv[1:])
