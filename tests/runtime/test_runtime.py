"""The durable actor core through its public API, on real stores: SQLite files, and
PostgreSQL too where a test takes ``store_url``."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests import sample_actors as s
from tether.store.records import MessageCursor, MessagePage

pytestmark = pytest.mark.anyio


def fast(path: Path | str, **kw: object) -> tether.Runtime:
    """A runtime with short timings, so tests never wait for real-time defaults."""
    opts: dict[str, object] = {"poll_interval": 0.02, "lease_ttl": 2.0}
    opts.update(kw)
    return tether.Runtime(path, **opts)  # type: ignore[arg-type]


def journal_len(db: Path, actor_id: str) -> int:
    with closing(sqlite3.connect(db)) as con, con:
        return int(
            con.execute("SELECT COUNT(*) FROM journal WHERE actor_id = ?", (actor_id,)).fetchone()[
                0
            ]
        )


def mailbox_len(db: Path) -> int:
    with closing(sqlite3.connect(db)) as con, con:
        return int(con.execute("SELECT COUNT(*) FROM mailbox").fetchone()[0])


async def test_tell_then_ask_sees_the_persisted_event(store_url: str) -> None:
    """The DESIGN §4 example works word for word on an SQLite file."""
    async with fast(store_url) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Deposit(amount=5))
        assert await acct.ask(s.GetBalance(), timeout=5) == 5


async def test_spawning_an_existing_id_resumes_its_state_after_a_restart(store_url: str) -> None:
    """I3: a new Runtime on the same file folds the committed journal back into the state."""
    db = store_url
    async with fast(db) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        for amount in (1, 2, 3):
            await acct.tell(s.Deposit(amount=amount))
        assert await acct.ask(s.GetLog(), timeout=5) == [1, 2, 3]
    async with fast(db) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        assert await acct.ask(s.GetLog(), timeout=5) == [1, 2, 3]
        assert await rt.ref("acct-1").ask(s.GetBalance(), timeout=5) == 6


async def test_spawning_an_id_taken_by_another_class_is_refused(store_url: str) -> None:
    """Actor ids are unique in a store, whatever the class."""
    async with fast(store_url) as rt:
        await rt.spawn(s.Account, "x")
        with pytest.raises(tether.ConfigError, match=r"taken by a tests\.sample_actors:Account"):
            await rt.spawn(s.Lifecycle, "x")


async def test_a_message_of_an_unaccepted_type_is_refused_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    """The error names the actor, the type and the accepted types; the mailbox stays empty."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        ref = await rt.spawn(s.Greeter, "greeter", greeting="hi")
        with pytest.raises(tether.MessageRejected) as info:
            await ref.tell(s.Deposit(amount=1))
        assert "'greeter'" in str(info.value)
        assert "Deposit" in str(info.value)
        assert "GetBalance" in str(info.value)
        assert isinstance(info.value, TypeError)
        assert mailbox_len(db) == 0


async def test_sending_to_an_unknown_id_raises_actor_not_found() -> None:
    """``rt.ref`` is lazy; the first send says the actor does not exist."""
    async with tether.Runtime(":memory:") as rt:
        with pytest.raises(tether.ActorNotFound, match="'nobody'"):
            await rt.ref("nobody").tell(s.GetBalance())
        with pytest.raises(tether.ActorNotFound):
            await rt.lookup("nobody")


