"""Calls that must not type-check, with what mypy says (``# E:`` errors, ``# N:`` notes).
``test_typing.py`` runs mypy --strict on this file and compares; the CI's mypy run over tests/
leaves it out (pyproject ``[tool.mypy] exclude``), since it fails on purpose, and ruff format
leaves its lines whole, since each line's comment says what mypy reports on that line."""

from __future__ import annotations

from typing import reveal_type

import tether
from tests.typing.typed_effects import Go, Receipt, lookup, refund

reveal_type(refund)  # N: Revealed type is "tether.actors.tool.Tool[[order_id: str, amount_cents: int, idempotency_key: str =], tests.typing.typed_effects.Receipt]"


class Agent(tether.Actor[int]):
    initial_state = 0

    async def handle(self, msg: Go) -> int:
        reveal_type(await self.effect(refund, order_id="1", amount_cents=1))  # N: Revealed type is "tests.typing.typed_effects.Receipt"
        await self.effect(refund, order_id="1", amount_cents="100")  # E: Argument "amount_cents" to "effect" of "Actor" has incompatible type "str"; expected "int"  [arg-type]
        await self.effect(refund, order="1", amount_cents=1)  # E: Unexpected keyword argument "order" for "effect" of "Actor"; did you mean "order_id"?  [call-arg]  # N: "effect" defined in "tether.actors.actor"
        await self.effect(refund, order_id="1")  # E: Missing positional argument "amount_cents" in call to "effect" of "Actor"  [call-arg]
        wrong: str = await self.effect(lookup, order_id="1")  # E: Argument 1 to "effect" of "Actor" has incompatible type "Tool[[str], dict[str, str]]"; expected "Tool[[str], str]"  [arg-type]
        receipt: Receipt = await self.effect(refund, order_id="1", amount_cents=1)
        return receipt.amount_cents + len(wrong)
