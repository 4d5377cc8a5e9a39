"""``python -m tests.chaos.notify_programs DB URL``: an agent whose approval policy posts its
notices to the webhook ``URL`` (the tests' receiver, ``tests.webhook_receiver``). It asks for
one wire (once: a dedup key, so a restarted agent asks for no second one), reports ``ready``,
and serves the store until it is killed, or until its session has recorded an outcome
(``outcome=<text>``) and every notice was delivered (``delivered``)."""

from __future__ import annotations

import sys

import anyio

import tether
from tests.chaos.programs import configure_logging, report
from tests.runtime.effect_actors import NotifiedBanker, Wire
from tests.webhook_receiver import SECRET

FAST = tether.RetryPolicy(max_attempts=3, initial_delay=0.05, max_delay=0.2)


async def agent(db: str, url: str) -> None:
    hook = tether.Webhook(url=url, secret=SECRET, retry=FAST, timeout=5.0)
    policy = tether.ApprovalPolicy(timeout=3600, notify=hook)
    async with tether.Runtime(db, approval_policy=policy, poll_interval=0.05) as rt:
        b = await rt.spawn(NotifiedBanker, "payer")
        await b.tell(Wire(to="acme", cents=500), dedup_key="wire-1")
        report("ready")
        while True:
            cell = rt.cells.get("payer")
            results = list(cell.state.results) if cell is not None and cell.instance else []
            notices = await rt.store.find_effects(status="pending")
            if results and not notices and not await _undelivered(rt):
                report(f"outcome={results[0][0]}")
                report("delivered")
                return
            await anyio.sleep(0.05)


async def _undelivered(rt: tether.Runtime) -> bool:
    """Whether a notice still waits in a notifier's mailbox."""
    for rec in await rt.store.list_actors(parent_id="tether.guards"):
        if rec.actor_id.startswith("notify:") and await rt.store.list_messages(rec.actor_id, 10):
            return True
    return False


if __name__ == "__main__":
    configure_logging()
    import tests.chaos.notify_programs as me  # the module by its real name (stored paths)

    anyio.run(me.agent, sys.argv[1], sys.argv[2])
