"""``rt.quarantine``: the ambiguous effects held for a person, and their resolution.

An effect is quarantined when its outcome cannot be known safely: its process died during the
call (or the call timed out) and its tool's recovery policy is ``"quarantine"``, its reconcile
hook could not tell, or a replayed step asked for a different call at the same place (a
determinism violation). A call that was made but whose result cannot be recorded as the
tool's return type, and a recorded result that no longer decodes, are held the same way (for
tools other than ``"retry"``). The step that made it waits, parked, and the actor goes on with
other messages. Resolving the effect, from this process or any other process on the same store,
wakes the step up:

* ``mark_done(key, result)``: the call did happen; the step gets ``result`` as its return value;
* ``retry(key)``: call again, with the same idempotency key;
* ``abort(key, reason)``: do not call it; the step gets ``tether.EffectAborted``.

Every resolution is recorded in the effect's history with who made it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from tether.actors.messages import UNENCODABLE
from tether.errors import ConfigError, CorruptRecordError, EffectNotFound
from tether.runtime import telemetry
from tether.runtime.dead_letters import check_filter
from tether.runtime.store import EffectRecord

if TYPE_CHECKING:
    from tether.runtime.runtime import Runtime


class QuarantinedEffect(msgspec.Struct, frozen=True):
    """What a person needs to resolve a quarantined effect."""

    key: str
    actor_id: str
    msg_id: str
    index: int
    tool: str
    args: dict[str, Any]
    attempts: int
    reason: str
    history: list[str]
    since: float


def _report_corrupt(key: str, exc: CorruptRecordError) -> None:
    telemetry.report_corrupt("effect_record_corrupt", key, exc, effect_key=key)


class Quarantine:
    """The runtime's view of quarantined effects (``rt.quarantine``)."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    async def list(
        self,
        actor_id: str | None = None,
        *,
        on_corrupt: Callable[[str, CorruptRecordError], None] | None = None,
    ) -> list[QuarantinedEffect]:
        """Every quarantined effect (of one actor, if given), oldest first.

        A ledger row damaged in the store is left out and reported as ``on_corrupt(key,
        error)`` (without it, logged once as ``effect_record_corrupt``)."""
        check_filter(actor_id)
        rows = await self._rt.store.find_effects(
            actor_id=actor_id, status="quarantined", on_corrupt=on_corrupt or _report_corrupt
        )
        return [_view(r) for r in rows]

    async def get(self, key: str) -> QuarantinedEffect:
        return _view(await self._quarantined(key))

    async def mark_done(self, key: str, result: Any = None, *, by: str = "unknown") -> None:
        """The call did happen: record ``result`` as its receipt; the step goes on with it."""
        rec = await self._quarantined(key)
        if rec.reason and rec.reason.startswith("determinism violation"):
            raise ConfigError(
                f"effect {key} is a determinism violation: the replayed step asked for a "
                "different call, so no result can stand for it; abort it"
            )
        try:
            blob = msgspec.msgpack.encode(result)
        # OverflowError: an int beyond 64 bits, which msgpack cannot hold
        except UNENCODABLE as exc:
            raise ConfigError(f"result for effect {key} cannot be recorded: {exc}") from exc
        await self._resolve(
            rec, status="done", result=blob, note=f"marked done by {by}", reason=rec.reason
        )

    async def retry(self, key: str, *, by: str = "unknown") -> None:
        """Call the tool again, with the same idempotency key."""
        rec = await self._quarantined(key)
        if rec.reason and rec.reason.startswith("determinism violation"):
            raise ConfigError(
                f"effect {key} is a determinism violation: the recorded call is not the one the "
                "step now asks for, so it cannot be retried; abort it"
            )
        await self._resolve(rec, status="retry", note=f"retry ordered by {by}", reason=rec.reason)

    async def abort(self, key: str, reason: str, *, by: str = "unknown") -> None:
        """Do not make the call; the waiting step gets ``EffectAborted`` with ``reason``."""
        if not reason:
            raise ConfigError("abort needs a reason: the step (and its agent) is told it")
        rec = await self._quarantined(key)
        await self._resolve(rec, status="aborted", note=f"aborted by {by}: {reason}", reason=reason)

    async def _quarantined(self, key: str) -> EffectRecord:
        # Among the quarantined rows first: an indexed lookup. Only a key that is not there
        # costs a scan of the ledger (the key is not indexed), to say what became of it.
        rows = await self._rt.store.find_effects(key=key, status="quarantined")
        if rows:
            return rows[0]
        rows = await self._rt.store.find_effects(key=key)
        if not rows:
            raise EffectNotFound(key)
        raise EffectNotFound(key, f"it is {rows[0].status}, not quarantined")

    async def _resolve(
        self,
        rec: EffectRecord,
        *,
        status: str,
        note: str,
        reason: str | None,
        result: bytes | None = None,
    ) -> None:
        now = self._rt.clock()
        new = msgspec.structs.replace(
            rec,
            status=status,
            result=result,
            reason=reason,
            history=[*rec.history, note],
            updated_at=now,
        )
        if await self._rt.store.resolve_effect(rec.key, new, now) is None:
            raise EffectNotFound(rec.key, "it was resolved by someone else meanwhile")
        if rec.actor_id in self._rt.cells:  # elsewhere, the owner's scan finds it
            self._rt.wake_actor(rec.actor_id)


def _view(rec: EffectRecord) -> QuarantinedEffect:
    try:
        args = msgspec.msgpack.decode(rec.args, type=dict[str, Any])
    except msgspec.DecodeError:
        args = {"(undecodable)": rec.args.hex()}
    return QuarantinedEffect(
        key=rec.key,
        actor_id=rec.actor_id,
        msg_id=rec.msg_id,
        index=rec.idx,
        tool=rec.tool,
        args=args,
        attempts=rec.attempts,
        reason=rec.reason or "",
        history=list(rec.history),
        since=rec.updated_at,
    )
