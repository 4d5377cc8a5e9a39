"""Which group commits concern only their own runtime (``Batch.local``, ``Mail.local``): a
store with a change feed sends no notice for those, since another runtime's scan leaves the
mail of actors active here out anyway. A message for an actor active here and its step are
local; a step whose reply answers an ask waiting elsewhere, or whose outbox goes to an actor
not active here, is not, nor is a message for an actor not active here."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import tether
from tests import sample_actors as s
from tether.store.records import Batch, BatchResult

pytestmark = pytest.mark.anyio


class Batches:
    """Every batch ``rt`` applies: (local, message ids, stepped message ids)."""

    def __init__(self, rt: tether.Runtime) -> None:
        self.seen: list[tuple[bool, list[str], list[str]]] = []
        apply = rt.store.apply

        async def applying(batch: Batch) -> BatchResult:
            self.seen.append(
                (
                    batch.local,
                    [m.actor_id for m in batch.messages],
                    [st.actor_id for st in batch.steps],
                )
            )
            return await apply(batch)

        rt.store.apply = applying  # type: ignore[method-assign]

    def local(self, actor_id: str) -> set[bool]:
        """Whether each batch that held a message or a step of ``actor_id`` was local."""
        return {loc for loc, msgs, steps in self.seen if actor_id in msgs or actor_id in steps}


async def test_only_writes_for_actors_active_here_make_a_local_batch(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    async with (
        tether.Runtime(db, poll_interval=0.02, passivate_after=None) as rt,
        tether.Runtime(db, serve=False, poll_interval=0.02) as admin,
    ):
        here = await rt.spawn(s.Account, "here")
        assert await here.ask(s.GetBalance(), timeout=10) == 0  # active here
        await rt.spawn(s.Account, "there")
        await rt.ref("there").ask(s.GetBalance(), timeout=10)
        rt.cells["there"].leave()  # "there" gives its lease back: not active here any more
        with anyio.fail_after(10):
            while "there" in rt.cells:
                await anyio.sleep(0.01)
        batches = Batches(rt)

        for amount in (1, 2):  # to an actor active here, and its steps (the ask waits here)
            await here.tell(s.Deposit(amount=amount))
        assert await here.ask(s.GetBalance(), timeout=10) == 3
        assert batches.local("here") == {True}

        batches.seen.clear()  # an ask from another process: its reply is waited for there
        assert await admin.ref("here").ask(s.GetBalance(), timeout=10) == 3
        assert False in {loc for loc, _, steps in batches.seen if "here" in steps}

        batches.seen.clear()  # a message for an actor not active here
        await rt.ref("there").tell(s.Deposit(amount=5))
        assert (False, ["there"], []) in batches.seen
