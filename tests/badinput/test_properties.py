"""Random sequences of sends, failures, restarts, spawns/stops, effects and approvals on a real
SQLite file, checked against a model of what must have happened (I1-I9).

Each example runs one generated op list in a fresh event loop and store:

* ``tell`` (with or without a dedup key), ``ask``, a handler that fails once (retried) or
  always (poison), ``restart`` (aclose + reopen on the same file, with messages in flight),
  ``spawn`` / ``stop`` of ledgers;
* effects through tools on a ``Shop``: ``pay`` (transient failures, retried under its policy,
  ToolFailed past it), ``ship`` timing out (quarantined, then marked done, retried or aborted
  by a person), ``wire`` (held for approval, then approved or rejected).

At the end (and after a final reopen): every acknowledged send is applied exactly once in
order (I1, I2), the state equals the fold of the stored journal and survives recovery from the
snapshots (I3), a dedup key stores one message, no tool ran twice for one ledger key beyond its
retries (I4, I5), each poison message is one dead letter with its full history (I7), every
approval ran the approved call once or not at all (I9), and nothing is left in the mailbox.

Graceful restarts only: SIGKILL crash points are the chaos tests' business (``tests/chaos``).
"""

from __future__ import annotations

import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tether
from tests.badinput import actors as b
from tether.store.sqlite import SqliteStore

MAX_ATTEMPTS = 4  # >= 2 + restarts: a graceful restart may cost a retried message one attempt
MAX_RESTARTS = 2
MAX_LEDGERS = 3

ledger_ix = st.integers(0, MAX_LEDGERS - 1)
ops = st.one_of(
    st.tuples(st.just("tell"), ledger_ix, st.integers(1, 99), st.none() | st.integers(0, 2)),
    st.tuples(st.just("ask"), ledger_ix, st.integers(1, 99)),
    st.tuples(st.just("boom"), ledger_ix, st.sampled_from([1, 99])),
    st.tuples(st.just("restart")),
    st.tuples(st.just("spawn")),
    st.tuples(st.just("stop"), ledger_ix),
    st.tuples(st.just("pay"), st.integers(0, 3)),
    st.tuples(st.just("ship"), st.sampled_from(["done", "retry", "abort"])),
    st.tuples(st.just("wire"), st.booleans()),
)


@dataclass
class Model:
    ledgers: dict[str, list[int]] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)
    keys: set[tuple[str, str]] = field(default_factory=set)
    poison: int = 0
    outcomes: list[str] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)  # tool -> calls expected
    restarts: int = 0
    n: int = 0

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


