"""What the conformance suite's tests share: the target under test, its fixtures, and helpers
that build records and drive a store the way the runtime does."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from tether.store.open import open_store
from tether.store.protocol import Store
from tether.store.records import (
    ActorRecord,
    Batch,
    BatchResult,
    Claim,
    EffectRecord,
    JournalRow,
    LeaseAcquire,
    MessageCursor,
    NewMessage,
    Park,
    ScannedMessage,
    Snapshot,
    Spawn,
    StepCommit,
    StopActor,
)
from tether.testing.clock import FakeClock

NOW = 1_000.0  # the tests' clock: every message is due at NOW unless delayed
TTL = 30.0  # the lease ttl of tests that never wait for a lease to expire
LATER = NOW + 1_000_000.0  # a "now" at which every message in these tests is due

#: ``hold_open(store, batch)``: apply ``batch`` in a transaction that stays open, uncommitted,
#: inside the context, and commits when it is left.
HoldOpen = Callable[[Store, Batch], AbstractAsyncContextManager[None]]


@dataclasses.dataclass(frozen=True)
class StoreTarget:
    """A backend under test: the URL of a fresh, empty store, and what the suite must know of
    it.

    Args:
        url: opened with ``tether.open_store(url, clock=…, **options)``.
        options: the backend's options.
        own_clock: the store judges leases on a clock of its own (a database server's), not on
            the clock it is opened with: the lease tests then wait real time, ``lease_ttl``
            seconds at a time, instead of moving a fake clock.
        lease_ttl: the ttl of the lease tests on a store with a clock of its own.
        clock_slack: on such a store, how far its clock may be from a reading the test
            compares it with (the round trips between, on a busy machine).
        shared: a second ``open_store(url)`` reaches the same data (false for ``:memory:``):
            the tests of several runtimes on one store then open one handle each.
        hold_open: how to hold a write open while others commit (``HoldOpen``), for a store
            that lets concurrent writers commit out of sequence order; None for a store with
            one writer at a time, where that cannot happen (the case is skipped).
    """

    url: str
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    own_clock: bool = False
    lease_ttl: float = 1.0
    clock_slack: float = 0.5
    shared: bool = True
    hold_open: HoldOpen | None = None


#: Our own targets, by name: ``tests/store/test_store_conformance.py`` runs the suite on each.
TARGETS: dict[str, Callable[[Path], StoreTarget]] = {
    "memory": lambda folder: StoreTarget(":memory:", shared=False),
    "sqlite": lambda folder: StoreTarget(f"sqlite:///{folder / 'conformance.db'}"),
}


class LeaseTime:
    """Time as the store under test judges leases: a fake clock moved by ``elapse``, or, on a
    store with a clock of its own, real time that passes."""

    def __init__(self, target: StoreTarget) -> None:
        self.fake = None if target.own_clock else FakeClock(start=NOW)
        self.ttl = target.lease_ttl if target.own_clock else TTL
        # How far a store's own clock may be from the reading the test compares it with.
        self.slack = target.clock_slack if target.own_clock else 0.0

    def now(self) -> float:
        return self.fake.now() if self.fake is not None else NOW

    async def elapse(self, seconds: float) -> None:
        if self.fake is not None:
            self.fake.advance(seconds)
        else:
            await anyio.sleep(seconds)


@pytest.fixture(params=sorted(TARGETS))
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> StoreTarget:
    """The backend under test. Override this fixture to run the suite on another backend."""
    return TARGETS[request.param](tmp_path)


@pytest.fixture
def lease_time(store_target: StoreTarget) -> LeaseTime:
    return LeaseTime(store_target)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the stores and the runtime are asyncio-only


@pytest.fixture
async def store(
    store_target: StoreTarget, lease_time: LeaseTime, anyio_backend: str
) -> AsyncIterator[Store]:
    """An opened store of the target, empty, closed after the test."""
    s = open_store(store_target.url, clock=lease_time.now, **store_target.options)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def second_store(
    store_target: StoreTarget, lease_time: LeaseTime, store: Store
) -> AsyncIterator[Store]:
    """Another handle on ``store``'s data, as a second runtime (another process) has: its own
    connections. ``store`` itself when the target is not shared."""
    if not store_target.shared:
        yield store
        return
    s = open_store(store_target.url, clock=lease_time.now, **store_target.options)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


# -- records ------------------------------------------------------------------------------------


def record(
    actor_id: str,
    *,
    parent_id: str | None = None,
    class_path: str = "tests.sample:Counter",
    created_at: float = NOW,
) -> ActorRecord:
    return ActorRecord(
        actor_id=actor_id,
        class_path=class_path,
        init=b"\x80",
        parent_id=parent_id,
        status="active",
        stop_reason=None,
        fence=0,
        lease_owner=None,
        lease_expires=0.0,
        created_at=created_at,
    )


def msg(
    msg_id: str,
    actor_id: str = "a",
    *,
    deliver_at: float = NOW,
    created_at: float = NOW,
    dedup_key: str | None = None,
    wants_reply: bool = False,
    type_: str = "Ping",
    payload: bytes | None = None,
    traceparent: str | None = None,
) -> NewMessage:
    return NewMessage(
        msg_id=msg_id,
        actor_id=actor_id,
        type=type_,
        payload=payload if payload is not None else msg_id.encode(),
        deliver_at=deliver_at,
        created_at=created_at,
        dedup_key=dedup_key,
        wants_reply=wants_reply,
        traceparent=traceparent,
    )


def step(
    actor_id: str,
    fence: int,
    msg_id: str,
    *,
    events: list[JournalRow] | None = None,
    outbox: list[NewMessage] | None = None,
    reply: bytes | None = None,
    snapshot: Snapshot | None = None,
    claim_next: str | None = None,
    stop: StopActor | None = None,
) -> StepCommit:
    return StepCommit(
        actor_id=actor_id,
        fence=fence,
        msg_id=msg_id,
        events=events or [],
        outbox=outbox or [],
        reply=reply,
        snapshot=snapshot,
        claim_next=claim_next,
        stop=stop,
    )


def halt(actor_id: str, reason: str, *, now: float = NOW, status: str = "stopped") -> StopActor:
    """A StopActor whose Terminated notice payload names the actor."""
    return StopActor(actor_id, reason, now, notice=f"terminated {actor_id}".encode(), status=status)


def effect(
    msg_id: str = "m1",
    idx: int = 0,
    *,
    actor_id: str = "a",
    tool: str = "send_email",
    status: str = "pending",
    attempts: int = 1,
    key: str | None = None,
    result: bytes | None = None,
    error: str | None = None,
    reason: str | None = None,
    history: list[str] | None = None,
    created_at: float = NOW,
    updated_at: float | None = None,
) -> EffectRecord:
    """A ledger row; its key names its slot unless given."""
    return EffectRecord(
        actor_id=actor_id,
        msg_id=msg_id,
        idx=idx,
        key=key if key is not None else f"k-{actor_id}-{msg_id}-{idx}",
        tool=tool,
        input_hash="h" * 16,
        args=msgspec.msgpack.encode({"to": "x@example.com"}),
        status=status,
        attempts=attempts,
        result=result,
        error=error,
        reason=reason,
        history=history or [],
        created_at=created_at,
        updated_at=updated_at if updated_at is not None else created_at,
    )


# -- driving a store ----------------------------------------------------------------------------


async def spawn(store: Store, *actor_ids: str) -> None:
    await store.apply(Batch(spawns=[Spawn(record(a)) for a in actor_ids]))


async def send(store: Store, *messages: NewMessage) -> BatchResult:
    return await store.apply(Batch(messages=list(messages)))


async def lease(
    store: Store, actor_id: str, owner: str = "rt-1", *, ttl: float = TTL
) -> int | None:
    result = await store.apply(Batch(acquires=[LeaseAcquire(actor_id, owner, ttl)]))
    return result.leases[actor_id]


async def owned(store: Store, actor_id: str, owner: str = "rt-1", *, ttl: float = TTL) -> int:
    """Spawn ``actor_id`` and lease it to a registered ``owner``; return the fence."""
    await spawn(store, actor_id)
    await store.register_runtime(owner, "host", 1, NOW)
    fence = await lease(store, actor_id, owner, ttl=ttl)
    assert fence is not None
    return fence


async def take_over(store: Store, actor_id: str, old: str = "rt-1", new: str = "rt-2") -> int:
    """``new`` takes ``actor_id``'s lease from ``old`` as from a runtime found dead (removed:
    its leases are free at once, on any clock); ``old`` registers again, alive but fenced
    out. The new fence."""
    await store.remove_runtime(old)
    await store.register_runtime(old, "host", 1, NOW)
    await store.register_runtime(new, "host", 2, NOW)
    fence = await lease(store, actor_id, new)
    assert fence is not None
    return fence


async def pending_ids(store: Store, actor_id: str, now: float = LATER) -> list[str]:
    return [m.msg_id for m in await store.pending(actor_id, now, 1000)]


async def journal_seqs(store: Store, actor_id: str) -> list[int]:
    return [r.seq for r in await store.load_journal(actor_id, 0, 1000)]


async def scan(
    store: Store,
    cursor: MessageCursor | None = None,
    now: float = NOW,
    *,
    limit: int = 1000,
    skip_prefix: str | None = None,
    runtime_id: str | None = None,
) -> tuple[list[ScannedMessage], MessageCursor | None]:
    """Every message a scan from ``cursor`` finds ready at ``now``, page by page, until the
    store says there is no more; and the cursor to go on from."""
    found: list[ScannedMessage] = []
    while True:
        page = await store.scan_messages(
            cursor, now, limit, skip_prefix=skip_prefix, runtime_id=runtime_id
        )
        assert len(page.messages) <= limit
        found.extend(page.messages)
        cursor = page.cursor
        if not page.more:
            return found, cursor


async def scanned(
    store: Store,
    cursor: MessageCursor | None = None,
    now: float = NOW,
    *,
    skip_prefix: str | None = None,
    runtime_id: str | None = None,
) -> list[str]:
    """Ids of the messages ``scan`` finds."""
    found, _ = await scan(store, cursor, now, skip_prefix=skip_prefix, runtime_id=runtime_id)
    return [m.msg_id for m in found]


async def parked_with(store: Store, actor_id: str = "a", *ids: str) -> int:
    """Own ``actor_id``, store ``ids`` (default "m1") and park the first, claimed once; the fence."""
    fence = await owned(store, actor_id)
    ids = ids or ("m1",)
    await send(store, *(msg(m, actor_id) for m in ids))
    await store.apply(Batch(claims=[Claim(actor_id, fence, ids[0])]))
    q = effect(ids[0], actor_id=actor_id, status="quarantined", reason="ambiguous")
    await store.apply(Batch(parks=[Park(actor_id, fence, ids[0], effect=q)]))
    return fence
