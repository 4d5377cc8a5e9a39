"""Conformance: the actor registry (spawn, get_actor, list_actors)."""

from __future__ import annotations

from tether.store.protocol import Store
from tether.store.records import (
    Batch,
    Spawn,
)
from tether.testing.conformance.support import (
    NOW,
    owned,
    record,
    spawn,
)

# -- spawn --------------------------------------------------------------------------------------


async def test_spawn_stores_the_record_and_returns_it(store: Store) -> None:
    """A spawn of a new id stores the record as given and returns it in BatchResult.spawned."""
    rec = record("a", parent_id="p")
    result = await store.apply(Batch(spawns=[Spawn(rec)]))
    assert result.spawned == {"a": rec}
    assert await store.get_actor("a") == rec


async def test_spawn_of_a_taken_id_keeps_and_returns_the_existing_record(store: Store) -> None:
    """Spawning an id that exists changes nothing and returns the record stored first."""
    first = record("a", class_path="first:Actor", created_at=NOW)
    await store.apply(Batch(spawns=[Spawn(first)]))
    result = await store.apply(
        Batch(spawns=[Spawn(record("a", class_path="second:Actor", created_at=NOW + 5))])
    )
    assert result.spawned == {"a": first}
    assert await store.get_actor("a") == first
    assert [r.actor_id for r in await store.list_actors()] == ["a"]


async def test_spawn_of_a_taken_id_returns_its_current_state(store: Store) -> None:
    """A repeated spawn returns the stored record as it is now (leased, fenced), not as spawned."""
    fence = await owned(store, "a")
    result = await store.apply(Batch(spawns=[Spawn(record("a"))]))
    assert result.spawned["a"].fence == fence
    assert result.spawned["a"].lease_owner == "rt-1"


async def test_list_actors_returns_every_actor_or_the_children_of_one_parent(
    store: Store,
) -> None:
    """list_actors lists every actor by creation time, or only those of one parent_id."""
    await store.apply(
        Batch(
            spawns=[
                Spawn(record("root", created_at=NOW)),
                Spawn(record("c2", parent_id="root", created_at=NOW + 2)),
                Spawn(record("c1", parent_id="root", created_at=NOW + 1)),
                Spawn(record("other", parent_id="elsewhere", created_at=NOW + 3)),
            ]
        )
    )
    assert [r.actor_id for r in await store.list_actors()] == ["root", "c1", "c2", "other"]
    assert [r.actor_id for r in await store.list_actors(parent_id="root")] == ["c1", "c2"]
    assert await store.list_actors(parent_id="nobody") == []


async def test_get_actor_of_a_missing_id_is_none(store: Store) -> None:
    """get_actor of an id never spawned is None."""
    await spawn(store, "a")
    assert await store.get_actor("missing") is None
