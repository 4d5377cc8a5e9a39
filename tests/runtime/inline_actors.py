"""An actor that records where and how its handler runs, for the tests of inline dispatch
(``tether.runtime.inline``). Module level, so the runtime can import it on recovery."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
import structlog

import tether


class Add(tether.Message):
    """Persists ``n``; raises instead, without waiting, the first ``fail`` times."""

    n: int
    fail: int = 0


class Hold(tether.Message):
    """Waits ``seconds`` inside a cancel scope entered before the wait, then persists ``n``;
    raises after the wait the first ``fail`` times."""

    seconds: float
    n: int
    fail: int = 0


class Look(tether.Message):
    pass


class Added(tether.Event):
    n: int


class ProbeState(msgspec.Struct):
    log: list[int] = msgspec.field(default_factory=list)


@dataclass
class Seen:
    task: asyncio.Task[Any] | None
    log_context: dict[str, Any]


SEEN: list[Seen] = []
RUNNING = [0, 0]  # steps running now, most at once
FAILED: dict[int, int] = {}  # n of an Add or a Hold -> times it failed


class Probe(tether.Actor[ProbeState]):
    initial_state = ProbeState()

    def apply(self, state: ProbeState, event: Added) -> ProbeState:
        return ProbeState(log=[*state.log, event.n])

    async def handle(self, msg: Add | Hold | Look) -> list[int] | None:
        SEEN.append(Seen(asyncio.current_task(), structlog.contextvars.get_contextvars()))
        RUNNING[0] += 1
        RUNNING[1] = max(RUNNING)
        try:
            match msg:
                case Add(n=n, fail=fail):
                    if FAILED.get(n, 0) < fail:
                        FAILED[n] = FAILED.get(n, 0) + 1
                        raise RuntimeError(f"add {n} failed")
                    self.persist(Added(n=n))
                case Hold(seconds=t, n=n, fail=fail):
                    with anyio.fail_after(30):
                        await anyio.sleep(t)
                    if FAILED.get(n, 0) < fail:
                        FAILED[n] = FAILED.get(n, 0) + 1
                        raise RuntimeError(f"hold {n} failed")
                    self.persist(Added(n=n))
                case Look():
                    return self.state.log
            return None
        finally:
            RUNNING[0] -= 1