async def test_the_same_dedup_key_twice_stores_one_message(tmp_path: Path) -> None:
    """I1: dedup holds both before and after the first message was processed."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Deposit(amount=10), dedup_key="k1")
        await acct.tell(s.Deposit(amount=10), dedup_key="k1")
        assert await acct.ask(s.GetBalance(), timeout=5) == 10
        await acct.tell(s.Deposit(amount=10), dedup_key="k1")  # after it was processed
        await acct.tell(s.Deposit(amount=1), dedup_key="k2")
        assert await acct.ask(s.GetBalance(), timeout=5) == 11
    assert journal_len(db, "acct-1") == 2


async def test_asking_again_with_the_same_dedup_key_returns_the_first_reply(store_url: str) -> None:
    """An idempotent ask is answered from the stored reply, even from a new Runtime."""
    db = store_url
    async with fast(db) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Deposit(amount=3))
        assert await acct.ask(s.GetBalance(), timeout=5, dedup_key="q") == 3
        await acct.tell(s.Deposit(amount=4))
        assert await acct.ask(s.GetBalance(), timeout=5, dedup_key="q") == 3
    async with fast(db) as rt:
        assert await rt.ref("acct-1").ask(s.GetBalance(), timeout=5, dedup_key="q") == 3


async def test_messages_to_one_actor_are_delivered_in_order(store_url: str) -> None:
    """Per-actor delivery follows the order the sends were acknowledged."""
    async with fast(store_url) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        for i in range(50):
            await acct.tell(s.Deposit(amount=i))
        assert await acct.ask(s.GetLog(), timeout=5) == list(range(50))


async def test_concurrent_steps_of_many_actors_share_commits(store_url: str) -> None:
    """Group commit: far fewer transactions than writes under concurrent load."""
    async with fast(store_url) as rt:
        refs = [await rt.spawn(s.Account, f"a{i}") for i in range(50)]
        before = rt.stats()
        async with anyio.create_task_group() as tg:
            for ref in refs:
                for _ in range(10):
                    tg.start_soon(ref.tell, s.Deposit(amount=1))
        for ref in refs:
            assert await ref.ask(s.GetBalance(), timeout=5) == 10
        after = rt.stats()
        writes = after["writes"] - before["writes"]
        commits = after["commits"] - before["commits"]
        assert writes >= 1000  # 500 tells + 500 steps (+ claims and asks)
        assert commits < writes / 5


async def test_a_failed_handler_leaves_no_trace_but_its_redelivery(tmp_path: Path) -> None:
    """I2: the failed attempt's event and outbox are gone; the retry commits once."""
    db = tmp_path / "a.db"
    s.failures.clear()
    async with fast(db) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Fail(key="twice", times=2))
        assert await acct.ask(s.GetLog(), timeout=5) == [1000]
    assert s.failures["twice"] == 2
    assert journal_len(db, "acct-1") == 1


async def test_the_outbox_is_committed_with_the_step(store_url: str) -> None:
    """I2: a message sent from a handler is stored with the step and delivered once."""
    async with fast(store_url) as rt:
        a = await rt.spawn(s.Account, "a")
        b = await rt.spawn(s.Account, "b")
        await a.tell(s.Forward(to="b", amount=7))
        assert await a.ask(s.GetBalance(), timeout=5) == -7
        with anyio.fail_after(5):
            while await b.ask(s.GetBalance(), timeout=5) != 7:
                await anyio.sleep(0.01)


async def test_a_message_that_always_fails_goes_to_dead_letters_and_the_actor_goes_on(
    store_url: str,
) -> None:
    """I7: after max_attempts the message is dead-lettered with one error per attempt."""
    s.failures.clear()
    async with fast(store_url, max_attempts=3) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        with pytest.raises(tether.MessageDeadLettered) as info:
            await acct.ask(s.Fail(key="always"), timeout=5)
        assert len(info.value.errors) == 4  # three attempts and the verdict
        await acct.tell(s.Deposit(amount=1))
        assert await acct.ask(s.GetBalance(), timeout=5) == 1
        [letter] = await rt.dead_letters.list()
        assert letter.actor_id == "acct-1"
        assert letter.type == "Fail"
        assert letter.attempts == 3
        assert [e.split(":")[0] for e in letter.errors] == ["attempt 1", "attempt 2", "attempt 3"]
        assert "RuntimeError: boom always" in letter.errors[0]


async def test_dead_letters_can_be_retried_and_discarded(store_url: str) -> None:
    """A retried dead letter is delivered again with a fresh attempt count."""
    s.failures.clear()
    async with fast(store_url, max_attempts=2) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Fail(key="thrice", times=3))
        await acct.tell(s.Fail(key="forever"))
        with anyio.fail_after(5):
            while len(await rt.dead_letters.list()) < 2:
                await anyio.sleep(0.01)
        thrice, forever = await rt.dead_letters.list()
        await rt.dead_letters.retry(thrice.msg_id)  # one more failure, then success
        with anyio.fail_after(5):
            while await acct.ask(s.GetBalance(), timeout=5) != 1000:
                await anyio.sleep(0.01)
        await rt.dead_letters.discard(forever.msg_id)
        assert await rt.dead_letters.list() == []
        with pytest.raises(tether.DeadLetterNotFound):
            await rt.dead_letters.discard(forever.msg_id)
        with pytest.raises(tether.DeadLetterNotFound):
            await rt.dead_letters.retry("no-such-message")


