"""What type checkers infer for tools and effects; mypy --strict checks this file with the rest
of tests/ (CI), so each ``assert_type`` below is a test. The cases that must fail to type-check
are in ``fail_effects.py``, checked by ``test_typing.py``."""

from __future__ import annotations

from typing import Any, assert_type

import msgspec

import tether


class Receipt(msgspec.Struct, frozen=True):
    order_id: str
    amount_cents: int


@tether.tool(recovery="retry")
async def refund(
    order_id: str, amount_cents: int, idempotency_key: str = tether.RUNTIME_KEY
) -> Receipt:
    return Receipt(order_id=order_id, amount_cents=amount_cents)


@tether.tool
async def lookup(order_id: str) -> dict[str, str]:
    return {"order_id": order_id}


class Go(tether.Message):
    order_id: str


class Agent(tether.Actor[int]):
    initial_state = 0

    async def handle(self, msg: Go) -> int:
        receipt = await self.effect(refund, order_id=msg.order_id, amount_cents=100)
        assert_type(receipt, Receipt)  # the tool's result type, not Any
        assert_type(await self.effect(refund, msg.order_id, 100), Receipt)  # by position
        assert_type(await self.effect(lookup, order_id="7"), dict[str, str])
        # a bare Tool (a list of tools, a tool chosen by the model's answer) takes anything
        chosen: tether.Tool = lookup
        assert_type(await self.effect(chosen, order_id="7", whatever=1), Any)
        return receipt.amount_cents


async def direct() -> None:
    # a direct call (tests) is typed like the function; the key is filled in when left out
    assert_type(await refund(order_id="1", amount_cents=5), Receipt)
