"""A step the breaker refused is parked until the breaker's open period ends, and delivered
again once the scans reach that time. When the park is stored only after that time (a slow
commit while the breaker's period ran out), the scans may already have gone past it while
the message still counted as the actor's own: it must still be delivered again, not left
parked while its actor stays active."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from tests.runtime import guard_actors as ga
from tests.runtime.guard_actors import Call, Ping
from tests.runtime.test_guards import runtime
from tether.runtime import parking
from tether.store.records import Park
from tether.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    ga.CALLS.clear()
    ga.FAILING["brittle"] = True
    yield
    ga.CALLS.clear()
    ga.FAILING["brittle"] = True


async def test_a_step_parked_after_its_wait_was_over_is_delivered_again(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    real_park = parking.park
    slowed: list[float] = []

    async def slow_park(cell: Any, m: Any, step: Any) -> None:
        # The breaker's open period runs out, and the scans go past its end, before the park
        # is stored; then the scans see the stored park while the cell still holds the message.
        commit = cell.commit

        async def late_commit(write: Any, *more: Any) -> Any:
            if type(write) is Park and not slowed:
                slowed.append(write.until)
                ga.FAILING["brittle"] = False
                clock.advance(write.until - clock.now() + 1.0)
                await anyio.sleep(0.3)  # scans every 20 ms: their due window passes `until`
                done = await commit(write, *more)
                await anyio.sleep(0.3)  # and the stored park is scanned while still held
                return done
            return await commit(write, *more)

        cell.commit = late_commit
        try:
            await real_park(cell, m, step)
        finally:
            del cell.commit

    monkeypatch.setattr(parking, "park", slow_park)
    async with runtime(store_url, clock=clock) as rt:
        s = await rt.spawn(ga.StubbornBrittleCaller, "s1")
        await s.tell(Call(n=2))
        with anyio.fail_after(10):
            while rt.cells["s1"].state.lines != ["ok 2"]:
                await anyio.sleep(0.02)
        assert await s.ask(Ping(), timeout=5) == "pong"
    assert len(slowed) == 1
    assert ga.CALLS == [("brittle", 2)] * 3