async def test_a_dead_letter_retried_from_another_process_reaches_its_active_actor(
    store_url: str,
) -> None:
    """The retry is stored by an admin runtime (as ``tether dead-letters retry`` does); the
    actor is active in the runtime that sent the message first, whose scheduler must pick it
    up although its id carries that runtime's own prefix."""
    s.failures.clear()
    db = store_url
    async with fast(db, max_attempts=2, passivate_after=None) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Fail(key="thrice", times=3))
        with anyio.fail_after(5):
            while not await rt.dead_letters.list():
                await anyio.sleep(0.01)
        [letter] = await rt.dead_letters.list()
        async with fast(db, serve=False) as admin:
            await admin.dead_letters.retry(letter.msg_id)  # one more failure, then success
        with anyio.fail_after(5):
            while await acct.ask(s.GetBalance(), timeout=5) != 1000:
                await anyio.sleep(0.01)
        assert await rt.dead_letters.list() == []


async def test_a_message_stored_after_its_ask_timed_out_still_reaches_its_actor(
    store_url: str,
) -> None:
    """The ask gives up while its commit is slow; the commit lands afterwards, and the message
    is delivered to the (never passivating) actor at once, not at its next activation."""
    async with fast(store_url, passivate_after=None) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        real = rt.store.apply

        async def slow(batch: Any) -> Any:
            await anyio.sleep(0.3)
            return await real(batch)

        rt.store.apply = slow  # type: ignore[method-assign]
        with pytest.raises(tether.AskTimeout):
            await acct.ask(s.Deposit(amount=7), timeout=0.1)
        rt.store.apply = real  # type: ignore[method-assign]
        with anyio.fail_after(3):
            while await acct.ask(s.GetBalance(), timeout=5) != 7:
                await anyio.sleep(0.02)


async def test_recovery_from_a_snapshot_equals_the_full_fold(tmp_path: Path) -> None:
    """I3: snapshot + tail gives exactly the state of folding the whole journal."""
    db = tmp_path / "a.db"
    async with fast(db, snapshot_every=7) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        for i in range(40):
            await acct.tell(s.Deposit(amount=i))
        assert await acct.ask(s.GetBalance(), timeout=5) == sum(range(40))
    with closing(sqlite3.connect(db)) as con, con:
        (snap_seq,) = con.execute("SELECT seq FROM snapshots WHERE actor_id = 'acct-1'").fetchone()
    assert snap_seq == 35
    async with fast(db, snapshot_every=7) as rt:
        from_snapshot = await rt.ref("acct-1").ask(s.GetLog(), timeout=5)
    with closing(sqlite3.connect(db)) as con, con:
        con.execute("DELETE FROM snapshots")
    async with fast(db, snapshot_every=10**9) as rt:
        full_fold = await rt.ref("acct-1").ask(s.GetLog(), timeout=5)
    assert from_snapshot == full_fold == list(range(40))


async def test_a_delayed_message_survives_a_restart(store_url: str) -> None:
    """Durable timers: a tell with delay= is delivered by the next Runtime when due."""
    db = store_url
    async with fast(db) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Deposit(amount=9), delay=0.3)
        assert await acct.ask(s.GetBalance(), timeout=5) == 0
    async with fast(db) as rt:
        acct = rt.ref("acct-1")
        with anyio.fail_after(5):
            while await acct.ask(s.GetBalance(), timeout=5) != 9:
                await anyio.sleep(0.02)


