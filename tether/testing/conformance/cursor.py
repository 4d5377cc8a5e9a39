"""Conformance: the scan for new messages is a cursor (``Store.scan_messages``).

Along a chain of calls, each given the cursor the one before returned, every committed message
is returned once when it is ready, and once more each time a write makes it ready again — not
"every message numbered above a watermark", which skips a lower-numbered write that commits
after a higher one was read (Akka Persistence JDBC's bug; ``tether.store.protocol``).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import msgspec
import pytest

from tether.errors import StoreError
from tether.store.protocol import Store
from tether.store.records import (
    ApprovalRecord,
    AttemptFailed,
    Batch,
    Claim,
    LeaseRelease,
    MessageCursor,
    Park,
)
from tether.testing.conformance.support import (
    LATER,
    NOW,
    StoreTarget,
    effect,
    lease,
    msg,
    owned,
    parked_with,
    scan,
    scanned,
    send,
    spawn,
    step,
)


async def test_a_chain_of_pages_returns_every_committed_message_once(store: Store) -> None:
    """Small pages, with messages stored between them: each message comes back exactly once,
    in the order it was stored, and no page is longer than its limit."""
    await spawn(store, "a", "b")
    sent: list[str] = []
    got: list[str] = []
    cursor: MessageCursor | None = None
    for round_ in range(6):
        batch = [msg(f"r{round_}-{i}", "ab"[i % 2]) for i in range(round_ + 1)]
        await send(store, *batch)
        sent += [m.msg_id for m in batch]
        page = await store.scan_messages(cursor, NOW, 2)
        assert len(page.messages) <= 2
        got += [m.msg_id for m in page.messages]
        cursor = page.cursor
    rest, cursor = await scan(store, cursor, NOW, limit=2)
    got += [m.msg_id for m in rest]
    assert got == sent
    assert (await store.scan_messages(cursor, LATER, 100)).messages == []


async def test_a_page_at_its_limit_says_there_may_be_more(store: Store) -> None:
    """``more`` is set when the page stopped at the limit; a page with room left says there is
    nothing more now. A scan of an empty store returns a cursor that still works."""
    empty = await store.scan_messages(None, NOW, 10)
    assert (empty.messages, empty.more) == ([], False)
    await spawn(store, "a")
    await send(store, *(msg(f"m{i}") for i in range(5)))
    first = await store.scan_messages(empty.cursor, NOW, 3)
    assert ([m.msg_id for m in first.messages], first.more) == (["m0", "m1", "m2"], True)
    second = await store.scan_messages(first.cursor, NOW, 3)
    assert ([m.msg_id for m in second.messages], second.more) == (["m3", "m4"], False)


async def test_scanned_messages_name_their_actor_and_whether_they_were_restored(
    store: Store,
) -> None:
    """A page names each message's actor; a message sent once is not restored."""
    await spawn(store, "a", "b")
    await send(store, msg("m1", "a"), msg("m2", "b"))
    found, _ = await scan(store)
    assert [(m.actor_id, m.msg_id, m.restored) for m in found] == [
        ("a", "m1", False),
        ("b", "m2", False),
    ]


async def test_the_scan_leaves_out_the_scanning_runtimes_own_sends(store: Store) -> None:
    """With skip_prefix, messages whose id starts with it are left out (their sender routed
    them) and take no place in the page's limit; every other message is returned, in order."""
    await spawn(store, "a", "b")
    await send(store, msg("rt1-1", "a"), msg("rt2-1", "b"), msg("rt1-2", "b"), msg("rt2-2", "a"))
    assert await scanned(store, skip_prefix="rt1-") == ["rt2-1", "rt2-2"]
    page = await store.scan_messages(None, NOW, 1, skip_prefix="rt1-")
    assert [m.msg_id for m in page.messages] == ["rt2-1"]
    assert len(await scanned(store)) == 4


async def test_a_delayed_message_is_left_to_due_between(store: Store) -> None:
    """A message not due when the scan reaches it is not returned then; due_between names its
    actor once it comes due. One due by the time of the scan is returned."""
    await spawn(store, "a", "b")
    await send(store, msg("late", "a", deliver_at=NOW + 10), msg("now", "b"))
    found, cursor = await scan(store, None, NOW)
    assert [m.msg_id for m in found] == ["now"]
    assert await store.due_between(NOW, NOW + 10) == ["a"]
    await send(store, msg("soon", "b", deliver_at=NOW + 5))
    assert await scanned(store, cursor, NOW + 5) == ["soon"]


# -- what a runtime's scan leaves to the runtime holding the actor ------------------------------


