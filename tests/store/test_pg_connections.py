"""The connections a runtime holds on its PostgreSQL server: ``readers + writers + 1`` (the
writers, the readers, a listener), whatever its load: the ``max_connections`` arithmetic of
docs/operations.md rests on it."""

from __future__ import annotations

import functools
import secrets

import anyio
import psycopg
import pytest

import tether
from tests import sample_actors as s
from tether.store.postgres.dsn import split_schema

pytestmark = pytest.mark.anyio


def connections(url: str, name: str) -> int:
    """The connections to this test's database named ``name`` (``application_name``)."""
    dsn, _ = split_schema(url, None)
    with psycopg.connect(dsn, autocommit=True, application_name="tether-test") as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s",
            (name,),
        ).fetchone()
    return int(row[0]) if row is not None else 0


@pytest.mark.parametrize(("readers", "writers"), [(1, 1), (3, 2), (1, 3)])
async def test_a_serving_runtime_holds_at_most_readers_plus_writers_plus_one_connections(
    pg_url: str, readers: int, writers: int
) -> None:
    name = f"tether-{secrets.token_hex(4)}"  # this runtime's connections, and no one else's
    url = f"{pg_url}&application_name={name}"
    store = tether.open_store(url, readers=readers, writers=writers)
    async with tether.Runtime(store=store, poll_interval=0.02, passivate_after=None) as rt:
        refs = [await rt.spawn(s.Account, f"acct-{i}") for i in range(20)]
        most = 0
        for _ in range(5):
            async with anyio.create_task_group() as tg:
                for ref in refs:
                    tg.start_soon(functools.partial(ref.ask, s.Deposit(amount=1), timeout=20))
                    tg.start_soon(functools.partial(ref.ask, s.GetBalance(), timeout=20))
            most = max(most, await anyio.to_thread.run_sync(connections, pg_url, name))
        assert [await ref.ask(s.GetBalance(), timeout=20) for ref in refs] == [5] * 20
    assert 2 <= most <= readers + writers + 1
    with anyio.fail_after(30):  # all closed: each backend ends once it reads the close
        while await anyio.to_thread.run_sync(connections, pg_url, name):
            await anyio.sleep(0.05)
