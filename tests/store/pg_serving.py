"""A runtime process serving a PostgreSQL store, for tests/store/test_pg_processes.py.

``python -m tests.store.pg_serving URL ACTOR POLL``: spawns ``ACTOR`` (a ``tests.sample_actors
.Account``) with ``poll_interval=POLL``, prints ``ready`` once it is active here, and serves
until its standard input closes (or it is killed).
"""

from __future__ import annotations

import sys

import anyio

import tether
from tests import sample_actors as s


async def serve(url: str, actor_id: str, poll: float) -> None:
    async with tether.Runtime(url, poll_interval=poll, passivate_after=None) as rt:
        await rt.spawn(s.Account, actor_id)
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)  # until the test closes it


if __name__ == "__main__":
    url, actor_id, poll = sys.argv[1:]
    anyio.run(serve, url, actor_id, float(poll))
