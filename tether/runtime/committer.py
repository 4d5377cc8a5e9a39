"""Group commit: many actors' writes share one transaction (DESIGN §8).

Callers ``submit`` a write and await its outcome. One writer task drains everything submitted
so far into a single ``Batch`` and applies it; while that transaction runs, new writes queue up
for the next one, so batches grow with load by themselves. Each caller is released only after
the commit that holds its write (I1, I2).

If a whole batch fails, every write in it is retried on its own, so that one bad write (a
corrupt payload, a constraint a bug broke) fails alone and the others still commit.

A committed batch is settled in slices of ``_SETTLE_SLICE`` writes, one slice per turn of the
event loop, always in commit order (a later batch's writes wait behind an earlier one's). A
batch of thousands of writes wakes thousands of tasks: settled all at once, the loop works
through every one of them while the writer thread sits idle, then the writer commits what they
sent while the loop sits idle. Settled in slices, the committer takes what the first slice's
tasks sent to the writer a turn later, and the loop works through the other slices while that
commit runs: SQLite's own work (which releases the GIL) and the fsync overlap the loop's.

A store that can commit several batches at once (``write_lanes``: PostgreSQL's writer
connections) gets one queue and one commit loop per lane; a write's lane is fixed by the actor
it belongs to, so one actor's writes still commit in submission order (``lanes.py`` states
the invariant and audits what relied on order across actors). Batches are settled in the
order they committed, whichever lane committed them.

A store whose writes never wait (``MemoryStore``) declares it: its ``immediate`` write path
(``tether.store.protocol.ImmediateWrites``). It needs no batching: each write is applied in
``submit`` itself, in submission order, and its future is already settled when ``submit``
returns; ``apply_now`` does the same and returns the outcome itself, without a future. To keep a tight loop of sends from starving the other tasks, every
``_YIELD_EVERY``-th such outcome is handed over on the next turn of the event loop instead.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from tether import telemetry
from tether.errors import JournalWriteError, StaleLeaseError
from tether.runtime.lanes import lane_count, lane_key
from tether.store.protocol import ImmediateWrites, Store
from tether.store.records import (
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
    Watch,
    Write,
)

# A committed batch waiting to be settled: its writes, the offset of the first one not settled
# yet, and the batch's result or error.
_Settlement = tuple[
    list[tuple[Write, "asyncio.Future[BatchResult]"]], int, BatchResult | None, BaseException | None
]

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

_Queue = list[tuple[Write, "asyncio.Future[BatchResult]"]]

_YIELD_EVERY = 32
_SETTLE_SLICE = 128  # writes settled per turn of the event loop


class GroupCommitter:
    """Collects writes from every actor and commits them together."""

    def __init__(
        self,
        store: Store,
        *,
        max_batch: int = 4096,
        on_stored: Callable[[NewMessage, BatchResult | None], None] | None = None,
    ) -> None:
        self._store = store
        # Told of every NewMessage's outcome (None: not stored), whether or not its sender
        # still waits: a message that was stored must reach its cell even if the sender was
        # cancelled or its ask timed out meanwhile. Set once, before the first write (the
        # runtime's mail, which is built with the committer).
        self.on_stored = on_stored
        # Whether a write concerns only this runtime (``Batch.local``): set once, by the runtime
        # (its mail); None: every batch may concern others.
        self.local: Callable[[Write], bool] | None = None
        self._max_batch = max_batch
        # One queue and one wakeup per lane (``lanes.py``); a lane commits one batch at a time.
        self._queues: list[_Queue] = [[] for _ in range(lane_count(store))]
        self._wakeups = [asyncio.Event() for _ in self._queues]
        self._queued = 0  # writes in every lane's queue
        self._closed = False
        self._busy = 0  # lanes applying a batch now
        self._sync_count = 0
        # Committed batches not settled yet, oldest first: (writes, offset of the first write
        # not settled, result, error). Writes are settled in this order, and nothing is
        # applied on the fast path while any wait here: settle order is commit order.
        self._unsettled: deque[_Settlement] = deque()
        self._draining = False
        self.commits = 0
        self.writes = 0

    def _apply_alone(self, sync: ImmediateWrites, write: Write) -> BatchResult:
        """``write`` applied alone on the store's immediate path: ``apply_one`` takes the usual
        writes without a batch (a ``Batch`` is a dozen lists); None from it: build the batch."""
        result = sync.apply_one(write)
        if result is not None:
            return result
        batch = Batch()
        getattr(batch, _FIELD[type(write)]).append(write)
        return sync.apply_sync(batch)

    def apply_now(self, write: Write) -> BatchResult | None:
        """``await submit(write)`` without the future, when a store that never waits can take
        ``write`` right now: its result (or the error awaiting the future would raise). None
        when it must go through ``submit``: the store waits, writes are queued ahead of it (they
        commit first: submission order is commit order), the committer is closed, or it is
        this write's turn to let the other tasks run (``_YIELD_EVERY``)."""
        if self._queued or self._busy or self._closed or self._unsettled:
            return None
        if not (self._sync_count + 1) % _YIELD_EVERY:
            return None  # submit() applies it too, and settles it on the next turn of the loop
        sync = self._store.immediate  # read every time: a store may withdraw it
        if sync is None:
            return None
        self._sync_count += 1
        try:
            result = self._apply_alone(sync, write)
        except Exception as exc:  # noqa: BLE001 - the caller gets it as JournalWriteError
            failed: BaseException = exc
            self._report_one(write, None)
        else:
            self.commits += 1
            self.writes += 1
            self._report_one(write, result)
            if result.stale and _is_stale(write, result):
                raise StaleLeaseError(write.actor_id, write.fence)  # type: ignore[union-attr]
            return result
        raise _journal_error(failed)  # outside the handler: raised as awaiting it would raise

    def submit(self, write: Write) -> asyncio.Future[BatchResult]:
        """Queue ``write``; the future resolves with the result of the batch that committed it.

        A fenced write that was rejected resolves with ``StaleLeaseError``; a batch that could
        not be committed resolves its writes with ``JournalWriteError``.
        """
        if self._closed:
            raise JournalWriteError("the group committer is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[BatchResult] = loop.create_future()
        if not self._queued and not self._busy and not self._unsettled:
            sync = self._store.immediate
            if sync is not None:
                self._apply_now(sync, write, fut, loop)
                return fut
        lane = 0 if len(self._queues) == 1 else hash(lane_key(write)) % len(self._queues)
        self._queues[lane].append((write, fut))
        self._queued += 1
        self._wakeups[lane].set()
        return fut

    def _apply_now(
        self,
        sync: ImmediateWrites,
        write: Write,
        fut: asyncio.Future[BatchResult],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """The fast path of a store that never waits: apply ``write`` alone, right now."""
        try:
            result: BatchResult | None = self._apply_alone(sync, write)
            error: BaseException | None = None
        except Exception as exc:  # noqa: BLE001 - the caller gets it as JournalWriteError
            result, error = None, exc
        else:
            self.commits += 1
            self.writes += 1
        self._sync_count += 1
        if self._sync_count % _YIELD_EVERY:
            self._settle([(write, fut)], result, error)
        else:  # let the other tasks run: the caller waits for one turn of the loop
            self._settle_in_order([(write, fut)], result, error, at_once=False)

    async def run(self) -> None:
        """The writer task: one commit loop per lane. Runs until ``close``; drains what is
        queued before it stops."""
        self._stopped = asyncio.Event()
        try:
            if len(self._queues) == 1:
                await self._run_lane(0)
            else:
                async with asyncio.TaskGroup() as lanes:
                    for lane in range(len(self._queues)):
                        lanes.create_task(self._run_lane(lane))
        finally:
            self._closed = True
            self._stopped.set()
            self._drain(limit=None)  # committed: settled as such, not failed below
            for queue in self._queues:
                for _, fut in queue:
                    if not fut.done():
                        fut.set_exception(
                            JournalWriteError("the runtime closed before this write was committed")
                        )
                queue.clear()
            self._queued = 0

    async def _run_lane(self, lane: int) -> None:
        queue, wakeup = self._queues[lane], self._wakeups[lane]
        while not self._closed or queue:
            await wakeup.wait()
            wakeup.clear()
            while queue:
                await self._commit_next(queue)

    async def close(self) -> None:
        """Commit everything queued, then stop the writer task."""
        self._closed = True
        for wakeup in self._wakeups:
            wakeup.set()
        stopped = getattr(self, "_stopped", None)
        if stopped is not None:
            await stopped.wait()

    def _settle_in_order(
        self,
        taken: list[tuple[Write, asyncio.Future[BatchResult]]],
        result: BatchResult | None,
        error: BaseException | None,
        *,
        at_once: bool = True,
    ) -> None:
        """Settle ``taken`` after every batch committed before it, a slice per turn of the
        loop; the first slice now (``at_once``, when nothing older waits) or on the next turn."""
        self._unsettled.append((taken, 0, result, error))
        if self._draining:
            return  # the drain under way reaches it in order
        self._draining = True
        if at_once:
            self._drain()
        else:
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self, limit: int | None = _SETTLE_SLICE) -> None:
        """Settle up to ``limit`` writes (None: all) of the oldest unsettled batches; if any
        are left, go on at the next turn of the loop."""
        budget = limit
        unsettled = self._unsettled
        try:
            while unsettled and (budget is None or budget > 0):
                taken, start, result, error = unsettled[0]
                end = len(taken) if budget is None else min(len(taken), start + budget)
                if end == len(taken):
                    unsettled.popleft()
                else:
                    unsettled[0] = (taken, end, result, error)
                if budget is not None:
                    budget -= end - start
                part = taken[start:end] if start or end < len(taken) else taken
                self._settle(part, result, error)
        finally:
            # Even if a settlement raised (it should not: reports are caught), what is left is
            # settled on the next turn: a drain that stopped would leave every caller waiting.
            if unsettled:
                asyncio.get_running_loop().call_soon(self._drain)
            else:
                self._draining = False

    def _settle(
        self,
        taken: list[tuple[Write, asyncio.Future[BatchResult]]],
        result: BatchResult | None,
        error: BaseException | None,
    ) -> None:
        _resolve(taken, result, error)  # first: a failing report never leaves a caller waiting
        self._report([w for w, _ in taken], result if error is None else None)

    def _report(self, writes: list[Write], result: BatchResult | None) -> None:
        if self.on_stored is None:
            return
        for w in writes:
            if type(w) is NewMessage:
                self._report_one(w, result)

    def _report_one(self, write: Write, result: BatchResult | None) -> None:
        if self.on_stored is None or type(write) is not NewMessage:
            return
        try:
            self.on_stored(write, result)
        except Exception as exc:  # noqa: BLE001 - the committer goes on; logged
            telemetry.log.error(
                "message_not_routed", msg_id=write.msg_id, actor_id=write.actor_id, error=repr(exc)
            )

    async def _commit_next(self, queue: _Queue) -> None:
        self._busy += 1
        try:
            await self._commit_taken(queue)
        finally:
            self._busy -= 1

    async def _commit_taken(self, queue: _Queue) -> None:
        taken = queue[: self._max_batch]
        del queue[: self._max_batch]
        self._queued -= len(taken)
        batch = _batch(w for w, _ in taken)
        local = self.local
        batch.local = local is not None and all(local(w) for w, _ in taken)
        try:
            result = await self._store.apply(batch)
        except Exception as exc:  # noqa: BLE001 - the caller gets it as JournalWriteError
            if len(taken) == 1:
                self._settle_in_order(taken, None, exc)
                return
            telemetry.log.warning("batch_failed_retrying_alone", writes=len(taken), error=repr(exc))
            for item in taken:
                try:
                    one = await self._store.apply(_batch([item[0]]))
                except Exception as exc_one:  # noqa: BLE001 - the caller gets it as JournalWriteError
                    self._settle_in_order([item], None, exc_one)
                else:
                    self._settle_in_order([item], one, None)
            return
        except BaseException as exc:
            self._settle_in_order(
                taken, None, exc if isinstance(exc, Exception) else JournalWriteError("cancelled")
            )
            raise
        self.commits += 1
        self.writes += len(taken)
        telemetry.commit_size.record(len(taken))
        self._settle_in_order(taken, result, None)


async def all_settled(futures: Sequence[asyncio.Future[Any]]) -> None:
    """Wait for every one of ``futures``; raise the first failure, in the order given.

    What ``asyncio.gather`` does for writes submitted together, without its extra hop through
    the event loop per write (its outer future wakes the caller a turn after the writes
    settle): the writes of one batch settle together, in submission order, so awaiting them
    in that order raises the same error gather would. Every failure is retrieved (no "never
    retrieved" warnings), and a cancelled caller cancels the futures it no longer waits for.
    """
    first: BaseException | None = None
    for i, fut in enumerate(futures):
        try:
            await fut
        except asyncio.CancelledError:
            # The committer never cancels a write: the caller is cancelled. Stop waiting for
            # the rest, as gather would.
            for rest in futures[i + 1 :]:
                rest.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - raised below, once every write settled
            first = first or exc
    if first is not None:
        raise first


def _batch(writes: Any) -> Batch:
    batch = Batch()
    for w in writes:
        getattr(batch, _FIELD[type(w)]).append(w)
    return batch


def _journal_error(error: BaseException) -> BaseException:
    """``error`` as the caller sees it: a ``JournalWriteError`` (caused by ``error``)."""
    if isinstance(error, JournalWriteError):
        return error
    wrapped = JournalWriteError(f"commit failed: {error!r}")
    wrapped.__cause__ = error
    return wrapped


def _is_stale(write: Write, result: BatchResult) -> bool:
    return isinstance(write, FencedWrite) and write.actor_id in result.stale


def _resolve(
    taken: list[tuple[Write, asyncio.Future[BatchResult]]],
    result: BatchResult | None,
    error: BaseException | None,
) -> None:
    if error is not None or result is None:  # (a batch settles with one or the other)
        failed = error if error is not None else JournalWriteError("the commit had no outcome")
        for _, fut in taken:
            if not fut.done():
                fut.set_exception(_journal_error(failed))  # one exception object per waiter
        return
    # Usually no write of the batch was stale: then none needs the (costly) fenced check.
    stale = result.stale
    for write, fut in taken:
        if fut.done():
            continue
        if stale and _is_stale(write, result):
            fut.set_exception(StaleLeaseError(write.actor_id, write.fence))  # type: ignore[union-attr]
        else:
            fut.set_result(result)
