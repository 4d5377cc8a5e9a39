"""Group commit: many actors' writes share one transaction (DESIGN §8).

Callers ``submit`` a write and await its outcome. One writer task drains everything submitted
so far into a single ``Batch`` and applies it; while that transaction runs, new writes queue up
for the next one, so batches grow with load by themselves. Each caller is released only after
the commit that holds its write (I1, I2).

If a whole batch fails, every write in it is retried on its own, so that one bad write (a
corrupt payload, a constraint a bug broke) fails alone and the others still commit.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from tether.errors import JournalWriteError, StaleLeaseError
from tether.runtime.store import (
    AttemptFailed,
    Batch,
    BatchResult,
    Claim,
    EffectWrite,
    FencedWrite,
    LeaseAcquire,
    LeaseRelease,
    NewMessage,
    Park,
    Revive,
    Spawn,
    StepCommit,
    StopActor,
    Store,
    Watch,
)

log = structlog.get_logger("tether.commit")

Write = (
    Spawn
    | LeaseAcquire
    | LeaseRelease
    | NewMessage
    | StepCommit
    | Claim
    | AttemptFailed
    | StopActor
    | Revive
    | Watch
    | EffectWrite
    | Park
)

_FIELD: dict[type[Any], str] = {
    Spawn: "spawns",
    LeaseRelease: "releases",
    LeaseAcquire: "acquires",
    NewMessage: "messages",
    StepCommit: "steps",
    Claim: "claims",
    AttemptFailed: "failures",
    StopActor: "stops",
    Revive: "revives",
    Watch: "watches",
    EffectWrite: "effects",
    Park: "parks",
}


class GroupCommitter:
    """Collects writes from every actor and commits them together."""

    def __init__(self, store: Store, *, max_batch: int = 4096) -> None:
        self._store = store
        self._max_batch = max_batch
        self._queue: list[tuple[Write, asyncio.Future[BatchResult]]] = []
        self._wakeup = asyncio.Event()
        self._closed = False
        self.commits = 0
        self.writes = 0

    def submit(self, write: Write) -> asyncio.Future[BatchResult]:
        """Queue ``write``; the future resolves with the result of the batch that committed it.

        A fenced write that was rejected resolves with ``StaleLeaseError``; a batch that could
        not be committed resolves its writes with ``JournalWriteError``.
        """
        if self._closed:
            raise JournalWriteError("the group committer is closed")
        fut: asyncio.Future[BatchResult] = asyncio.get_running_loop().create_future()
        self._queue.append((write, fut))
        self._wakeup.set()
        return fut

    async def run(self) -> None:
        """The writer task. Runs until ``close``; drains what is queued before it stops."""
        self._stopped = asyncio.Event()
        try:
            while not self._closed or self._queue:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._queue:
                    await self._commit_next()
        finally:
            self._closed = True
            self._stopped.set()
            for _, fut in self._queue:
                if not fut.done():
                    fut.set_exception(
                        JournalWriteError("the runtime closed before this write was committed")
                    )
            self._queue.clear()

    async def close(self) -> None:
        """Commit everything queued, then stop the writer task."""
        self._closed = True
        self._wakeup.set()
        stopped = getattr(self, "_stopped", None)
        if stopped is not None:
            await stopped.wait()

    async def _commit_next(self) -> None:
        taken = self._queue[: self._max_batch]
        del self._queue[: self._max_batch]
        try:
            result = await self._store.apply(_batch(w for w, _ in taken))
        except Exception as exc:  # noqa: BLE001 - the caller gets it as JournalWriteError
            if len(taken) == 1:
                _settle(taken, None, exc)
                return
            log.warning("batch_failed_retrying_alone", writes=len(taken), error=repr(exc))
            for item in taken:
                try:
                    one = await self._store.apply(_batch([item[0]]))
                except Exception as exc_one:  # noqa: BLE001 - the caller gets it as JournalWriteError
                    _settle([item], None, exc_one)
                else:
                    _settle([item], one, None)
            return
        except BaseException as exc:
            _settle(
                taken, None, exc if isinstance(exc, Exception) else JournalWriteError("cancelled")
            )
            raise
        self.commits += 1
        self.writes += len(taken)
        _settle(taken, result, None)


def _batch(writes: Any) -> Batch:
    batch = Batch()
    for w in writes:
        getattr(batch, _FIELD[type(w)]).append(w)
    return batch


def _settle(
    taken: list[tuple[Write, asyncio.Future[BatchResult]]],
    result: BatchResult | None,
    error: BaseException | None,
) -> None:
    for write, fut in taken:
        if fut.done():
            continue
        if error is not None:
            wrapped = (
                error
                if isinstance(error, JournalWriteError)
                else JournalWriteError(f"commit failed: {error!r}")
            )
            if wrapped is not error:
                wrapped.__cause__ = error
            fut.set_exception(wrapped)
        elif (
            result is not None and isinstance(write, FencedWrite) and write.actor_id in result.stale
        ):
            fut.set_exception(StaleLeaseError(write.actor_id, write.fence))
        else:
            assert result is not None
            fut.set_result(result)