async def test_a_reopened_runtime_resumes_actors_with_queued_messages(tmp_path: Path) -> None:
    """Messages stored but not processed when a runtime closed are processed by the next one."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Deposit(amount=1), delay=0.2)
    async with fast(db) as rt:
        with anyio.fail_after(5):
            while "acct-1" not in rt.cells or rt.cells["acct-1"].processed < 1:
                await anyio.sleep(0.02)
    assert journal_len(db, "acct-1") == 1


async def test_an_idle_actor_passivates_and_its_next_message_reactivates_it(store_url: str) -> None:
    """Virtual actors: the id is the address whether the actor is in memory or not."""
    s.Lifecycle.calls.clear()
    async with fast(store_url, passivate_after=0.1) as rt:
        ref = await rt.spawn(s.Lifecycle, "life")
        with anyio.fail_after(5):
            while "life" in rt.cells or len(s.Lifecycle.calls) < 2:
                await anyio.sleep(0.02)
        assert s.Lifecycle.calls == ["start:life", "stop:life"]
        assert await ref.ask(s.GetBalance(), timeout=5) == 0
        assert "life" in rt.cells
        assert s.Lifecycle.calls == ["start:life", "stop:life", "start:life"]


async def test_a_stopped_actor_refuses_messages_and_its_queue_is_dead_lettered(
    store_url: str,
) -> None:
    """Stopping is durable; nothing queued is dropped without a record."""
    db = store_url
    async with fast(db) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Deposit(amount=1), delay=60)
        await acct.stop("closed account")
        with pytest.raises(tether.ActorStopped, match="closed account"):
            await acct.tell(s.Deposit(amount=1))
        [letter] = await rt.dead_letters.list()
        assert letter.reason == "actor stopped: closed account"
    async with fast(db) as rt:
        with pytest.raises(tether.ActorStopped):
            await rt.ref("acct-1").tell(s.Deposit(amount=1))
        with pytest.raises(tether.ActorStopped):
            await rt.spawn(s.Account, "acct-1")


async def test_an_actor_can_stop_itself(store_url: str) -> None:
    """``self.stop()`` takes effect when the step commits."""
    async with fast(store_url) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.ask(s.StopMe(reason="done"), timeout=5)
        with pytest.raises(tether.ActorStopped, match="done"):
            await acct.tell(s.Deposit(amount=1))


async def test_an_ask_without_a_reply_in_time_raises_ask_timeout(store_url: str) -> None:
    """The message stays queued; only the wait ends."""
    async with fast(store_url) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Sleep(seconds=0.3))
        with pytest.raises(tether.AskTimeout) as info:
            await acct.ask(s.Deposit(amount=1), timeout=0.05)
        assert isinstance(info.value, TimeoutError)
        assert await acct.ask(s.GetBalance(), timeout=5) == 1


async def test_ask_deadlines_share_one_timer_and_fire_in_deadline_order() -> None:
    """A short timeout asked after a long one still fires on time; the deadlines of answered
    asks (enough of them to compact the runtime's deadline heap) never fire."""
    async with tether.Runtime(":memory:") as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        for _ in range(200):
            assert await acct.ask(s.GetBalance(), timeout=0.2) == 0
        await acct.tell(s.Sleep(seconds=2.0))
        outcomes: dict[str, object] = {}

        async def ask(name: str, timeout: float) -> None:
            started = anyio.current_time()
            try:
                outcomes[name] = await acct.ask(s.GetBalance(), timeout=timeout)
            except tether.AskTimeout:
                outcomes[name] = anyio.current_time() - started

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "long", 10.0)
            await anyio.sleep(0.01)
            tg.start_soon(ask, "short", 0.1)
        assert outcomes["long"] == 0
        waited = outcomes["short"]
        assert isinstance(waited, float)
        assert 0.1 <= waited < 1.5


async def test_spawn_arguments_are_stored_and_given_again_on_recovery(store_url: str) -> None:
    """``rt.spawn(cls, id, **init)`` passes init to the constructor, now and after restarts."""
    db = store_url
    async with fast(db) as rt:
        ref = await rt.spawn(s.Greeter, "g", greeting="hello", punctuation="?")
        assert await ref.ask(s.GetBalance(), timeout=5) == "hello?"
    async with fast(db) as rt:
        assert await rt.ref("g").ask(s.GetBalance(), timeout=5) == "hello?"


async def test_an_undecodable_stored_message_is_dead_lettered_and_the_runtime_keeps_serving(
    tmp_path: Path,
) -> None:
    """A corrupt mailbox row is recorded with its reason; the messages behind it still run."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        await acct.tell(s.Deposit(amount=1), delay=0.3)
        await acct.tell(s.Deposit(amount=2), delay=0.3)
    with closing(sqlite3.connect(db)) as con, con:
        first = con.execute("SELECT MIN(seq) FROM mailbox").fetchone()[0]
        con.execute("UPDATE mailbox SET payload = x'c1ffee' WHERE seq = ?", (first,))
    async with fast(db) as rt:
        acct = rt.ref("acct-1")
        with anyio.fail_after(5):
            while await acct.ask(s.GetBalance(), timeout=5) != 2:
                await anyio.sleep(0.02)
        [letter] = await rt.dead_letters.list()
        assert letter.reason.startswith("undecodable message")
        assert "undecodable payload" in letter.errors[-1]


async def test_messages_to_a_corrupt_journal_wait_and_other_actors_keep_working(
    tmp_path: Path,
) -> None:
    """An actor whose journal cannot be decoded does not start; nothing is lost or skipped."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        await (await rt.spawn(s.Account, "bad")).ask(s.Deposit(amount=1), timeout=5)
        await rt.spawn(s.Account, "good")
    with closing(sqlite3.connect(db)) as con, con:
        con.execute("UPDATE journal SET payload = x'c1' WHERE actor_id = 'bad'")
    async with fast(db) as rt:
        with pytest.raises(tether.AskTimeout):
            await rt.ref("bad").ask(s.GetBalance(), timeout=0.3)
        good = rt.ref("good")
        await good.tell(s.Deposit(amount=4))
        assert await good.ask(s.GetBalance(), timeout=5) == 4
    with closing(sqlite3.connect(db)) as con, con:
        assert con.execute("SELECT COUNT(*) FROM mailbox WHERE actor_id = 'bad'").fetchone()[0] == 1