class Harness:
    def __init__(self, db: Path) -> None:
        self.db = db
        self.rt: tether.Runtime | None = None
        self.m = Model()

    def runtime(self) -> tether.Runtime:
        return tether.Runtime(
            self.db,
            poll_interval=0.01,
            lease_ttl=2.0,
            max_attempts=MAX_ATTEMPTS,
            snapshot_every=3,
            passivate_after=0.3,
        )

    async def open(self) -> tether.Runtime:
        self.rt = self.runtime()
        await self.rt.__aenter__()
        return self.rt

    async def close(self) -> None:
        if self.rt is not None:
            await self.rt.aclose()
            self.rt = None

    def live(self) -> list[str]:
        return [a for a in self.m.ledgers if a not in self.m.stopped]

    def pick(self, ix: int) -> str | None:
        ids = list(self.m.ledgers)
        return ids[ix % len(ids)] if ids else None

    async def quiesce(self, actor_id: str) -> list[int]:
        """Everything sent to ``actor_id`` before this is processed when the ask returns."""
        assert self.rt is not None
        return list(await self.rt.ref(actor_id).ask(b.Log(), timeout=20))

    async def outcomes_are(self, expected: list[str]) -> None:
        assert self.rt is not None
        with anyio.fail_after(20):
            while (got := await self.rt.ref("shop").ask(b.Log(), timeout=20)) != expected:
                assert len(got) <= len(expected), (got, expected)
                await anyio.sleep(0.01)

    async def run(self, op: tuple[Any, ...]) -> None:
        rt, m = self.rt, self.m
        assert rt is not None
        kind = op[0]
        if kind in ("tell", "ask", "boom", "stop"):
            picked = self.pick(op[1])
            if picked is None:
                return
            actor_id = picked
            ref = rt.ref(actor_id)
            if actor_id in m.stopped:
                if kind != "stop":
                    with pytest.raises(tether.ActorStopped):
                        await ref.tell(b.Add(amount=1))
                return
        if kind == "tell":
            _, _, amount, key = op
            if key is None:
                await ref.tell(b.Add(amount=amount))
                m.ledgers[actor_id].append(amount)
            else:
                await ref.tell(b.Add(amount=amount), dedup_key=f"k{key}")
                if (actor_id, f"k{key}") not in m.keys:
                    m.keys.add((actor_id, f"k{key}"))
                    m.ledgers[actor_id].append(amount)
        elif kind == "ask":
            assert await ref.ask(b.Add(amount=op[2]), timeout=20) is None
            m.ledgers[actor_id].append(op[2])
        elif kind == "boom":
            await ref.tell(b.Boom(key=m.fresh("boom"), times=op[2]))
            if op[2] < MAX_ATTEMPTS - 1:
                m.ledgers[actor_id].append(1000)
            else:
                m.poison += 1
        elif kind == "stop":
            assert await self.quiesce(actor_id) == m.ledgers[actor_id]
            await ref.stop("done with it")
            m.stopped.add(actor_id)
        elif kind == "spawn":
            if len(m.ledgers) < MAX_LEDGERS:
                actor_id = m.fresh("ledger-")
                await rt.spawn(b.Ledger, actor_id)
                m.ledgers[actor_id] = []
        elif kind == "restart":
            if m.restarts < MAX_RESTARTS:
                m.restarts += 1
                await self.close()
                await self.open()
        elif kind == "pay":
            transient = op[1]
            order = m.fresh("o")
            b.TRANSIENT[order] = transient
            text = await rt.ref("shop").ask(b.Pay(order_id=order, cents=7), timeout=20)
            if transient < 3:
                assert text == f"paid 7 for {order}"
            else:
                assert text.startswith(f"pay {order} failed:")
                assert "503" in text
            m.outcomes.append(text)
            m.calls["pay"] = m.calls.get("pay", 0) + min(transient + 1, 3)
        elif kind == "ship":
            order = m.fresh("o")
            b.AMBIGUOUS.add(order)
            await rt.ref("shop").tell(b.Ship(order_id=order))
            with anyio.fail_after(20):
                while not (held := await rt.quarantine.list("shop")):
                    await anyio.sleep(0.01)
            [q] = held
            assert q.args == {"order_id": order}
            assert "did not answer" in q.reason
            m.calls["ship"] = m.calls.get("ship", 0) + 1
            if op[1] == "done":
                await rt.quarantine.mark_done(q.key, "delivered by hand", by="ops")
                m.outcomes.append("delivered by hand")
            elif op[1] == "retry":
                await rt.quarantine.retry(q.key, by="ops")
                m.outcomes.append(f"shipped {order}")
                m.calls["ship"] += 1
            else:
                await rt.quarantine.abort(q.key, "lost", by="ops")
                m.outcomes.append(f"ship {order} aborted: lost")
            await self.outcomes_are(m.outcomes)
        elif kind == "wire":
            to = m.fresh("acct")
            await rt.ref("shop").tell(b.Wire(to=to, cents=5))
            with anyio.fail_after(20):
                while not (pending := await rt.approvals.pending("shop")):
                    await anyio.sleep(0.01)
            [req] = pending
            assert req.args == {"to": to, "cents": 5}
            if op[1]:
                await rt.approvals.decide(req.request_id, tether.Approve(by="ana"))
                m.outcomes.append(f"wired 5 to {to}")
                m.calls["wire"] = m.calls.get("wire", 0) + 1
            else:
                await rt.approvals.decide(req.request_id, tether.Reject(by="ana", reason="no"))
                m.outcomes.append(f"wire {to} rejected: no")
            await self.outcomes_are(m.outcomes)

    async def check(self) -> None:
        rt, m = self.rt, self.m
        assert rt is not None
        for actor_id in self.live():
            got = await self.quiesce(actor_id)
            assert got == m.ledgers[actor_id], (actor_id, got, m.ledgers[actor_id])  # I1, I2
        await self.outcomes_are(m.outcomes)
        letters = await rt.dead_letters.list()
        assert len(letters) == m.poison  # I7: each poison message, once
        for letter in letters:
            assert letter.type == "Boom"
            assert letter.attempts == MAX_ATTEMPTS
            assert letter.reason == f"failed {MAX_ATTEMPTS} times; max_attempts={MAX_ATTEMPTS}"
            assert len(letter.errors) == MAX_ATTEMPTS
            assert letter.errors[-1].startswith(f"attempt {MAX_ATTEMPTS}: RuntimeError: boom")
        assert await rt.quarantine.list() == []
        assert await rt.approvals.pending() == []
        called: dict[str, int] = {}
        per_key: dict[tuple[str, str], int] = {}
        for tool, key in b.CALLS:
            called[tool] = called.get(tool, 0) + 1
            per_key[(tool, key)] = per_key.get((tool, key), 0) + 1
        assert called == {k: v for k, v in m.calls.items() if v}  # I4, I9
        assert all(n <= 3 for (tool, _), n in per_key.items() if tool == "pay")  # retries only
        assert all(n <= 2 for (tool, _), n in per_key.items() if tool == "ship")  # +1 by a person
        assert all(n == 1 for (tool, _), n in per_key.items() if tool == "wire")

    def check_store(self) -> None:
        """With the runtime closed: the journal folds to the model (I3), one row per key."""
        con = sqlite3.connect(self.db)
        try:
            for actor_id, log in self.m.ledgers.items():
                payloads = [
                    p
                    for (p,) in con.execute(
                        "SELECT payload FROM journal WHERE actor_id = ? ORDER BY seq", (actor_id,)
                    )
                ]
                assert b.fold(payloads) == log, actor_id
                seqs = [
                    s
                    for (s,) in con.execute(
                        "SELECT seq FROM journal WHERE actor_id = ? ORDER BY seq", (actor_id,)
                    )
                ]
                assert seqs == list(range(1, len(seqs) + 1)), actor_id
            keys = con.execute(
                "SELECT actor_id, dedup_key, COUNT(*) FROM dedup GROUP BY actor_id, dedup_key"
            ).fetchall()
            assert {(a, k) for a, k, _ in keys} == self.m.keys
            assert all(n == 1 for _, _, n in keys)
            assert con.execute("SELECT COUNT(*) FROM mailbox").fetchone() == (0,)
            stopped = {
                a for (a,) in con.execute("SELECT actor_id FROM actors WHERE status = 'stopped'")
            }
            assert stopped == self.m.stopped
        finally:
            con.close()


