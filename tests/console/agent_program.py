"""``python -m tests.console.agent_program DB ORDER[:careful]...``: an agent runtime in a
process of its own. It serves the store ``DB``, starts one refund session per order
(``refund-<order>``; ``:careful`` ones need two approvers), asks each to refund its order,
and prints each session's answer as a line ``answer=<session> <json of the TaskResult>``,
then exits once every one has answered."""

from __future__ import annotations

import sys

import anyio
import msgspec

import tether
from tests.chaos.programs import configure_logging, report
from tests.console.agents import GOAL, CarefulRefundAgent, RefundAgent


async def run(db: str, orders: list[str]) -> None:
    async with tether.Runtime(db, poll_interval=0.05) as rt:

        async def one(spec: str) -> None:
            order, _, kind = spec.partition(":")
            session = f"refund-{order}"
            cls = CarefulRefundAgent if kind == "careful" else RefundAgent
            await rt.spawn(cls, session, goal=GOAL)
            result = await rt.ref(session).ask(
                tether.UserMessage(f"please refund order {order}"),
                timeout=600,
                dedup_key=f"ask-{order}",
            )
            report(f"answer={session} {msgspec.json.encode(result).decode()}")

        report("ready")
        async with anyio.create_task_group() as tg:
            for order in orders:
                tg.start_soon(one, order)


if __name__ == "__main__":
    configure_logging()
    import tests.console.agent_program as me  # the module by its real name (stored paths)

    anyio.run(me.run, sys.argv[1], sys.argv[2:])