async def test_a_runtimes_scan_leaves_out_the_actors_another_live_runtime_holds(
    store: Store,
) -> None:
    """With runtime_id, messages of actors whose lease another registered runtime holds are
    left out and take no place in the page's limit; those of the scanner's own actors, of free
    actors and of actors held by an owner that is not registered are returned, in order. The
    holder's own scan returns them."""
    await owned(store, "theirs", "rt-1")
    await owned(store, "mine", "rt-2")
    await spawn(store, "free", "ghosted")
    assert await lease(store, "ghosted", "ghost") is not None  # never registered: a dead owner
    await send(
        store,
        msg("t1", "theirs"),
        msg("m1", "mine"),
        msg("f1", "free"),
        msg("g1", "ghosted"),
        msg("t2", "theirs"),
    )
    assert await scanned(store, runtime_id="rt-2") == ["m1", "f1", "g1"]
    page = await store.scan_messages(None, NOW, 1, runtime_id="rt-2")
    assert ([m.msg_id for m in page.messages], page.more) == (["m1"], True)
    assert await scanned(store, runtime_id="rt-1") == ["t1", "f1", "g1", "t2"]
    assert await scanned(store, runtime_id="rt-9") == ["f1", "g1"]
    assert await scanned(store) == ["t1", "m1", "f1", "g1", "t2"]


async def test_a_runtimes_scan_returns_an_actor_given_back_or_freed_by_a_removed_holder(
    store: Store,
) -> None:
    """The judgement is made when the rows are read: a lease released since, or freed by its
    holder's removal, no longer leaves the actor's messages out of a scan."""
    fence = await owned(store, "a", "rt-1")
    await owned(store, "b", "rt-1")
    await store.register_runtime("rt-2", "host", 2, NOW)
    await send(store, msg("a1", "a"), msg("b1", "b"))
    assert await scanned(store, runtime_id="rt-2") == []
    await store.apply(Batch(releases=[LeaseRelease("a", fence)]))
    assert await scanned(store, runtime_id="rt-2") == ["a1"]
    await store.remove_runtime("rt-1")
    assert await scanned(store, runtime_id="rt-2") == ["a1", "b1"]


async def test_due_between_for_a_runtime_leaves_out_the_actors_another_live_runtime_holds(
    store: Store,
) -> None:
    """due_between with runtime_id names the scanner's own and free actors whose delayed mail
    came due, not those another live runtime holds."""
    await owned(store, "theirs", "rt-1")
    await owned(store, "mine", "rt-2")
    await spawn(store, "free")
    await send(
        store, *(msg(f"{a}-late", a, deliver_at=NOW + 5) for a in ("theirs", "mine", "free"))
    )
    assert sorted(await store.due_between(NOW, NOW + 5, runtime_id="rt-2")) == ["free", "mine"]
    assert sorted(await store.due_between(NOW, NOW + 5)) == ["free", "mine", "theirs"]


async def test_a_cursor_not_made_by_the_store_is_refused(store: Store) -> None:
    """A cursor that is not one this store returned raises StoreError, naming it."""
    with pytest.raises(StoreError, match="cursor"):
        await store.scan_messages(MessageCursor(b"\xffnot a cursor\x00"), NOW, 10)


# -- made ready again -------------------------------------------------------------------------


async def _unparked(store: Store) -> None:
    assert await store.unpark("m1", NOW + 5)


async def _approval_decided(store: Store) -> None:
    [request] = await store.find_approvals(request_id="req-1")
    decided = msgspec.structs.replace(
        request, status="approved", version=request.version + 1, decided_at=NOW + 5
    )
    assert await store.update_approval(decided, request.version)


async def _quarantine_resolved(store: Store) -> None:
    [q] = await store.find_effects(status="quarantined")
    resolved = msgspec.structs.replace(q, status="retry", updated_at=NOW + 5)
    assert await store.resolve_effect(q.key, resolved, NOW + 5) == resolved


async def _dead_letter_retried(store: Store) -> None:
    assert await store.retry_dead_letter("m1", NOW + 5) is not None


async def _set_aside(store: Store, how: str) -> None:
    """``m1`` of actor ``a``, set aside the way ``how`` later makes it ready again."""
    if how == "unpark":
        await parked_with(store, "a", "m1", "m2")
        return
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"))
    await store.apply(Batch(claims=[Claim("a", fence, "m1")]))
    if how == "approval":
        request = ApprovalRecord(
            request_id="req-1",
            actor_id="a",
            msg_id="m1",
            idx=0,
            tool="send_email",
            tool_path="tests:send_email",
            args=b"\x80",
            fingerprint="f",
            reason="requires approval",
            context=b"\x80",
            deadline=NOW + 3600,
            on_timeout="reject",
            quorum=1,
            created_at=NOW,
        )
        await store.apply(Batch(parks=[Park("a", fence, "m1", approval=request)]))
    elif how == "quarantine":
        q = effect("m1", status="quarantined", reason="ambiguous")
        await store.apply(Batch(parks=[Park("a", fence, "m1", effect=q)]))
    else:
        await store.apply(
            Batch(failures=[AttemptFailed("a", fence, "m1", ["e"], dead_letter_reason="x")])
        )


