"""Activation: an actor's lease taken here and its cell started; the cell's leaving.

An actor is activated when a message for it is routed here and it has no cell, when a scan
finds its mail, or when its supervisor starts it. Activating it reads its record, takes its
lease (a new fencing token, I8) through the committer and starts its ``Cell``. One that is
stopped for good is not started: mail stored for it after the stop goes to the dead letters.
A child is started by its supervisor, in this runtime: activating a child activates its
supervisor first, which starts its children itself, in order; except a child its supervisor
never starts (``Actor.starts_where_used``: a session's guards), started here on first use
whichever runtime runs its supervisor. An actor whose lease another live runtime holds is not
activated here: the store refuses the lease, and the refusal is remembered until that owner's
next renewal at the earliest (``leased_elsewhere``).

An activation that fails (a damaged record, a constructor that raises) is tried again after a
backoff, per actor (``failed``); a committed step ends the backoff. Activations found by the
scheduler wait in an ``ActivationQueue`` (``activation_queue.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tether import telemetry
from tether.actors.actor import ActorSpec, actor_spec, import_class
from tether.errors import CorruptRecordError
from tether.runtime.activation_queue import ActivationQueue
from tether.runtime.cell import Cell
from tether.runtime.clock import Clock
from tether.runtime.collector import governor
from tether.runtime.committer import GroupCommitter
from tether.runtime.kernel import Kernel
from tether.runtime.lifecycle import Lifecycle
from tether.runtime.live_actor import LiveActor
from tether.runtime.reads import Reader
from tether.runtime.registry import Registry, report_corrupt_actor
from tether.runtime.replies import Replies
from tether.runtime.scheduler import Scheduler
from tether.runtime.spawn_args import decode_init
from tether.runtime.supervision import Supervision
from tether.store.records import ActorRecord, LeaseAcquire, LeaseRelease

_ACTIVATING_AT_ONCE = 128  # activations under way at a time (ActivationQueue)

# Builds the cell of an actor whose lease was taken: (spec, actor id, init, fence, parent id).
NewCell = Callable[[ActorSpec, str, dict[str, Any], int, "str | None"], Cell]


class Activation:
    """Starts the cells of one serving runtime (``serving``: False starts none)."""

    def __init__(
        self,
        kernel: Kernel,
        registry: Registry,
        reads: Reader,
        supervision: Supervision,
        replies: Replies,
        scheduler: Scheduler,
        new_cell: NewCell,
        *,
        life: Lifecycle,
        claimed: set[str],
        runtime_id: str,
        lease_ttl: float,
        serving: bool,
    ) -> None:
        self._kernel = kernel
        self._registry = registry
        self._cells = registry.cells
        self._reads = reads
        self._supervision = supervision
        self._replies = replies
        self._wake_scans = scheduler.wake
        self._new_cell = new_cell
        self._life = life
        self._claimed = claimed  # msg ids whose next attempt is counted (their cell's, here)
        self._committer: GroupCommitter = kernel.committer
        self._time: Clock = kernel.time
        self._runtime_id = runtime_id
        self._lease_ttl = lease_ttl
        self._serving = serving
        self.activating: dict[str, asyncio.Event] = {}  # in progress; set when done
        self._queue = ActivationQueue(self._activate_quietly, life.start_soon, _ACTIVATING_AT_ONCE)
        self.not_before: dict[str, float] = {}  # actor id -> earliest next activation attempt
        self.failures: dict[str, int] = {}  # actor id -> activations failed in a row
        # actor id -> until when another live runtime is known to hold its lease (or its
        # supervisor's: a subtree lives in one runtime), as the store refused it here
        self.refused: dict[str, float] = {}

    def wake_actor(self, actor_id: str) -> None:
        """Messages for ``actor_id`` were stored outside the send path: make sure they run."""
        cell = self._cells.get(actor_id)
        if cell is not None:
            cell.rescan_requested = True
            cell.wake.set()
        else:
            self.not_before.pop(actor_id, None)
            self.activate_soon(actor_id)

    def activate_soon(self, actor_id: str) -> None:
        if (
            self._serving
            and self._life.started
            and actor_id not in self.activating
            and actor_id not in self._cells
            # refused or backing off: ``activate`` would return at once, after a task
            and not (self.not_before and self.not_before.get(actor_id, 0.0) > self._kernel.clock())
        ):
            self._queue.add(actor_id)  # in the order found, a bounded number at a time

    async def _activate_quietly(self, actor_id: str) -> Cell | None:
        try:
            return await self.activate(actor_id)
        except CorruptRecordError as exc:
            # Its row (or its parent's) is damaged: it is not served, its mail waits in the
            # mailbox until the row is repaired. Logged once; retried after the backoff.
            report_corrupt_actor(actor_id, exc)
            self.failed(actor_id, exc)
        except Exception as exc:  # noqa: BLE001 - recorded; retried after a backoff
            telemetry.log.error("activation_failed", actor_id=actor_id, error=repr(exc))
            self.failed(actor_id, exc)
        return None

    async def activate(self, actor_id: str, *, by_parent: bool = False) -> Cell | None:
        """Take the actor's lease and start its cell here; its cell, or None if someone else
        holds it (or it is not to be served).

        ``by_parent``: the actor's supervisor is starting it. Anyone else defers a child to its
        supervisor while that one is starting: it starts its children itself, in order."""
        cell = self._cells.get(actor_id)
        if cell is not None or not self._may_start(actor_id) or not self._serving:
            return cell
        for _ in range(2):
            in_progress = self.activating.get(actor_id)
            if in_progress is None:
                break
            # Someone else is activating it: share the outcome. An activation that ended
            # without a cell may only have deferred to the parent (which may be the caller,
            # starting its children): then try once more here.
            await in_progress.wait()
            cell = self._cells.get(actor_id)
            if cell is not None or not self._may_start(actor_id):
                return cell
        else:
            return self._cells.get(actor_id)
        now = self._kernel.clock()
        if self.not_before.get(actor_id, 0.0) > now:
            return None
        done = self.activating[actor_id] = asyncio.Event()
        try:
            rec = await self._reads.get_actor(actor_id)
            spec = await self._servable(actor_id, rec)
            if spec is None or rec is None:
                return None
            parent_id = rec.parent_id
            if parent_id is not None and not spec.cls.starts_where_used:
                parent = self._cells.get(parent_id)
                if parent is None or not (by_parent or parent.ready.is_set()):
                    # A subtree lives in one runtime: start the supervisor, which starts its
                    # children. This activation ends here; the parent's may start this one.
                    del self.activating[actor_id]
                    done.set()
                    return await self._through_parent(actor_id, parent_id, parent)
            return await self._start(actor_id, rec, spec, now)
        finally:
            if self.activating.get(actor_id) is done:
                del self.activating[actor_id]
            done.set()

    def _may_start(self, actor_id: str) -> bool:
        return actor_id not in self._registry.stopping and self._life.open

    async def _servable(self, actor_id: str, rec: ActorRecord | None) -> ActorSpec | None:
        """The spec of the actor whose record is ``rec``, or None if it is not to be served:
        unknown to the store, or stopped for good (its mail goes to the dead letters)."""
        kernel = self._kernel
        if rec is None:
            # Every send checks the registry, so only a damaged store holds mail for an
            # actor it does not know: dead-letter that mail, with the reason, at once.
            telemetry.log.error("mail_for_unknown_actor", actor_id=actor_id)
            await self._committer.submit(
                kernel.stop_record(actor_id, f"no actor {actor_id!r} in this store")
            )
            return None
        spec = actor_spec(import_class(rec.class_path))
        if rec.status != "active":
            self._registry.known[actor_id] = (spec, rec.status)
            # Messages stored by another process after the stop: record them, drop nothing.
            why = rec.stop_reason or rec.status
            await self._committer.submit(kernel.stop_record(actor_id, why, status=rec.status))
            kernel.stopped_for_good(actor_id, why)
            return None
        return spec

    async def _through_parent(
        self, actor_id: str, parent_id: str, parent: Cell | None
    ) -> Cell | None:
        """Activate ``actor_id``'s supervisor (``parent``: its cell, if it is here) and let it
        start its children; the child's cell, or None."""
        if parent is None:
            parent = await self.activate(parent_id)
            if parent is None:
                until = self.refused.get(parent_id)
                if until is not None:  # its subtree lives in the runtime that holds it
                    self.refused[actor_id] = until
                return None
        await parent.ready.wait()  # its on_start starts the children it starts itself
        cell = self._cells.get(actor_id)
        if cell is not None or self._cells.get(parent_id) is not parent:
            return cell
        # Not one its supervisor starts itself (a child started on first use, like a guard):
        # the supervisor is up now, so this one starts under it, at once.
        return await self.activate(actor_id)

    async def _start(
        self, actor_id: str, rec: ActorRecord, spec: ActorSpec, now: float
    ) -> Cell | None:
        """Take the lease (I8) and start the cell; None if another runtime holds the lease."""
        result = await self._committer.submit(
            LeaseAcquire(actor_id, self._runtime_id, self._lease_ttl)
        )
        fence = result.leases.get(actor_id)
        if fence is None:
            # Another live runtime holds it (the store judged its lease): not tried again here
            # before its owner renews it at the earliest.
            self.not_before[actor_id] = self.refused[actor_id] = now + self._lease_ttl / 2
            return None
        self.not_before.pop(actor_id, None)
        self.refused.pop(actor_id, None)
        if actor_id in self._supervision.held or actor_id in self._registry.stopping:
            # Held by its supervisor while we were acquiring: it is not ours to start.
            await self._committer.submit(LeaseRelease(actor_id, fence))
            return None
        self._registry.known.setdefault(actor_id, (spec, "active"))
        cell = self._new_cell(spec, actor_id, decode_init(spec, rec.init), fence, rec.parent_id)
        self._cells[actor_id] = cell
        self._life.start_soon(cell.run)
        telemetry.activations.add(1)
        governor.activated(len(self._cells))
        return cell

    def leased_elsewhere(self, actor_id: str) -> float | None:
        """Until when another live runtime is known to hold ``actor_id``'s lease (or its
        supervisor's, for a child that lives with it), from the store's refusal of the lease
        here; None if it is not known to (then an activation may take it)."""
        until = self.refused.get(actor_id)
        if until is not None and until <= self._kernel.clock():
            del self.refused[actor_id]
            return None
        return until

    def failed(self, actor_id: str, exc: Exception) -> None:
        """Activating ``actor_id`` (or its restart) failed: try again after a backoff."""
        n = self.failures.get(actor_id, 0) + 1
        self.failures[actor_id] = n
        delay = min(60.0, 0.5 * 2**n)
        self.not_before[actor_id] = self._kernel.clock() + delay
        # Try again once the backoff is over: the actor may hold queued mail that no new send
        # and no orphan scan will bring up (its lease is still ours, and renewed).
        if self._life.open and self._serving and self._life.started:
            self._life.start_soon(self._activate_later, actor_id, delay)

    async def _activate_later(self, actor_id: str, delay: float) -> None:
        await self._time.sleep(delay)
        if actor_id not in self._cells:
            self.activate_soon(actor_id)

    def cell_exited(self, cell: LiveActor) -> None:
        """``cell`` left memory, for whatever reason: out of the registry; what waited on it
        is taken up elsewhere."""
        self._registry.remove(cell)
        known = self._registry.known.get(cell.actor_id)
        if known is not None and known[1] != "active":  # stopped for good: its messages are gone
            self._claimed.difference_update(cell.known)
        children = getattr(cell.instance, "child_entries", None)
        if children is not None and self._supervision.failures:
            self._supervision.supervisor_left(cell.actor_id, {e.child_id for e in children()})
        for msg_id in cell.known:  # asks still waiting on a cell that left: poll the store
            if msg_id in self._replies:
                self._wake_scans()

    def forget(self, actor_id: str) -> None:
        """Drop what this runtime remembers of ``actor_id`` (its id went to a new actor)."""
        self._registry.known.pop(actor_id, None)
        self.not_before.pop(actor_id, None)
        self.refused.pop(actor_id, None)
        self.failures.pop(actor_id, None)
        self._supervision.root_restarts.pop(actor_id, None)
        self._supervision.root_last_failure.pop(actor_id, None)
