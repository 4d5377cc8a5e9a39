"""Conformance: the effects ledger (I4) — writes, filters, the recent tail."""

from __future__ import annotations

import msgspec
import pytest

from tether.store.protocol import Store
from tether.store.records import (
    Batch,
    EffectRecord,
    EffectWrite,
)
from tether.testing.conformance.support import (
    NOW,
    effect,
    owned,
    spawn,
)

# -- the effects ledger (I4): EffectWrite, Park, resolve, unpark, purge_receipts ----------------


async def test_effect_write_stores_a_ledger_row_read_back_by_effects_of(store: Store) -> None:
    """EffectWrite inserts rows; effects_of returns one step's rows by index, every field intact."""
    fence = await owned(store, "a")
    await spawn(store, "b")
    rows = [
        effect("m1", 1, status="done", result=b"\x01", history=["attempt 1: E: x"]),
        effect("m1", 0, status="failed", error="E: boom", attempts=3),
        effect("m2", 0),
    ]
    result = await store.apply(Batch(effects=[EffectWrite(fence, r) for r in rows]))
    assert result.stale == set()
    assert await store.effects_of("a", "m1") == [rows[1], rows[0]]
    assert await store.effects_of("a", "m2") == [rows[2]]
    assert await store.effects_of("a", "nope") == []
    assert await store.effects_of("b", "m1") == []


async def test_effect_write_upsert_keeps_created_at_and_replaces_the_outcome(store: Store) -> None:
    """A second write of a slot replaces status, attempts, result, error, reason, history and
    updated_at, and keeps the row's created_at (and its place in find_effects)."""
    fence = await owned(store, "a")
    first = effect("m1", 0, status="pending", created_at=NOW)
    await store.apply(Batch(effects=[EffectWrite(fence, first)]))
    await store.apply(Batch(effects=[EffectWrite(fence, effect("m2", 0, created_at=NOW + 1))]))
    later = msgspec.structs.replace(
        first,
        status="done",
        attempts=2,
        result=b"\x2a",
        error=None,
        reason="was ambiguous",
        history=["attempt 1: TimeoutError", "retried"],
        created_at=NOW + 50,  # a writer's own clock: must not move the row
        updated_at=NOW + 50,
    )
    await store.apply(Batch(effects=[EffectWrite(fence, later)]))
    [row] = await store.effects_of("a", "m1")
    assert row == msgspec.structs.replace(later, created_at=NOW)
    # replaced again, fewer fields set: nothing of the previous outcome lingers
    again = msgspec.structs.replace(
        later, status="failed", result=None, error="E", reason=None, history=[], updated_at=NOW + 60
    )
    await store.apply(Batch(effects=[EffectWrite(fence, again)]))
    [row] = await store.effects_of("a", "m1")
    assert row == msgspec.structs.replace(again, created_at=NOW)
    assert [e.msg_id for e in await store.find_effects(actor_id="a")] == ["m1", "m2"]


async def test_writes_of_one_slot_in_one_batch_leave_what_writing_them_in_turn_leaves(
    store: Store,
) -> None:
    """An intent and its receipt may share a batch (a deferred receipt with the next intent):
    the row keeps the first write's identity and created_at and takes the last one's
    outcome, as if they were applied one after another; other slots of the batch as written."""
    fence = await owned(store, "a")
    intent = effect("m1", 0, status="pending", created_at=NOW)
    receipt = msgspec.structs.replace(
        intent,
        key="other-key",
        status="done",
        attempts=2,
        result=b"\x2a",
        history=["attempt 1: TimeoutError"],
        created_at=NOW + 5,
        updated_at=NOW + 5,
    )
    beside = effect("m1", 1, status="pending", created_at=NOW + 1)
    writes = [EffectWrite(fence, e) for e in (intent, beside, receipt)]
    await store.apply(Batch(effects=writes))
    assert await store.effects_of("a", "m1") == [
        msgspec.structs.replace(receipt, key=intent.key, created_at=NOW),
        beside,
    ]


