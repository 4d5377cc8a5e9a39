"""A small scenario for ``python -O`` (asserts stripped), run by ``tests/test_optimized.py``:
a session through its guards (loop detector, breaker, approval gate), a loop stopped, a dead
letter, a reserved id refused. Prints what happened as one JSON line."""

from __future__ import annotations

import json
import sys

import anyio

import tether
from tests.actors.session_agents import LoopingAgent, RefundAgent
from tests.sample_actors import Account, Fail


async def scenario(db: str) -> dict[str, object]:
    out: dict[str, object] = {"debug": __debug__}
    async with tether.Runtime(db, poll_interval=0.02, max_attempts=2) as rt:
        session = await rt.spawn(RefundAgent, "refunds", goal="Refund delivered orders")

        async def approve() -> None:
            while not (pending := await rt.approvals.pending()):
                await anyio.sleep(0.01)
            await rt.approvals.decide(pending[0].request_id, tether.Approve(by="ops"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(approve)
            result = await session.ask(tether.UserMessage("please refund order 43"), timeout=30)
        out["answer"] = result.answer
        out["calls"] = [c.tool for c in result.calls]

        looping = await rt.spawn(LoopingAgent, "looping", goal="Check orders")
        try:
            await looping.ask(tether.UserMessage("check order 42"), timeout=30)
        except tether.TaskFailed as exc:
            out["loop"] = exc.status

        account = await rt.spawn(Account, "acct")
        try:
            await account.ask(Fail(key="O"), timeout=30)
        except tether.MessageDeadLettered as exc:
            out["dead_letter"] = len(exc.errors)

        try:
            await rt.spawn(Account, "breaker:lookup_order")
        except tether.ConfigError as exc:
            out["reserved"] = "is reserved" in str(exc)
        out["guards"] = sorted(
            node.id
            for root in await rt.tree()
            if root.id == "tether.guards"
            for node in root.children
        )
    return out


if __name__ == "__main__":
    print(json.dumps(anyio.run(scenario, sys.argv[1])))
