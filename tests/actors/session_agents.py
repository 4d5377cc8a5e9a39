"""Agents, tools and models for the session tests (module level: the runtime imports them)."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec

import tether
from tether.actors.context import ChatMessage, ToolCallRecord
from tether.testing import ScriptedModel

LOG: list[tuple[str, Any]] = []


class Order(msgspec.Struct, frozen=True):
    order_id: str
    amount_cents: int
    status: str


ORDERS = {"42": Order("42", 1500, "delivered"), "43": Order("43", 90_000, "delivered")}


@tether.tool(recovery="retry", breaker="database")
async def lookup_order(order_id: str) -> Order:
    """Look an order up by id."""
    LOG.append(("lookup_order", order_id))
    if order_id not in ORDERS:
        raise KeyError(f"no order {order_id}")
    return ORDERS[order_id]


@tether.tool(recovery="retry")
async def refund(order_id: str, amount_cents: int, idempotency_key: str) -> str:
    """Refund an order (the payments service honors the key)."""
    LOG.append(("refund", (order_id, amount_cents, idempotency_key)))
    return f"refunded {amount_cents} on {order_id}"


@tether.tool(recovery="retry", requires_approval=True)
async def big_refund(order_id: str, amount_cents: int, idempotency_key: str) -> str:
    """Refund a large amount: a person must approve."""
    LOG.append(("big_refund", (order_id, amount_cents)))
    return f"refunded {amount_cents} on {order_id} (approved)"


def refund_script(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """A model that looks the order up, refunds it, and reports — decided from what it sees."""
    history = request.bundle.tool_results
    users = [m.text for m in request.bundle.messages if m.role == "user"]
    task = users[-1] if users else ""
    order_id = task.rsplit(" ", 1)[-1]
    if not history or history[-1].tool not in ("lookup_order", "refund", "big_refund"):
        return tether.ToolCall(tool="lookup_order", args={"order_id": order_id}, thought="find it")
    last = history[-1]
    if last.tool == "lookup_order":
        if last.error:
            return tether.FinalAnswer(text=f"I could not find order {order_id}.")
        order = msgspec.json.decode(last.result or "{}")
        tool = "big_refund" if order["amount_cents"] > 10_000 else "refund"
        return tether.ToolCall(
            tool=tool,
            args={"order_id": order_id, "amount_cents": order["amount_cents"]},
            thought=f"order {order_id} is delivered; refund {order['amount_cents']}",
        )
    if last.error:
        return tether.FinalAnswer(text=f"The refund of {order_id} was not made: {last.error}")
    return tether.FinalAnswer(text=f"Done: {last.result}.")


class RefundAgent(tether.AgentSession):
    tools = [lookup_order, refund, big_refund]
    model = ScriptedModel(refund_script)


async def first_pending(rt: tether.Runtime, timeout: float = 30) -> tether.ApprovalRequest:
    """The first approval request pending on ``rt``'s store, once there is one."""
    with anyio.fail_after(timeout):
        while not (pending := await rt.approvals.pending()):
            await anyio.sleep(0.01)
    return pending[0]


def two_refunds_script(request: tether.ModelRequest) -> tether.ToolCalls | tether.FinalAnswer:
    """One answer refunding orders 42 and 43 (two calls, each held for a person), then the
    final answer: what each call returned, as the model was told."""
    done = request.bundle.tool_results
    if not done:
        return tether.ToolCalls(
            calls=(
                tether.ToolCall(
                    tool="big_refund", args={"order_id": "42", "amount_cents": 7250}, call_id="c42"
                ),
                tether.ToolCall(
                    tool="big_refund",
                    args={"order_id": "43", "amount_cents": 90_000},
                    call_id="c43",
                ),
            ),
            thought="refund both orders in full",
        )
    return tether.FinalAnswer(text=" | ".join(r.result or r.error or "" for r in done))


TWO_REFUNDS = ScriptedModel(two_refunds_script)


class TwoRefundsAgent(tether.AgentSession):
    tools = [big_refund]
    model = TWO_REFUNDS


