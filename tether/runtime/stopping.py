"""Stopping for good, and death watch: an actor's last message, its children, its stop record,
its watchers.

``stop`` lets the actor finish its current message, takes its children down (a supervisor's:
in reverse start order, each within its shutdown budget, then stopped for good likewise) and
commits its ``StopActor``: its remaining messages go to the dead letters, its watchers are
sent ``Terminated``, in that one transaction. An actor that stops itself (``self.stop()`` in
a handler) commits the same record with its step, and its supervisor is told. Either way the
asks still waiting on it here are answered at once (``Replies.answer_stopped``).

``watch`` stores a watch pair; watching an actor that is gone already sends the notice at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether import telemetry
from tether.actors.messages import Terminated
from tether.errors import ActorNotFound, ConfigError
from tether.runtime.kernel import Kernel
from tether.runtime.lifecycle import Lifecycle
from tether.runtime.live_actor import LiveActor
from tether.runtime.mail import Mail
from tether.runtime.registry import Registry, check_id, report_corrupt_actor
from tether.runtime.replies import Replies
from tether.runtime.supervision import Supervision
from tether.store.records import StopActor, Watch


class Stopping:
    """The stops of one runtime."""

    def __init__(
        self,
        kernel: Kernel,
        registry: Registry,
        supervision: Supervision,
        replies: Replies,
        mail: Mail,
        *,
        life: Lifecycle,
        encode: Callable[[Any], bytes],
    ) -> None:
        self._kernel = kernel
        self._registry = registry
        self._supervision = supervision
        self._replies = replies
        self._tell = mail.tell
        self._life = life
        self._encode = encode

    async def stop(self, actor_id: str, reason: str) -> None:
        """Stop an actor for good: it finishes its current message; the rest go to dead letters."""
        self._life.check_open()
        # A ref or a non-string reason failed deep in the store (SQLite: a binding error; the
        # memory store: ActorNotFound, or a list stored as the reason): refused here, by name.
        check_id(actor_id)
        if not isinstance(reason, str):
            raise ConfigError(f"stop reason must be a string, not {reason!r}")
        registry, supervision, kernel = self._registry, self._supervision, self._kernel
        spec, status = await registry.spec_of(actor_id)
        if status != "active":
            return
        registry.stopping.add(actor_id)
        supervision.cancel_restart(actor_id)
        try:
            cell = registry.cells.get(actor_id)
            if cell is not None:
                cell.stop_reason = reason
                cell.wake.set()
                await cell.exited.wait()
            # A supervisor's children go down next, in reverse start order, each within its own
            # shutdown budget (OTP shutdown), and are then stopped for good, likewise.
            await supervision.shutdown_children(actor_id, cell, "stopped")
            children = await kernel.store.list_actors(
                parent_id=actor_id, on_corrupt=report_corrupt_actor
            )
            for child in reversed(children):
                if child.status == "active":
                    await self.stop(child.actor_id, f"supervisor {actor_id} stopped: {reason}")
            await kernel.committer.submit(self.stop_record(actor_id, reason))
            registry.known[actor_id] = (spec, "stopped")
            self.stopped_for_good(actor_id, reason)
        finally:
            registry.stopping.discard(actor_id)
        telemetry.supervision_event("actor_stopped", actor_id, reason=reason)

    def stop_record(self, actor_id: str, reason: str, *, status: str = "stopped") -> StopActor:
        """The write that stops ``actor_id`` for good and notifies its watchers."""
        notice = self._encode(Terminated(actor_id=actor_id, reason=reason, status=status))
        return StopActor(actor_id, reason, self._kernel.clock(), notice, status)

    def stopped_for_good(self, actor_id: str, reason: str) -> None:
        """``actor_id``'s stop committed: the asks still waiting on it here are answered now,
        not at their timeout nor at the next poll (``Replies.answer_stopped``)."""
        if self._replies.waits_on(actor_id):
            self._life.start_soon(self._replies.answer_stopped, actor_id, reason)

    def actor_stopped_itself(self, cell: LiveActor, reason: str) -> None:
        """``cell``'s actor stopped itself, in the step that just committed: its supervisor
        is told (``ChildExited``)."""
        from tether.supervisor.supervisor import ChildExited

        self._registry.known[cell.actor_id] = (cell.spec, "stopped")
        self.stopped_for_good(cell.actor_id, reason)
        telemetry.log.info("actor_stopped", actor_id=cell.actor_id, reason=reason)
        parent = self._registry.cells.get(cell.parent_id) if cell.parent_id is not None else None
        if parent is not None:
            parent.offer_local(ChildExited(child_id=cell.actor_id, reason=reason))

    async def watch(self, watcher: str, watched: str) -> None:
        """``watcher`` receives ``Terminated`` when ``watched`` stops for good."""
        spec, _ = await self._registry.spec_of(watcher)
        if Terminated not in spec.message_types:
            raise ConfigError(
                f"{watcher!r} watches {watched!r} but its handle() does not accept tether.Terminated"
            )
        rec = await self._kernel.store.get_actor(watched)
        if rec is None:
            raise ActorNotFound(watched)
        await self._kernel.committer.submit(Watch(watcher=watcher, watched=watched))
        if rec.status != "active":  # already gone: the notice comes at once
            await self._tell(
                watcher,
                Terminated(
                    actor_id=watched, reason=rec.stop_reason or rec.status, status=rec.status
                ),
                dedup_key=f"terminated:{watched}",
                delay=None,
            )
