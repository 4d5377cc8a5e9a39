"""Shutdowns, as OTP does them: an instance stopped within its budget, children first.

An instance is shut down (not its durable existence: that is ``Runtime.stop``) when its
supervisor restarts it, removes it, or goes down itself, and when the runtime stops a
supervisor for good. It finishes its message, is cancelled when its budget (``shutdown``:
seconds, ``"infinity"`` or ``"brutal"``) is spent, and abandoned if it ignores the
cancellation: the next activation takes a new fencing token, so whatever it still tries to
commit is rejected (I8). A supervisor's children go down after its own instance, in reverse
start order, each within its own budget and what is left of the supervisor's; meanwhile
they are held, so that nothing activates them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import anyio

from tether import telemetry
from tether.runtime.kernel import ActiveCell, Kernel


class Shutdowns:
    """The shutdowns of one runtime's instances, for its supervision: ``hold`` keeps an actor
    from being activated (its status in ``held``); ``dismiss`` decides, as "exit", a failure
    of an actor that waits for its supervisor's decision."""

    def __init__(
        self,
        runtime: Kernel,
        *,
        hold: Callable[[str, str], None],
        held: dict[str, str],
        dismiss: Callable[[str, str], None],
    ) -> None:
        self._rt = runtime
        self._hold = hold
        self._held = held
        self._dismiss = dismiss

    async def actor(self, actor_id: str, shutdown: float | str, status: str) -> None:
        """Stop the actor's instance (not its durable existence) within its shutdown budget:
        let it finish its message, cancel it when the time is up, abandon it if it ignores
        the cancellation. A failure of it waiting for a decision is decided: it leaves.

        A supervisor takes its children down with it, after its own instance has stopped (so
        that it restarts none of them meanwhile), in reverse start order, each within its own
        budget and what is left of the supervisor's (OTP: a supervisor terminates its children
        before it exits, and one killed for its budget takes them down with it)."""
        await self._shutdown(actor_id, shutdown, status, _by_parent(self._rt.cells))

    async def children(self, actor_id: str, cell: ActiveCell | None, status: str) -> None:
        """Take down the children of the supervisor whose instance ``cell`` was (or is): in
        reverse start order, each within its own budget (``Runtime.stop``, a restart in
        place)."""
        live = _by_parent(self._rt.cells)
        await self._take_down(self._children(actor_id, cell, live), math.inf, status, live)

    async def _shutdown(
        self, actor_id: str, shutdown: float | str, status: str, live: dict[str, list[ActiveCell]]
    ) -> None:
        self._hold(actor_id, status)
        self._dismiss(actor_id, f"shut down by its supervisor ({status})")
        cell = self._rt.cells.get(actor_id)
        budget = _budget(shutdown)
        deadline = anyio.current_time() + budget
        children = self._children(actor_id, cell, live)  # from its instance, while it is up
        if cell is not None:
            await self._stop_instance(cell, shutdown, budget, status)
        await self._take_down(children, deadline, status, live)

    async def _take_down(
        self,
        children: list[tuple[str, float | str]],
        deadline: float,
        status: str,
        live: dict[str, list[ActiveCell]],
    ) -> None:
        for child_id, shutdown in reversed(children):
            left = deadline - anyio.current_time()
            await self._shutdown(child_id, _within(shutdown, left), status, live)
        for child_id, _ in children:
            # Free to start again: none can while their supervisor is down, since a child is
            # activated through its supervisor, and a supervisor restarts them itself.
            if self._held.get(child_id) == status:
                del self._held[child_id]

    def _children(
        self, actor_id: str, cell: ActiveCell | None, live: dict[str, list[ActiveCell]]
    ) -> list[tuple[str, float | str]]:
        """The children of a supervisor, in start order, with their shutdown budgets: its child
        entries, then the children by record alone active here (a session's guards), from
        ``live``. Empty for an actor that is not a supervisor."""
        entries = getattr(cell.instance, "child_entries", None) if cell is not None else None
        if cell is not None and not callable(entries):
            return []
        ordered: list[tuple[str, float | str]] = (
            [(e.child_id, e.shutdown) for e in entries()] if callable(entries) else []
        )
        listed = {child_id for child_id, _ in ordered}
        ordered += [(c.actor_id, 5.0) for c in live.get(actor_id, ()) if c.actor_id not in listed]
        return ordered

    async def _stop_instance(
        self, cell: ActiveCell, shutdown: float | str, budget: float, status: str
    ) -> None:
        actor_id = cell.actor_id
        if shutdown == "brutal":
            # Cancelled at once, and not woken first: woken, an idle actor would run its
            # on_stop before the cancellation reaches it (OTP's kill runs no terminate).
            cell.cancel()
        else:
            cell.leave()
        with anyio.move_on_after(budget):
            await cell.exited.wait()
        if not cell.exited.is_set():
            cell.cancel()
            with anyio.move_on_after(1.0):
                await cell.exited.wait()
        if not cell.exited.is_set():
            # It ignores cancellation. Abandon it: the next activation takes a new fencing
            # token, so whatever it still tries to commit is rejected (I8).
            self._rt.abandon_cell(cell)
            _event("child_abandoned", actor_id, shutdown=str(shutdown))
        _event("child_shut_down", actor_id, status=status)


def _by_parent(cells: Mapping[str, ActiveCell]) -> dict[str, list[ActiveCell]]:
    """The active cells by their supervisor: one pass, however many shutdowns then look."""
    live: dict[str, list[ActiveCell]] = {}
    for cell in cells.values():
        if cell.parent_id is not None:
            live.setdefault(cell.parent_id, []).append(cell)
    return live


def _budget(shutdown: float | str) -> float:
    """A shutdown spec as seconds: ``brutal`` none, ``infinity`` no limit."""
    if shutdown == "brutal":
        return 0.0
    return math.inf if shutdown == "infinity" else float(shutdown)


def _within(shutdown: float | str, left: float) -> float | str:
    """A child's shutdown spec cut to the ``left`` seconds of its supervisor's own budget:
    nothing left is ``brutal`` (a supervisor killed for its budget takes its children with it)."""
    if left <= 0:
        return "brutal"
    if shutdown == "brutal" or left == math.inf:
        return shutdown
    return min(_budget(shutdown), left)


_event = telemetry.supervision_event