def refund_43_script(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """Each task: refund order 43 in full (a person must approve), then say how it went."""
    history = request.bundle.history
    asked = max(i for i, h in enumerate(history) if isinstance(h, ChatMessage) and h.role == "user")
    done = [h for h in history[asked:] if isinstance(h, ToolCallRecord)]
    if not done:
        return tether.ToolCall(tool="big_refund", args={"order_id": "43", "amount_cents": 90_000})
    return tether.FinalAnswer(text=f"Done: {done[-1].result or done[-1].error}.")


class Refund43Agent(tether.AgentSession):
    tools = [big_refund]
    model = ScriptedModel(refund_43_script)


SCRIPTED = ScriptedModel(
    [
        tether.ToolCall(tool="lookup_order", args={"order_id": 42}),  # wrong type: corrected
        tether.ToolCall(tool="lookup_order", args={"order_id": "42"}),
        tether.FinalAnswer(text="order 42 is delivered"),
    ]
)


class ScriptedAgent(tether.AgentSession):
    tools = [lookup_order, refund]
    model = SCRIPTED


class StubbornAgent(tether.AgentSession):
    """Calls a tool with bad arguments again and again: escalated after one correction."""

    tools = [lookup_order]
    model = ScriptedModel(lambda r: tether.ToolCall(tool="lookup_order", args={"id": "42"}))


class LoopingAgent(tether.AgentSession):
    """Looks the same order up forever: the loop detector steps in."""

    tools = [lookup_order]
    model = ScriptedModel(lambda r: tether.ToolCall(tool="lookup_order", args={"order_id": "42"}))
    loop_policy = tether.LoopPolicy(repeat=3, on_repeat="stop")


class SlowAgent(tether.AgentSession):
    """Never finishes on its own (for cancellation)."""

    tools = [lookup_order]
    max_steps = 1000
    loop_policy = None
    model = ScriptedModel(
        lambda r: tether.ToolCall(tool="lookup_order", args={"order_id": str(r.step % 2 + 42)})
    )


def look_then_answer(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """One lookup per task, then the answer: four history entries a task (the user's message,
    the call's thought, the tool call, the answer)."""
    last = request.bundle.history[-1]
    if isinstance(last, ChatMessage) and last.role == "user":
        order_id = last.text.rsplit(" ", 1)[-1]
        return tether.ToolCall(tool="lookup_order", args={"order_id": order_id}, thought="look")
    assert isinstance(last, ToolCallRecord)
    return tether.FinalAnswer(text=f"found: {last.result}")


class ShortMemoryAgent(tether.AgentSession):
    """Keeps only its five newest history entries."""

    tools = [lookup_order]
    model = ScriptedModel(look_then_answer)
    max_history = 5
    loop_policy = None  # its tasks look the same two orders up, over and over, on purpose


class ForgetfulLoopingAgent(tether.AgentSession):
    """Keeps two history entries, and repeats a lookup until the loop detector resets its
    context: three calls are made, and the history holds only the last one when it resets."""

    tools = [lookup_order]
    max_history = 2
    loop_policy = tether.LoopPolicy(repeat=3, on_repeat="reset")
    model = ScriptedModel(
        [
            tether.ToolCall(tool="lookup_order", args={"order_id": "43"}),
            *[tether.ToolCall(tool="lookup_order", args={"order_id": "42"})] * 3,
            tether.FinalAnswer(text="order 42 is delivered"),
        ]
    )


class ModelessAgent(tether.AgentSession):
    """Sets no model (a base class might): spawning it must be refused."""

    tools = [lookup_order]


COUNTER_BROKEN = [False]


def breakable_counter(text: str) -> int:
    """The default token counter, until a test breaks it: then every step of a session using
    it fails before its model call (the step's message ends in the dead letters)."""
    if COUNTER_BROKEN[0]:
        raise RuntimeError("the token counter is broken")
    return len(text) // 4 + 1


class BreakableAgent(tether.AgentSession):
    """Answers from one lookup; its steps fail while COUNTER_BROKEN is set."""

    tools = [lookup_order]
    model = ScriptedModel(look_then_answer)
    count_tokens = staticmethod(breakable_counter)


# -- a step that waits on a slow tool --------------------------------------------------------------

SLOW_CALLS: list[str] = []  # each call of a slow tool, by tool name, when it starts
SLOW_VERDICTS: list[tether.Done | tether.NotDone | tether.Unknown] = []


async def _wait_for_ever(name: str) -> str:
    SLOW_CALLS.append(name)
    await anyio.sleep_forever()
    return "never"


@tether.tool(recovery="retry", timeout=None)
async def slow_retry(order_id: str, idempotency_key: str) -> str:
    """A call that never returns, to a receiver that honors keys."""
    return await _wait_for_ever("slow_retry")


@tether.tool(timeout=None)  # recovery="quarantine", the default
async def slow_quarantine(order_id: str) -> str:
    """A call that never returns, with an unknown side effect."""
    return await _wait_for_ever("slow_quarantine")


@tether.tool(recovery="reconcile", timeout=None)
async def slow_reconcile(order_id: str, idempotency_key: str) -> str:
    """A call that never returns; a reconcile hook can tell whether it happened."""
    return await _wait_for_ever("slow_reconcile")


@slow_reconcile.reconciler
async def _check_slow(
    order_id: str, idempotency_key: str
) -> tether.Done | tether.NotDone | tether.Unknown:
    return SLOW_VERDICTS.pop(0) if SLOW_VERDICTS else tether.Unknown("no verdict scripted")


def call_the_slow_tool(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """The task's text names the tool; one call, then the answer."""
    if request.bundle.tool_results:
        return tether.FinalAnswer(text=f"got: {request.bundle.tool_results[-1].result}")
    users = [m.text for m in request.bundle.messages if m.role == "user"]
    return tether.ToolCall(tool=users[-1], args={"order_id": "42"})


class WaitingAgent(tether.AgentSession):
    tools = [slow_retry, slow_quarantine, slow_reconcile]
    model = ScriptedModel(call_the_slow_tool)


def repeat_until_reset(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    """Looks the same order up until the loop detector resets the context, then answers."""
    if request.bundle.summary is not None:
        return tether.FinalAnswer(text=f"answered from the summary: {request.bundle.summary.text}")
    return tether.ToolCall(tool="lookup_order", args={"order_id": "42"})


class CrampedAgent(tether.AgentSession):
    """Resets its context on a repeat, under a budget that a long task's text nearly fills
    (the reset summary repeats the task's text)."""

    tools = [lookup_order]
    context_budget = 300
    loop_policy = tether.LoopPolicy(repeat=3, on_repeat="reset")
    model = ScriptedModel(repeat_until_reset)


LONG_TASK = "check " * 170 + "order 42"  # its checkpoint fits the budget; with a summary, not


class ParallelAgent(tether.AgentSession):
    """Answers with three calls at once, then with its final answer."""

    tools = [lookup_order]
    loop_policy = None
    model = ScriptedModel(
        [
            tether.ToolCalls(
                calls=(
                    tether.ToolCall(tool="lookup_order", args={"order_id": "43"}, call_id="c1"),
                    tether.ToolCall(tool="lookup_order", args={"order_id": "404"}, call_id="c2"),
                    tether.ToolCall(tool="lookup_order", args={"order_id": "42"}, call_id="c3"),
                ),
                thought="all three",
            ),
            tether.FinalAnswer(text="looked them up"),
        ]
    )


class ResetMidAnswerAgent(tether.AgentSession):
    """Repeats a call inside one answer: the loop policy resets the context at the repeat, and
    the answer's last call, planned on the context just dropped, is not made."""

    tools = [lookup_order]
    loop_policy = tether.LoopPolicy(
        repeat=2, on_repeat="reset", cycle_period=None, window=None, no_progress=None
    )
    model = ScriptedModel(
        [
            tether.ToolCalls(
                calls=(
                    tether.ToolCall(tool="lookup_order", args={"order_id": "42"}),
                    tether.ToolCall(tool="lookup_order", args={"order_id": "42"}),
                    tether.ToolCall(tool="lookup_order", args={"order_id": "43"}),
                )
            ),
            tether.FinalAnswer(text="started over"),
        ]
    )


class QuietAgent(tether.AgentSession):
    """Calls a tool without saying anything, then answers."""

    tools = [lookup_order]
    model = ScriptedModel(
        [
            tether.ToolCall(tool="lookup_order", args={"order_id": "42"}),
            tether.FinalAnswer(text="done"),
        ]
    )
