"""A case the SQL stores share: the effects ledger is keyed by (msg_id, idx), unique per
store. Were two actors' effects ever to share one slot, the second write is refused with its
whole batch, never recorded over the first actor's row. (The memory store does not refuse it:
not a case of the conformance suite.)"""

from __future__ import annotations

import pytest

from tether.errors import StoreError
from tether.store.protocol import Store
from tether.store.records import Batch, EffectWrite
from tether.testing.conformance.support import effect, owned


async def refuses_another_actors_slot(store: Store) -> None:
    fa, fb = await owned(store, "a"), await owned(store, "b")
    await store.apply(Batch(effects=[EffectWrite(fa, effect("m1", 0, actor_id="a"))]))
    clash = effect("m1", 0, actor_id="b", status="done", result=b"\x01")
    other = effect("m2", 0, actor_id="b")
    with pytest.raises(StoreError, match="already held by another actor's effect"):
        await store.apply(Batch(effects=[EffectWrite(fb, other), EffectWrite(fb, clash)]))
    assert await store.effects_of("a", "m1") == [effect("m1", 0, actor_id="a")]
    assert await store.effects_of("b", "m1") == []
    assert await store.effects_of("b", "m2") == []  # rolled back with the batch
    # Two actors' writes of one new slot in one batch: the second is refused there too.
    first = effect("m3", 0, actor_id="a")
    with pytest.raises(StoreError, match="already held by another actor's effect"):
        await store.apply(
            Batch(
                effects=[
                    EffectWrite(fa, first),
                    EffectWrite(fb, effect("m3", 0, actor_id="b", status="done")),
                ]
            )
        )
    assert await store.effects_of("a", "m3") == []  # rolled back with the batch
    # An intent and its receipt in one batch: both written, in order.
    receipt = effect("m2", 0, actor_id="b", status="done", result=b"\x02")
    await store.apply(Batch(effects=[EffectWrite(fb, other), EffectWrite(fb, receipt)]))
    assert await store.effects_of("b", "m2") == [receipt]