@pytest.mark.parametrize(
    ("how", "ready_again"),
    [
        ("unpark", _unparked),
        ("approval", _approval_decided),
        ("quarantine", _quarantine_resolved),
        ("dead_letter", _dead_letter_retried),
    ],
)
async def test_a_message_made_ready_again_is_returned_again(
    store: Store, how: str, ready_again: Callable[[Store], Awaitable[None]]
) -> None:
    """Once the cursor went past a message set aside (parked for a person, or dead-lettered),
    the write that makes it ready again (unpark, a decided approval, a resolved quarantine, a
    retried dead letter) makes the scan return it once more, as restored — even to the runtime
    that sent it first (skip_prefix does not leave it out) — and only once."""
    await _set_aside(store, how)
    await spawn(store, "b")
    await send(store, msg("b1", "b"))
    found, cursor = await scan(store, None, LATER)
    assert "m1" not in [m.msg_id for m in found]
    await ready_again(store)
    again, after = await scan(store, cursor, NOW + 5, skip_prefix="m")
    assert [(m.actor_id, m.msg_id, m.restored) for m in again] == [("a", "m1", True)]
    assert await scanned(store, after, LATER) == []


# -- concurrent writers ------------------------------------------------------------------------


async def test_messages_of_concurrent_writers_are_each_returned_once(
    store: Store, second_store: Store
) -> None:
    """Two runtimes' handles store messages at once while a third party scans page after page:
    every message comes back exactly once, none is skipped for having committed after a page
    went past a later one."""
    await spawn(store, "a", "b")
    rng = random.Random(7)
    sent: set[str] = set()
    seen: list[str] = []
    cursor: MessageCursor | None = None
    writing = True

    async def write(handle: Store, name: str) -> None:
        for i in range(40):
            batch = [msg(f"{name}-{i}-{j}", rng.choice("ab")) for j in range(rng.randint(1, 4))]
            sent.update(m.msg_id for m in batch)
            await send(handle, *batch)
            await anyio.lowlevel.checkpoint()

    async def read() -> None:
        nonlocal cursor
        while writing:
            page = await store.scan_messages(cursor, NOW, 3)
            seen.extend(m.msg_id for m in page.messages)
            cursor = page.cursor
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        async with anyio.create_task_group() as writers:
            writers.start_soon(write, store, "one")
            writers.start_soon(write, second_store, "two")
        writing = False
    rest, _ = await scan(store, cursor, NOW)
    seen.extend(m.msg_id for m in rest)
    assert sorted(seen) == sorted(sent)  # each once: no duplicate, none missing


async def test_a_write_that_commits_after_a_later_one_was_scanned_is_still_returned(
    store: Store, second_store: Store, store_target: StoreTarget
) -> None:
    """A transaction that took its place in the mailbox first but commits last (held open
    while another commits and is scanned) is returned by the next page: the cursor is no
    watermark. Only a store that lets writers commit concurrently can be asked this."""
    if store_target.hold_open is None:
        pytest.skip("one writer at a time: a store's commit order is its mailbox order")
    await spawn(store, "a")
    async with store_target.hold_open(store, Batch(messages=[msg("first")])):
        await send(second_store, msg("second"))
        found, cursor = await scan(store)
        assert [m.msg_id for m in found] in (["second"], [])
    assert await scanned(store, cursor) == (["first"] if found else ["first", "second"])


async def test_a_write_held_open_for_the_scanners_own_actor_is_still_returned_to_it(
    store: Store, second_store: Store, store_target: StoreTarget
) -> None:
    """As above, with the actor held by the scanning runtime: leaving other runtimes' actors
    out of its scan skips none of its own, however late they commit; another live runtime's
    chain, past the same rows, returns neither."""
    if store_target.hold_open is None:
        pytest.skip("one writer at a time: a store's commit order is its mailbox order")
    await owned(store, "a", "rt-1")
    await store.register_runtime("rt-2", "host", 2, NOW)
    async with store_target.hold_open(store, Batch(messages=[msg("first")])):
        await send(second_store, msg("second"))
        found, cursor = await scan(store, runtime_id="rt-1")
        assert [m.msg_id for m in found] in (["second"], [])
        theirs, other = await scan(store, runtime_id="rt-2")
        assert theirs == []
    assert await scanned(store, cursor, runtime_id="rt-1") == (
        ["first"] if found else ["first", "second"]
    )
    assert await scanned(store, other, runtime_id="rt-2") == []


async def test_a_step_acking_a_message_leaves_it_out_of_later_pages(store: Store) -> None:
    """An acked message is not ready any more: a scan from the start does not return it."""
    fence = await owned(store, "a")
    await send(store, msg("m1"), msg("m2"))
    await store.apply(Batch(steps=[step("a", fence, "m1")]))
    assert await scanned(store) == ["m2"]