async def test_effect_write_upsert_keeps_the_slot_identity(store: Store) -> None:
    """A slot's identity (key, tool, input hash, args) is fixed by its first write: a later
    write of the slot only replaces the outcome. (The runtime always rewrites a slot from the
    recorded row; the stores must still agree on what a differing write does.)"""
    fence = await owned(store, "a")
    first = effect("m1", 0)
    await store.apply(Batch(effects=[EffectWrite(fence, first)]))
    other = msgspec.structs.replace(
        first, key="other-key", tool="other", input_hash="i" * 16, args=b"\x80", status="done"
    )
    await store.apply(Batch(effects=[EffectWrite(fence, other)]))
    [row] = await store.effects_of("a", "m1")
    assert (row.key, row.tool, row.input_hash, row.args) == (
        first.key,
        first.tool,
        first.input_hash,
        first.args,
    )
    assert row.status == "done"


async def test_find_effects_filters_by_actor_status_and_key_oldest_first(store: Store) -> None:
    """find_effects returns the rows matching every filter given, by created_at."""
    fa = await owned(store, "a")
    fb = await owned(store, "b")
    rows = [
        effect("m2", 0, status="quarantined", created_at=NOW + 2),
        effect("m1", 0, status="done", created_at=NOW + 1),
        effect("mb", 0, actor_id="b", status="quarantined", created_at=NOW + 3),
        effect("m1", 1, status="quarantined", created_at=NOW),
    ]
    await store.apply(
        Batch(effects=[EffectWrite(fa if r.actor_id == "a" else fb, r) for r in rows])
    )

    def slots(found: list[EffectRecord]) -> list[tuple[str, str, int]]:
        return [(e.actor_id, e.msg_id, e.idx) for e in found]

    assert slots(await store.find_effects()) == [
        ("a", "m1", 1),
        ("a", "m1", 0),
        ("a", "m2", 0),
        ("b", "mb", 0),
    ]
    assert slots(await store.find_effects(status="quarantined")) == [
        ("a", "m1", 1),
        ("a", "m2", 0),
        ("b", "mb", 0),
    ]
    assert slots(await store.find_effects(actor_id="a", status="quarantined")) == [
        ("a", "m1", 1),
        ("a", "m2", 0),
    ]
    assert slots(await store.find_effects(key=rows[2].key)) == [("b", "mb", 0)]
    assert await store.find_effects(key=rows[2].key, actor_id="a") == []
    assert await store.find_effects(status="retry") == []


def slot_ids(found: list[EffectRecord]) -> list[tuple[str, int]]:
    return [(e.msg_id, e.idx) for e in found]


async def write_effects(store: Store, rows: list[EffectRecord]) -> None:
    fences = {a: await owned(store, a) for a in sorted({r.actor_id for r in rows})}
    result = await store.apply(Batch(effects=[EffectWrite(fences[r.actor_id], r) for r in rows]))
    assert result.stale == set()


async def test_recent_effects_returns_the_newest_rows_of_the_actor_oldest_first(
    store: Store,
) -> None:
    """recent_effects keeps the newest ``limit`` rows of one actor (another actor's newer rows
    take no place), in find_effects' order; a limit past the rows returns them all, 0 none."""
    await write_effects(
        store,
        [
            effect("m3", 0, created_at=NOW + 3),
            effect("m1", 0, created_at=NOW + 1),
            effect("m4", 0, created_at=NOW + 4),
            effect("m2", 0, created_at=NOW + 2, status="done", result=b"\x01"),
            effect("mb", 0, actor_id="b", created_at=NOW + 9),
        ],
    )
    recent = await store.recent_effects("a", 2)
    assert slot_ids(recent) == [("m3", 0), ("m4", 0)]
    assert recent == (await store.find_effects(actor_id="a"))[-2:]  # whole rows, as stored
    assert slot_ids(await store.recent_effects("a", 3)) == [("m2", 0), ("m3", 0), ("m4", 0)]
    assert len(await store.recent_effects("a", 100)) == 4
    assert await store.recent_effects("a", 0) == []
    assert await store.recent_effects("ghost", 5) == []
    with pytest.raises(ValueError, match="limit must be >= 0"):
        await store.recent_effects("a", -1)


