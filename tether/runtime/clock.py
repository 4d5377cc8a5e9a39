"""Time, injectable: restart windows, backoff, leases and delays all read this clock."""

from __future__ import annotations

import time
from typing import Protocol

import anyio


class Clock(Protocol):
    """Wall-clock time in seconds since the epoch, and a way to wait on it."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)
