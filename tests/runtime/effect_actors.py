"""Tools and actors for the effects-ledger tests (module level: the runtime imports them)."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec

import tether

# Every call any tool below receives, in order: (tool, kwargs). Tests reset it.
CALLS: list[tuple[str, dict[str, Any]]] = []
# Per-tool scripted failures: tool name -> list of exceptions to raise on successive calls
# (None = succeed). Consumed from the front.
SCRIPT: dict[str, list[BaseException | None]] = {}
# Reconcile verdicts handed out by `check_refund`, consumed from the front.
VERDICTS: list[tether.Done | tether.NotDone | tether.Unknown] = []


def reset() -> None:
    RETURNS.clear()
    CALLS.clear()
    SCRIPT.clear()
    VERDICTS.clear()


async def _scripted(name: str, kwargs: dict[str, Any]) -> None:
    CALLS.append((name, dict(kwargs)))
    plan = SCRIPT.get(name)
    if plan:
        failure = plan.pop(0)
        if isinstance(failure, _Hang):
            await anyio.sleep_forever()
        if failure is not None:
            raise failure


class _Hang(Exception):
    """Scripted: the call never returns (so its timeout fires)."""


HANG = _Hang()


class Receipt(msgspec.Struct, frozen=True):
    order_id: str
    amount_cents: int
    key: str


@tether.tool(recovery="retry", retry=tether.RetryPolicy(max_attempts=3, initial_delay=0))
async def refund(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> Receipt:
    """Refund an order (honors idempotency keys)."""
    await _scripted(
        "refund", {"order_id": order_id, "amount_cents": amount_cents, "key": idempotency_key}
    )
    return Receipt(order_id=order_id, amount_cents=amount_cents, key=idempotency_key)


@tether.tool(timeout=0.2, retry=tether.RetryPolicy(max_attempts=2, initial_delay=0))
async def send_email(to: str, body: str) -> str:
    """Send an email (ignores keys: quarantined when ambiguous)."""
    await _scripted("send_email", {"to": to, "body": body})
    return f"sent to {to}"


RETURNS: dict[str, Any] = {}  # tool name -> what it returns instead of its usual result


@tether.tool(timeout=0.2)
async def post_letter(to: str) -> str:
    """Post a letter (ignores keys): returns RETURNS["post_letter"] when a test sets it."""
    await _scripted("post_letter", {"to": to})
    return RETURNS.get("post_letter", f"posted to {to}")  # type: ignore[no-any-return]


@tether.tool(
    recovery="retry", timeout=0.2, retry=tether.RetryPolicy(max_attempts=3, initial_delay=0)
)
async def charge(account: str, cents: int, idempotency_key: str = tether.RUNTIME_KEY) -> int:
    await _scripted("charge", {"account": account, "cents": cents, "key": idempotency_key})
    return cents


@tether.tool(recovery="reconcile", timeout=0.2)
async def transfer(to: str, cents: int, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    await _scripted("transfer", {"to": to, "cents": cents, "key": idempotency_key})
    return f"transferred {cents} to {to}"


@transfer.reconciler
async def check_transfer(
    to: str, cents: int, idempotency_key: str
) -> tether.Done | tether.NotDone | tether.Unknown:
    CALLS.append(("check_transfer", {"to": to, "key": idempotency_key}))
    return VERDICTS.pop(0) if VERDICTS else tether.Unknown("no verdict scripted")


class Do(tether.Message):
    """Run the named effects in order; fail the handler afterwards if `fail_after`."""

    effects: list[str]
    fail_after: bool = False


class Ping(tether.Message):
    pass


class Done(tether.Event):
    results: list[str]


class LedgerState(msgspec.Struct):
    results: list[list[str]] = msgspec.field(default_factory=list)


# Flips between runs of a step, to make a non-deterministic handler on purpose.
NONDETERMINISTIC: list[int] = [0]


class Agent(tether.Actor[LedgerState]):
    initial_state = LedgerState()
    fail_once: set[str] = set()

    def apply(self, state: LedgerState, event: Done) -> LedgerState:
        return LedgerState(results=[*state.results, event.results])

    async def handle(self, msg: Do | Ping) -> list[str] | str:
        if isinstance(msg, Ping):
            return "pong"
        out: list[str] = []
        for i, name in enumerate(msg.effects):
            out.append(await self._one(name, i))
        if msg.fail_after and self.id not in Agent.fail_once:
            Agent.fail_once.add(self.id)
            raise RuntimeError("handler failed after its effects")
        self.persist(Done(results=out))
        return out

    async def _one(self, name: str, i: int) -> str:
        try:
            match name:
                case "refund":
                    r = await self.effect(refund, order_id=f"o{i}", amount_cents=100 * (i + 1))
                    return f"refund {r.order_id} {r.amount_cents}"
                case "email":
                    return str(await self.effect(send_email, to="a@b.c", body=f"hello {i}"))
                case "letter":
                    return str(await self.effect(post_letter, to="a@b.c"))
                case "charge":
                    return f"charged {await self.effect(charge, account='acc', cents=5)}"
                case "transfer":
                    return str(await self.effect(transfer, to="bob", cents=7))
                case "drift":
                    NONDETERMINISTIC[0] += 1
                    return str(
                        await self.effect(send_email, to="x@y.z", body=str(NONDETERMINISTIC[0]))
                    )
                case "bad":
                    # a wrong type on purpose: refused at run time too (a model's arguments are
                    # not type-checked), with ToolInputError naming the field
                    bad: Any = "ten"
                    return str(await self.effect(refund, order_id="o", amount_cents=bad))
        except tether.EffectAborted as exc:
            return f"aborted: {exc.reason}"
        raise AssertionError(name)


@tether.tool(recovery="retry", requires_approval=True)
async def wire(to: str, cents: int, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    """Wire money (irreversible: always held for a person)."""
    await _scripted("wire", {"to": to, "cents": cents, "key": idempotency_key})
    return f"wired {cents} to {to}"


class Wire(tether.Message):
    to: str
    cents: int


class Wired(tether.Event):
    outcome: str


class Banker(tether.Actor[LedgerState]):
    """Wires money; a rejection's reason is kept as the outcome (what an agent would be told)."""

    initial_state = LedgerState()
    approval_policy = tether.ApprovalPolicy(timeout=3600, approvers_needed=1)

    def apply(self, state: LedgerState, event: Wired) -> LedgerState:
        return LedgerState(results=[*state.results, [event.outcome]])

    async def handle(self, msg: Wire | Ping) -> str:
        if isinstance(msg, Ping):
            return "pong"
        try:
            outcome: str = await self.effect(wire, to=msg.to, cents=msg.cents)
        except tether.ApprovalRejected as exc:
            outcome = f"rejected by {exc.by}: {exc.reason}"
        self.persist(Wired(outcome=outcome))
        return outcome

    def approval_context(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"goal": "pay the supplier", "if_rejected": "tell the supplier to wait"}


