"""The programs of the several-hosts test (``test_netns.py``): a runtime that serves the
shared PostgreSQL store from inside one host's network namespace, and the actors it serves.

``python -m tests.hosts.programs runtime URL DIR LEASE_TTL`` serves until ``DIR/exit``
appears. Run in host ``a`` (its hostname), every handler first waits for ``DIR/gate-a``: the
test holds host a's steps open while it cuts the host off, and lets them go on once the
host is back, after its actors were taken over: each of those steps then tries a late tool
call (``Payer``) or a late commit (``Noter``) with a fence that is no longer current.

Every tool call appends ``{"host", "order_id", "phase"}`` to ``DIR/calls.jsonl`` before it
talks to the payments service (which ignores idempotency keys: a doubled call shows as two
rows) and after; every handler appends ``{"host", "actor", "msg"}`` to ``DIR/entered.jsonl``.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import anyio
import msgspec

import tether
from tests.chaos.programs import configure_logging, report
from tests.chaos.world_programs import append_synced
from tether.testing.payments import PaymentsClient


class _Where:
    dir = ""
    service = ""  # the payments service's URL, as this host reaches it


WHERE = _Where()


async def _gate(actor_id: str, msg: str) -> None:
    host = socket.gethostname()
    append_synced(Path(WHERE.dir, "entered.jsonl"), {"host": host, "actor": actor_id, "msg": msg})
    if host == "a":
        gate = anyio.Path(WHERE.dir, "gate-a")
        while not await gate.exists():
            await anyio.sleep(0.05)


@tether.tool(recovery="retry", timeout=60)
async def charge(order_id: str, cents: int, idempotency_key: str = tether.RUNTIME_KEY) -> str:
    """A charge through a service that ignores keys: each call that reaches it is a row."""
    line = {"host": socket.gethostname(), "order_id": order_id, "pid": os.getpid()}
    append_synced(Path(WHERE.dir, "calls.jsonl"), {**line, "phase": "call"})
    answer = await PaymentsClient(WHERE.service, timeout=60).refund(
        order_id, cents, idempotency_key
    )
    append_synced(Path(WHERE.dir, "calls.jsonl"), {**line, "phase": "return"})
    return str(answer["refund_id"])


class Pay(tether.Message):
    order_id: str


class Paid(tether.Event):
    order_id: str
    receipt: str


class Note(tether.Message):
    n: int


class Noted(tether.Event):
    n: int
    host: str


class Count(msgspec.Struct):
    n: int = 0


class Payer(tether.Actor[Count]):
    initial_state = Count()

    def apply(self, state: Count, event: Paid) -> Count:
        return Count(state.n + 1)

    async def handle(self, msg: Pay) -> None:
        await _gate(self.id, msg.order_id)
        receipt = await self.effect(charge, order_id=msg.order_id, cents=100)
        self.persist(Paid(order_id=msg.order_id, receipt=receipt))


class Noter(tether.Actor[Count]):
    initial_state = Count()

    def apply(self, state: Count, event: Noted) -> Count:
        return Count(state.n + 1)

    async def handle(self, msg: Note) -> None:
        await _gate(self.id, str(msg.n))
        self.persist(Noted(n=msg.n, host=socket.gethostname()))


async def runtime_program(url: str, workdir: str, lease_ttl: str, service: str) -> None:
    WHERE.dir, WHERE.service = workdir, service
    async with tether.Runtime(
        url, lease_ttl=float(lease_ttl), poll_interval=0.05, passivate_after=None
    ) as rt:
        report(f"ready runtime_id={rt.runtime_id} host={socket.gethostname()}")
        exit_file = anyio.Path(workdir, "exit")
        while not await exit_file.exists():
            await anyio.sleep(0.05)
    report("exited")


def main(argv: list[str]) -> None:
    configure_logging()
    if len(argv) != 5 or argv[0] != "runtime":
        raise SystemExit("usage: python -m tests.hosts.programs runtime URL DIR LEASE_TTL SERVICE")
    _, url, workdir, lease_ttl, service = argv
    anyio.run(runtime_program, url, workdir, lease_ttl, service)


if __name__ == "__main__":
    from tests.hosts import programs  # the same code, under the name recovery imports

    programs.main(sys.argv[1:])
