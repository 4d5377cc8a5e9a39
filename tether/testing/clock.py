"""``FakeClock``: time that moves only when a test says so, so backoff tests run instantly."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math

from tether.errors import ConfigError


class FakeClock:
    """A ``tether.runtime.clock.Clock`` whose time moves only with ``advance``.

    ``sleep`` waits until the clock has been advanced past its deadline; ``sleep(0)`` and
    negative sleeps return at once.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._ids), fut))
        await fut

    @property
    def sleepers(self) -> int:
        """How many tasks are waiting on this clock."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        # Backwards (or NaN, which compares false with every deadline) would stop every
        # sleeper from ever waking: refuse it by name.
        if not (
            isinstance(seconds, int | float)
            and not isinstance(seconds, bool)
            and 0 <= seconds < math.inf
        ):
            raise ConfigError(f"advance takes a finite number of seconds >= 0, not {seconds!r}")
        self._now += seconds
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)
