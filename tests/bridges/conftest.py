"""Fixtures: a world of one's own on each real broker, deleted afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tether
from tests.bridges.brokers import NatsWorld, RedisWorld, World
from tests.bridges.programs import Tally


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[tether.Runtime]:
    """A runtime on a store file of its own, with two Tally sessions, s-0 and s-1."""
    async with tether.Runtime(tmp_path / "store.db", poll_interval=0.05) as runtime:
        for session in ("s-0", "s-1"):
            await runtime.spawn(Tally, session)
        yield runtime


@pytest.fixture
async def redis_world() -> AsyncIterator[RedisWorld]:
    world = await RedisWorld.connect()
    try:
        yield world
    finally:
        await world.close()


@pytest.fixture
async def nats_world() -> AsyncIterator[NatsWorld]:
    world = await NatsWorld.connect()
    try:
        yield world
    finally:
        await world.close()


@pytest.fixture(params=["redis", "nats"])
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    opened: World = await (
        RedisWorld.connect() if request.param == "redis" else NatsWorld.connect()
    )
    try:
        yield opened
    finally:
        await opened.close()
