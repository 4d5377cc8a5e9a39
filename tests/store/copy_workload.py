"""A store with something in every table ``tether copy`` moves, made by a real runtime: an
account's journal and snapshot, an agent's effects ledger, a banker's wire waiting for a
person (approval, parked message), messages that failed for good (dead letters, one of them
discarded: the audit log), a delayed message still in the mailbox, dedup keys and replies, a
watch."""

from __future__ import annotations

import anyio

import tether
from tests.runtime import effect_actors as fx
from tests.sample_actors import Account, Deposit, Fail, GetBalance
from tests.supervision_actors import Watcher

DEPOSITS = 30


async def fill(url: str) -> str:
    """Fill the store at ``url``; the request id of the wire's pending approval."""
    fx.reset()
    async with tether.Runtime(url, poll_interval=0.02, max_attempts=2, snapshot_every=10) as rt:
        account = await rt.spawn(Account, "acct")
        for i in range(DEPOSITS):
            await account.tell(Deposit(amount=i + 1), dedup_key=f"d{i}")
        assert await account.ask(GetBalance(), timeout=10) == DEPOSITS * (DEPOSITS + 1) // 2
        await account.tell(Deposit(amount=1000), delay=3600.0)  # waits in the mailbox
        await account.tell(Fail(key="boom"))
        await account.tell(Fail(key="bang"))
        agent = await rt.spawn(fx.Agent, "agent")
        assert await agent.ask(fx.Do(effects=["refund", "email"]), timeout=10) == [
            "refund o0 100",
            "sent to a@b.c",
        ]
        banker = await rt.spawn(fx.Banker, "banker")
        await rt.spawn(Watcher, "watcher")
        await rt.watch("watcher", "acct")
        await banker.tell(fx.Wire(to="supplier", cents=500))
        with anyio.fail_after(10):
            while not (pending := await rt.approvals.pending()):
                await anyio.sleep(0.02)
            while len(letters := await rt.dead_letters.list()) < 2:
                await anyio.sleep(0.02)
        await rt.dead_letters.discard(letters[0].msg_id)  # audited
        [request] = pending
        return request.request_id


async def finish_in(url: str, request_id: str) -> tuple[int, list[list[str]]]:
    """Serve the (copied) store: approve the wire, and read back what the actors hold."""
    fx.reset()
    async with tether.Runtime(url, poll_interval=0.02) as rt:
        await rt.approvals.decide(request_id, tether.Approve(by="ops"))
        balance = await rt.ref("acct").ask(GetBalance(), timeout=10)
        with anyio.fail_after(10):
            while True:
                assert await rt.ref("banker").ask(fx.Ping(), timeout=10) == "pong"
                cell = rt.cells.get("banker")
                if cell is not None and cell.state.results:
                    return int(balance), list(cell.state.results)
                await anyio.sleep(0.02)
