"""Conformance: "is the owner still alive" is a same-host shortcut, never the store's call.

A store frees a live runtime's leases only when they expire or when the runtime is removed
(``remove_runtime``); it never judges a process itself. A runtime removes another only when
that one registered under its very host identity (a pid namespace on one boot of one kernel:
``tether.store.hosts``) and its process is gone; a runtime of any other host is left to its
lease's expiry. Here with a real ``Runtime`` on the store under test.
"""

from __future__ import annotations

import subprocess
import sys

from tether.runtime.runtime import Runtime
from tether.store.hosts import process_start, this_host
from tether.store.open import open_store
from tether.store.protocol import Store
from tether.store.records import RuntimeRecord
from tether.testing.conformance.support import (
    LeaseTime,
    StoreTarget,
    lease,
    msg,
    send,
    spawn,
)


async def _held(store: Store, actor_id: str, owner: str, ttl: float = 3600.0) -> int:
    """Spawn ``actor_id`` and lease it to ``owner`` (registered as the test registered it)."""
    await spawn(store, actor_id)
    fence = await lease(store, actor_id, owner, ttl=ttl)
    assert fence is not None
    return fence


def _exited_pid() -> tuple[int, float]:
    """The pid of a process of this host that has exited, and when it started."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = process_start(child.pid) or 0.0
    child.kill()
    child.wait()
    return child.pid, started


async def test_a_host_identity_is_stored_and_listed_as_registered(store: Store) -> None:
    """register_runtime keeps the host identity as given, every character of it."""
    host = this_host()
    await store.register_runtime("rt-here", host, 4242, 1234.5)
    assert await store.list_runtimes() == [RuntimeRecord("rt-here", host, 4242, 1234.5)]


async def test_the_store_never_frees_a_lease_by_judging_its_holders_process(
    store: Store,
) -> None:
    """A registered runtime's lease stays taken, and its actor not orphaned, even when its pid
    is a process of this host that has exited: only expiry or remove_runtime free it."""
    pid, started = _exited_pid()
    await store.register_runtime("rt-gone", this_host(), pid, started)
    fence = await _held(store, "a", "rt-gone")
    await send(store, msg("m1"))
    assert await lease(store, "a", "rt-2") is None
    assert await store.orphaned(1e12, 100) == []
    await store.remove_runtime("rt-gone")
    assert await lease(store, "a", "rt-2") == fence + 1


def _runtime_handle(target: StoreTarget, store: Store, lease_time: LeaseTime) -> Store:
    """A handle a ``Runtime`` opens and closes itself: a new one on a shared store, else the
    test's own (opening a memory store again keeps its data)."""
    if target.shared:
        return open_store(target.url, clock=lease_time.now, **target.options)
    return store


async def test_a_runtime_reaps_only_dead_runtimes_of_its_own_host_identity(
    store: Store, store_target: StoreTarget, lease_time: LeaseTime
) -> None:
    """A runtime opening on the store removes a registered runtime whose process exited on
    this very host identity, freeing its leases at once; one of another host — another
    machine, another pid namespace or boot on this one, or a bare hostname an older tether
    wrote — keeps its row and its leases, whatever its pid is here."""
    pid, started = _exited_pid()
    here = this_host()
    hostname = here.split(" ", 1)[0]
    elsewhere = {
        "rt-other-machine": "elsewhere boot=00000000-0000-0000-0000-000000000000 pidns=0:1",
        "rt-other-pidns": here.rsplit("pidns=", 1)[0] + "pidns=0:4026531837"
        if "pidns=" in here
        else f"{hostname} boot=other pidns=0:1",
        "rt-old-tether": hostname,
    }
    await store.register_runtime("rt-dead-here", here, pid, started)
    await _held(store, "dead-here", "rt-dead-here")
    for runtime_id, host in elsewhere.items():
        await store.register_runtime(runtime_id, host, pid, started)
        await _held(store, f"held-by-{runtime_id}", runtime_id)
    handle = _runtime_handle(store_target, store, lease_time)
    async with Runtime(store=handle, poll_interval=60.0, lease_ttl=3600.0):
        listed = {r.runtime_id for r in await store.list_runtimes()}
        assert "rt-dead-here" not in listed
        assert set(elsewhere) <= listed
        dead = await store.get_actor("dead-here")
        assert dead is not None
        assert dead.lease_owner is None
        for runtime_id in elsewhere:
            rec = await store.get_actor(f"held-by-{runtime_id}")
            assert rec is not None
            assert rec.lease_owner == runtime_id