async def play(db: Path, program: list[tuple[Any, ...]]) -> None:
    b.FAILS.clear()
    b.CALLS.clear()
    b.TRANSIENT.clear()
    b.AMBIGUOUS.clear()
    h = Harness(db)
    rt = await h.open()
    try:
        await rt.spawn(b.Shop, "shop")
        await rt.spawn(b.Ledger, "ledger-0")
        h.m.ledgers["ledger-0"] = []
        for op in program:
            await h.run(op)
        await h.check()
    finally:
        await h.close()
    h.check_store()
    # Recovery from snapshots + journal gives the same states (I3), and nothing reruns.
    calls = list(b.CALLS)
    async with h.runtime() as rt:
        h.rt = rt
        await h.check()
        h.rt = None
    assert calls == b.CALLS


async def bounded(db: Path, program: list[tuple[Any, ...]]) -> None:
    with anyio.fail_after(120):
        await play(db, program)


@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(program=st.lists(ops, min_size=4, max_size=18))
def test_random_programs_keep_the_invariants(program: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(bounded, Path(tmp) / "t.db", program, backend="asyncio")


# -- what the random programs found ---------------------------------------------------------------


class SlowScan(SqliteStore):
    """Mailbox scans take a while: widens the window between an activation and its first scan."""

    async def pending(self, actor_id: str, now: float, limit: int, **kw: Any) -> list[Any]:
        await anyio.sleep(0.3)
        return await super().pending(actor_id, now, limit, **kw)


@pytest.mark.anyio
async def test_a_message_stored_before_an_activation_is_not_overtaken(tmp_path: Path) -> None:
    """Mail stored while the actor was not active (here: before a restart) is delivered before
    a message sent once its new cell exists but has not read its mailbox yet (I1, I2)."""
    db = tmp_path / "a.db"
    async with tether.Runtime(db, poll_interval=0.01) as rt:
        await rt.spawn(b.Ledger, "l")
    async with tether.Runtime(store=SlowScan(db), poll_interval=0.01) as rt:
        await rt.ref("l").tell(b.Add(amount=1))  # stored; activates the actor
        with anyio.fail_after(5):
            while "l" not in rt.cells:
                await anyio.sleep(0.005)
        await rt.ref("l").tell(b.Add(amount=2))  # handed to the cell, which is still scanning
        assert await rt.ref("l").ask(b.Log(), timeout=5) == [1, 2]
