"""The interrupt mechanism on a plain actor: a message class with ``interrupts = True`` that
arrives while a step runs, between two of its tool calls, stops the next call from being made
(its intent is recorded as failed, "not made"), and is delivered right after the step."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import tether
from tests.runtime import interrupt_actors as ia

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    ia.reset()
    yield
    ia.reset()


async def test_a_call_after_the_interrupt_arrived_is_not_made(tmp_path: Path) -> None:
    async with tether.Runtime(tmp_path / "store.db", poll_interval=0.02) as rt:
        worker = await rt.spawn(ia.Worker, "w")
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.tell, ia.TwoCalls(n=7))
            with anyio.fail_after(10):
                await ia.BETWEEN["entered"].wait()
            await worker.tell(ia.Halt())  # arrives while the step waits between its calls
            ia.BETWEEN["release"].set()
        with anyio.fail_after(10):
            while len(lines := rt.cells["w"].state.lines) < 2:
                await anyio.sleep(0.01)
        rows = {e.tool: e for e in await rt.store.find_effects(actor_id="w")}
    assert lines == ["second: not made (interrupted by Halt)", "halted"]
    assert ia.CALLS == ["first"]
    assert rows["first"].status == "done"
    assert rows["second"].status == "failed"
    assert rows["second"].error == "not made: interrupted by Halt"