async def test_recent_effects_after_is_a_strict_lower_bound_applied_before_the_limit(
    store: Store,
) -> None:
    """Only rows created strictly after ``after`` count; fewer than ``limit`` may be left."""
    await write_effects(store, [effect(f"m{i}", 0, created_at=NOW + i) for i in range(1, 6)])
    assert slot_ids(await store.recent_effects("a", 10, after=NOW + 3)) == [("m4", 0), ("m5", 0)]
    assert slot_ids(await store.recent_effects("a", 1, after=NOW + 3)) == [("m5", 0)]
    assert await store.recent_effects("a", 10, after=NOW + 5) == []
    assert len(await store.recent_effects("a", 10, after=0.0)) == 5


async def test_recent_effects_excludes_tools_before_the_limit(store: Store) -> None:
    """Rows of an excluded tool are left out before the limit is applied: the newest rows being
    excluded ones does not shorten the result."""
    await write_effects(
        store,
        [
            effect("m1", 0, tool="search", created_at=NOW + 1),
            effect("m2", 0, tool="fetch", created_at=NOW + 2),
            effect("m3", 0, tool="search", created_at=NOW + 3),
            effect("m4", 0, tool="model", created_at=NOW + 4),
            effect("m5", 0, tool="think", created_at=NOW + 5),
        ],
    )
    found = await store.recent_effects("a", 2, exclude_tools=frozenset({"model", "think"}))
    assert slot_ids(found) == [("m2", 0), ("m3", 0)]
    found = await store.recent_effects("a", 5, exclude_tools=["search", "model", "think"])
    assert slot_ids(found) == [("m2", 0)]
    assert len(await store.recent_effects("a", 5, exclude_tools=())) == 5


async def test_recent_effects_orders_ties_by_msg_id_then_idx(store: Store) -> None:
    """Rows made at the same moment are ordered by (msg_id, idx), and a limit falling inside
    such a tie keeps the last of them in that order."""
    await write_effects(
        store,
        [
            effect("m2", 0, created_at=NOW),
            effect("m1", 1, created_at=NOW),
            effect("m10", 0, created_at=NOW),
            effect("m1", 0, created_at=NOW),
            effect("m0", 3, created_at=NOW - 1),
        ],
    )
    order = [("m0", 3), ("m1", 0), ("m1", 1), ("m10", 0), ("m2", 0)]
    assert slot_ids(await store.recent_effects("a", 5)) == order
    assert slot_ids(await store.recent_effects("a", 3)) == order[-3:]
    assert slot_ids(await store.recent_effects("a", 1)) == [("m2", 0)]


async def test_recent_effects_is_the_filtered_tail_of_find_effects(store: Store) -> None:
    """On a ledger with many ties and several tools, every limit, bound and exclusion gives
    the tail of find_effects(actor_id) filtered the same way: the rows a loop guard kept when
    it read the whole ledger."""
    tools = ["search", "fetch", "model"]
    rows = [
        effect(f"m{(i * 7) % 13}", i % 3, tool=tools[i % 3], created_at=NOW + (i * 5) % 4)
        for i in range(39)
    ]
    await write_effects(store, [*rows, effect("mb", 0, actor_id="b", created_at=NOW + 2)])
    everything = await store.find_effects(actor_id="a")
    for after in (None, NOW, NOW + 2):
        for excluded in (frozenset[str](), frozenset({"model"}), frozenset({"fetch", "model"})):
            kept = [
                r
                for r in everything
                if (after is None or r.created_at > after) and r.tool not in excluded
            ]
            for limit in (1, 2, 5, 13, 40):
                found = await store.recent_effects("a", limit, after=after, exclude_tools=excluded)
                assert found == kept[-limit:], (after, excluded, limit)
