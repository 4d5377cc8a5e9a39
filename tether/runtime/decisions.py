"""Supervisor decisions, carried out by the cell of the actor they are about (DESIGN §5).

A failed handler, a failed start and an escalation are reported to the actor's supervisor
(``Supervision.report``), whose ``Decision`` the cell carries out here: *resume* (the same
instance goes on; its state was rolled back already), *restart* (after a backoff: a new
instance, its state re-folded from the journal, never resumed in place; a supervisor takes its
children down first and starts them afresh), *exit* (the instance leaves memory; its
supervisor starts it again), *stop* (stopped for good, recorded), or *stopped* (already stopped
for good by supervision). While it backs off or restarts, the actor is held: nothing activates
it meanwhile.
"""

from __future__ import annotations

from tether import telemetry
from tether.errors import ChildStartFailed
from tether.runtime.live_actor import LiveActor
from tether.runtime.step import Exit
from tether.runtime.supervision import Decision


async def act_on(cell: LiveActor, decision: Decision) -> None:
    """Carry out ``decision`` about ``cell``'s actor; raises ``Exit`` when it leaves memory."""
    rt = cell.runtime
    sup = rt.supervision
    actor_id = cell.actor_id
    match decision.kind:
        case "resume":
            pass  # same instance; the state was already rolled back to before the message
        case "restart":
            if decision.delay > 0:
                sup.held[actor_id] = "backing off"
                telemetry.supervision_event("actor_backing_off", actor_id, delay=decision.delay)
                await rt.time.sleep(decision.delay)
            sup.held[actor_id] = "restarting"
            failed: Exception | None = None
            try:
                async with sup.fresh_start(cell):
                    await cell.restart()
            except Exception as exc:  # noqa: BLE001 - a failed restart, reported as one
                failed = exc
            finally:
                sup.held.pop(actor_id, None)
            if failed is not None:
                await _restart_failed(cell, failed)
        case "exit":
            raise Exit(decision.reason)
        case "stop":
            await cell.commit(rt.stop_record(actor_id, decision.reason))
            sup.held.pop(actor_id, None)
            rt.forget_status(actor_id, "stopped")  # its supervisor's decision
            rt.stopped_for_good(actor_id, decision.reason)
            raise Exit(decision.reason)
        case "stopped":
            raise Exit(decision.reason)  # already stopped for good by supervision


async def start_failed(cell: LiveActor, exc: Exception) -> None:
    """Recovery or ``on_start`` failed: a failed (re)start, reported like any failure. A
    top-level actor is activated again after a backoff."""
    rt = cell.runtime
    actor_id = cell.actor_id
    telemetry.log.error("actor_start_failed", actor_id=actor_id, error=repr(exc))
    if cell.parent_id is None:
        if not (cell.start_awaited and isinstance(exc, ChildStartFailed)):
            rt.activation_failed(actor_id, exc)  # tried again later
        return
    decision = await rt.supervision.report(cell, exc, starting=True)
    if decision.kind == "stop":
        await cell.commit(rt.stop_record(actor_id, decision.reason))
        rt.forget_status(actor_id, "stopped")
        rt.stopped_for_good(actor_id, decision.reason)
    elif decision.kind in ("restart", "resume"):
        rt.supervision.restart_later(cell.parent_id, [], 0.0, retry=(actor_id, decision.delay))


async def _restart_failed(cell: LiveActor, exc: Exception) -> None:
    """A restart in place failed (recovery or ``on_start``): it is reported as the failed
    start it is, which counts toward the supervisor's intensity, and this instance leaves."""
    cell.start_error = exc
    await start_failed(cell, exc)
    raise Exit(f"its restart failed: {type(exc).__name__}: {exc}")