class QuorumBanker(Banker):
    approval_policy = tether.ApprovalPolicy(timeout=3600, approvers_needed=2)


class HastyBanker(Banker):
    approval_policy = tether.ApprovalPolicy(timeout=0.3)


class TrustingBanker(Banker):
    approval_policy = tether.ApprovalPolicy(timeout=0.3, on_timeout="approve")


class CarefulBanker(Banker):
    """Escalates big amounts by policy, not by the tool's flag."""

    async def handle(self, msg: Wire | Ping) -> str:
        if isinstance(msg, Ping):
            return "pong"
        outcome: str = await self.effect(plain_wire, to=msg.to, cents=msg.cents)
        self.persist(Wired(outcome=outcome))
        return outcome

    def escalation_reason(self, tool: str, args: dict[str, Any]) -> str | None:
        return "over 1000 cents" if args.get("cents", 0) > 1000 else None


@tether.tool(recovery="retry")
async def plain_wire(to: str, cents: int, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    await _scripted("plain_wire", {"to": to, "cents": cents, "key": idempotency_key})
    return f"wired {cents} to {to}"


class DriftingBanker(Banker):
    """Not deterministic on purpose: asks for a new amount every time the step runs."""

    async def handle(self, msg: Wire | Ping) -> str:
        if isinstance(msg, Ping):
            return "pong"
        NONDETERMINISTIC[0] += 1
        outcome: str = await self.effect(wire, to=msg.to, cents=msg.cents + NONDETERMINISTIC[0])
        self.persist(Wired(outcome=outcome))
        return outcome


class FlakyAfterEffect(tether.Actor[LedgerState]):
    """Sends an email, then fails until BROKEN is cleared: its message ends in dead letters."""

    initial_state = LedgerState()
    broken: list[bool] = [True]

    def apply(self, state: LedgerState, event: Done) -> LedgerState:
        return LedgerState(results=[*state.results, event.results])

    async def handle(self, msg: Do | Ping) -> str:
        if isinstance(msg, Ping):
            return "pong"
        sent: str = await self.effect(send_email, to="c@d.e", body="once")
        if FlakyAfterEffect.broken[0]:
            raise RuntimeError("the handler is broken after its effect")
        self.persist(Done(results=[sent]))
        return sent


class Unprintable(Exception):
    """An error whose message cannot be shown: its str() raises."""

    def __str__(self) -> str:
        raise ValueError("no message")


@tether.tool(breaker=None, retry=tether.RetryPolicy(max_attempts=1))
async def unprintable(to: str) -> str:
    CALLS.append(("unprintable", {"to": to}))
    raise Unprintable


@tether.tool(recovery="reconcile", timeout=0.2, breaker=None)
async def slow_transfer(to: str, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    await _scripted("slow_transfer", {"to": to, "key": idempotency_key})
    return f"transferred to {to}"


@slow_transfer.reconciler
async def check_slow_transfer(to: str, idempotency_key: str) -> tether.Done:
    CALLS.append(("check_slow_transfer", {"to": to}))
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


class Misuse(tether.Message):
    """Run one tool by name (tests of bad input to the effect path)."""

    tool: str


class Misuser(tether.Actor[LedgerState]):
    initial_state = LedgerState()

    def apply(self, state: LedgerState, event: Done) -> LedgerState:
        return LedgerState(results=[*state.results, event.results])

    async def handle(self, msg: Misuse) -> str:
        tools: dict[str, tether.Tool] = {"unprintable": unprintable, "slow_transfer": slow_transfer}
        tool = tools[msg.tool]
        try:
            result = str(await self.effect(tool, to="bob"))
        except tether.ToolFailed as exc:
            result = f"failed: {exc.error}"
        self.persist(Done(results=[result]))
        return result


class NotifiedBanker(Banker):
    """A banker under the runtime's approval policy (its webhooks: the tests' receiver)."""

    approval_policy = None  # type: ignore[assignment]
