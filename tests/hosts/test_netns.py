"""Several hosts sharing one PostgreSQL store (issue #17): runtimes in network namespaces of
their own (``tests/hosts/netns.py``), one host cut off past its leases, then restored.

What must hold, checked in the world's own records: the cut-off host's actors are taken over
by the other host once their leases expire on the server's clock (never by a pid, which means
nothing across hosts); the steps it held open when it was cut off, let go on once it is back,
land nothing: their tool calls never reach the payments service (the intent is refused under
the stale fence, so the call is never made) and their commits are refused; no effect is
doubled (the service ignores idempotency keys: a doubled call would be a second row).

Needs root, ``ip``, ``unshare`` and PostgreSQL's server binaries: skipped with the reason
where they are missing, unless ``TETHER_REQUIRE_NETNS=1`` (``.ci/run`` sets it), which turns the
skip into a failure.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psycopg
import pytest

import tether
from tests.chaos.harness import ROOT, Child, wait_until
from tests.chaos.world_programs import read_lines
from tests.hosts import programs as hp
from tests.hosts.netns import Host, cluster, hosts, in_host, set_link, unavailable
from tether.testing.payments import PaymentsService, refunds

pytestmark = pytest.mark.slow

LEASE_TTL = 2.0
ACTORS = 4  # payers, and as many noters
TIMEOUT = 60.0


def _unavailable() -> str | None:
    why = unavailable()
    if why is None and importlib.util.find_spec("tether.store.postgres") is None:
        why = "no PostgreSQL store in this tether (tether.store.postgres)"
    return why


@pytest.fixture
def several_hosts() -> Iterator[dict[str, Host]]:
    why = _unavailable()
    if why is not None:
        if os.environ.get("TETHER_REQUIRE_NETNS") == "1":
            pytest.fail(f"several hosts cannot be made here: {why} (TETHER_REQUIRE_NETNS=1)")
        pytest.skip(why)
    with hosts(["a", "b"]) as made:
        yield made


class HostChild(Child):
    """``python -m tests.hosts.programs ARGS`` inside ``host``."""

    def __init__(self, directory: Path, host: Host, *args: object) -> None:
        self.name = f"runtime-{host.name}"
        self.out = directory / f"{self.name}.out"
        self.err = directory / f"{self.name}.err"
        argv = in_host(host, [sys.executable, "-m", "tests.hosts.programs", *map(str, args)])
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, stdout=out, stderr=err, env=env, stdin=subprocess.DEVNULL
            )
        self.pid = self.proc.pid


def _database(server: str, name: str) -> str:
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return urllib.parse.urlsplit(server)._replace(path=f"/{name}").geturl()


def _seen_from(url: str, host: Host) -> str:
    """``url`` (on 127.0.0.1) as ``host`` reaches the same server."""
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=parts.netloc.replace("127.0.0.1", host.server_address)).geturl()


def _payers() -> list[str]:
    return [f"payer-{i}" for i in range(ACTORS)]


def _noters() -> list[str]:
    return [f"noter-{i}" for i in range(ACTORS)]


async def _setup(url: str) -> None:
    async with tether.Runtime(url, serve=False) as rt:
        for actor in _payers():
            await rt.spawn(hp.Payer, actor)
        for actor in _noters():
            await rt.spawn(hp.Noter, actor)


async def _send(url: str) -> None:
    async with tether.Runtime(url, serve=False) as rt:
        for i, actor in enumerate(_payers()):
            await rt.ref(actor).tell(hp.Pay(order_id=f"o{i}"), dedup_key=f"pay-{i}")
        for i, actor in enumerate(_noters()):
            await rt.ref(actor).tell(hp.Note(n=i), dedup_key=f"note-{i}")


class _World(msgspec.Struct):
    owners: dict[str, str | None]
    events: dict[str, list[Any]]


async def _look(url: str) -> _World:
    store = tether.open_store(url, create=False)
    await store.open()
    try:
        owners: dict[str, str | None] = {}
        events: dict[str, list[Any]] = {}
        decoder = msgspec.msgpack.Decoder(hp.Paid | hp.Noted)
        for actor in [*_payers(), *_noters()]:
            rec = await store.get_actor(actor)
            owners[actor] = rec.lease_owner if rec else None
            rows = await store.load_journal(actor, 0, 100)
            events[actor] = [decoder.decode(r.payload) for r in rows]
        return _World(owners, events)
    finally:
        await store.close()


def _runtime_id(child: Child) -> str:
    line = next(x for x in child.lines() if x.startswith("ready "))
    return dict(p.split("=", 1) for p in line.split()[1:])["runtime_id"]


def test_a_host_cut_off_past_its_leases_is_taken_over_and_its_late_writes_land_nothing(
    several_hosts: dict[str, Host], tmp_path: Path
) -> None:
    a, b = several_hosts["a"], several_hosts["b"]
    children: list[Child] = []
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(cluster([a.server_address, b.server_address]))
        url = _database(server, "tether_hosts")
        service = stack.enter_context(
            PaymentsService.start(tmp_path / "loose.db", honor_keys=False, host="0.0.0.0")
        )

        @stack.callback
        def reap() -> None:  # first of all: before the server and the service go
            for child in children:
                child.reap()

        port = urllib.parse.urlsplit(service.url).port

        def start(host: Host) -> Child:
            args = ("runtime", _seen_from(url, host), tmp_path, LEASE_TTL)
            child = HostChild(tmp_path, host, *args, f"http://{host.server_address}:{port}")
            children.append(child)
            child.wait_report("ready", TIMEOUT)
            return child

        anyio.run(_setup, url)
        rt_a = start(a)
        anyio.run(_send, url)
        # Host a takes every actor and holds each step open at its gate.
        wait_until(
            lambda: len(read_lines(tmp_path / "entered.jsonl")) == 2 * ACTORS,
            TIMEOUT,
            "host a to enter every step",
        )
        a_id = _runtime_id(rt_a)
        assert set(anyio.run(_look, url).owners.values()) == {a_id}
        rt_b = start(b)
        b_id = _runtime_id(rt_b)

        set_link(a, up=False)  # host a is cut off, its steps still open
        cut = time.monotonic()

        def taken_over() -> bool:
            world = anyio.run(_look, url)
            return set(world.owners.values()) == {b_id} and all(world.events.values())

        wait_until(taken_over, TIMEOUT, "host b to take every actor over and run its step")
        took = time.monotonic() - cut
        # Leases run on the server's clock: nobody took over before host a's had expired.
        assert took >= LEASE_TTL * 0.9

        set_link(a, up=True)  # host a is back, and its open steps go on
        (tmp_path / "gate-a").touch()

        def a_refused_all() -> bool:
            refused = {e.get("actor_id") for e in rt_a.logs() if _is_refusal(e)}
            return refused == {*_payers(), *_noters()}

        # Each open step of host a tries to write under its old fence: a payer its charge's
        # intent (before the call), a noter its commit. Each is refused, and the actor leaves
        # host a.
        wait_until(a_refused_all, TIMEOUT, "host a to have each of its late writes refused")
        assert rt_a.alive(), rt_a.describe()  # reconnected and serving on

        world = anyio.run(_look, url)
        assert set(world.owners.values()) == {b_id}
        for i, actor in enumerate(_payers()):
            assert [e.order_id for e in world.events[actor]] == [f"o{i}"]
        for i, actor in enumerate(_noters()):
            assert [(e.n, e.host) for e in world.events[actor]] == [(i, "b")]
        charged = sorted(r["order_id"] for r in refunds(tmp_path / "loose.db"))
        assert charged == [f"o{i}" for i in range(ACTORS)]  # once each: none doubled
        calls = read_lines(tmp_path / "calls.jsonl")
        assert [c for c in calls if c["host"] == "a"] == []  # no late call left host a
        (tmp_path / "exit").touch()
        for child in children:
            assert child.wait(TIMEOUT) == 0, child.describe()
    print(json.dumps({"lease_ttl_s": LEASE_TTL, "taken_over_after_s": round(took, 2)}))


def _is_refusal(event: dict[str, Any]) -> bool:
    """A runtime's log line for an actor it let go because a write under its fence was
    refused (another runtime holds the actor now)."""
    return event.get("event") == "actor_deactivated" and "is stale" in str(event.get("reason"))