async def test_using_a_closed_runtime_raises_runtime_closed() -> None:
    """Sends outside ``async with`` fail clearly."""
    rt = tether.Runtime(":memory:")
    async with rt:
        ref = await rt.spawn(s.Account, "acct-1")
    with pytest.raises(tether.RuntimeClosed):
        await ref.tell(s.Deposit(amount=1))


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_attempts", 0), ("lease_ttl", -1), ("snapshot_every", 1.5), ("poll_interval", "fast")],
)
def test_bad_runtime_settings_are_refused_by_name(option: str, value: object) -> None:
    """Each bad setting raises ConfigError naming it."""
    with pytest.raises(tether.ConfigError, match=option):
        tether.Runtime(":memory:", **{option: value})  # type: ignore[arg-type]


async def test_unstorable_spawn_arguments_are_refused() -> None:
    """Spawn arguments are stored, so they must encode; nothing is spawned otherwise."""
    async with tether.Runtime(":memory:") as rt:
        with pytest.raises(tether.ConfigError, match="cannot be stored"):
            await rt.spawn(s.Greeter, "g", greeting=object())
        with pytest.raises(tether.ConfigError, match="greeting"):
            await rt.spawn(s.Greeter, "g")  # a required constructor argument is missing
        with pytest.raises(tether.ConfigError, match="takes no spawn arguments"):
            await rt.spawn(s.Account, "acct", colour="red")
        for actor_id in ("g", "acct"):
            with pytest.raises(tether.ActorNotFound):
                await rt.lookup(actor_id)


async def test_a_failing_store_read_in_the_scheduler_does_not_stop_the_runtime(
    store_url: str,
) -> None:
    """Background loops log a store error and start again; delayed messages still arrive."""
    async with fast(store_url) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        real = rt.store.scan_messages
        calls = 0

        async def flaky(
            cursor: MessageCursor | None,
            now: float,
            limit: int,
            *,
            skip_prefix: str | None = None,
            runtime_id: str | None = None,
        ) -> MessagePage:
            nonlocal calls
            calls += 1
            if calls <= 2:
                raise OSError("disk I/O error")
            return await real(cursor, now, limit, skip_prefix=skip_prefix, runtime_id=runtime_id)

        rt.store.scan_messages = flaky  # type: ignore[method-assign]
        await acct.tell(s.Deposit(amount=3), delay=0.1)
        with anyio.fail_after(10):
            while await acct.ask(s.GetBalance(), timeout=5) != 3:
                await anyio.sleep(0.02)
        assert calls > 2


async def test_a_message_to_an_idle_local_actor_counts_its_attempt_in_the_insert(
    tmp_path: Path,
) -> None:
    """Two commits per message (insert with the attempt counted, then the step), not three;
    the stored attempt count is still 1 while the handler runs (I7)."""
    db = tmp_path / "a.db"
    async with fast(db) as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        assert await acct.ask(s.GetBalance(), timeout=5) == 0
        before = rt.stats()["commits"]
        assert await acct.ask(s.GetBalance(), timeout=5) == 0
        assert rt.stats()["commits"] - before == 2
        await acct.tell(s.Sleep(seconds=0.3))
        await anyio.sleep(0.1)
        with closing(sqlite3.connect(db)) as con, con:
            assert con.execute("SELECT attempts FROM mailbox").fetchall() == [(1,)]


async def test_a_failed_attempt_and_the_count_of_its_redelivery_share_one_commit() -> None:
    """insert, failure (+ the retry's attempt), step: three commits for one retried message."""
    s.failures.clear()
    async with fast(":memory:") as rt:
        acct = await rt.spawn(s.Account, "acct-1")
        assert await acct.ask(s.GetBalance(), timeout=5) == 0
        before = rt.stats()["commits"]
        await acct.ask(s.Fail(key="once", times=1), timeout=5)
        assert rt.stats()["commits"] - before == 3
        assert await acct.ask(s.GetLog(), timeout=5) == [1000]
