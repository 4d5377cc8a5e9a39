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

Every resolution is recorded in the effect's history with who made it, and every attempt,
allowed or refused, in the audit log (``tether.runtime.audit``): an allowed one in the
transaction of the resolution itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from tether import telemetry
from tether.actors.messages import UNENCODABLE, nesting_problem
from tether.errors import ConfigError, CorruptRecordError, EffectNotFound, NotPermitted
from tether.runtime.audit import Identity, check_identity, entry, refused
from tether.runtime.dead_letters import check_filter
from tether.store.records import EffectRecord

if TYPE_CHECKING:
    from tether.runtime.kernel import Kernel


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

    def __init__(self, runtime: Kernel) -> None:
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

    async def mark_done(
        self, key: str, result: Any = None, *, by: str = "unknown", identity: Identity | None = None
    ) -> None:
        """The call did happen: record ``result`` as its receipt; the step goes on with it.

        ``identity``: who resolves, as authenticated (default: ``by``, vouched for by the
        calling code). Each of these methods audits the attempt, allowed or refused."""
        who = _who(by, identity)

        def done(rec: EffectRecord) -> Resolution:
            _no_violation(rec, "no result can stand for it")
            blob = _result_blob(key, result)
            return Resolution("done", f"marked done by {who.name}", rec.reason, blob)

        await self._attempt("effect.done", key, who, done)

    async def retry(
        self, key: str, *, by: str = "unknown", identity: Identity | None = None
    ) -> None:
        """Call the tool again, with the same idempotency key."""
        who = _who(by, identity)

        def again(rec: EffectRecord) -> Resolution:
            _no_violation(rec, "it cannot be retried")
            return Resolution("retry", f"retry ordered by {who.name}", rec.reason)

        await self._attempt("effect.retry", key, who, again)

    async def abort(
        self, key: str, reason: str, *, by: str = "unknown", identity: Identity | None = None
    ) -> None:
        """Do not make the call; the waiting step gets ``EffectAborted`` with ``reason``."""
        who = _who(by, identity)

        def aborted(rec: EffectRecord) -> Resolution:
            return Resolution("aborted", f"aborted by {who.name}: {reason}", reason)

        if not (isinstance(reason, str) and reason.strip()):
            error = ConfigError("abort needs a reason: the step (and its agent) is told it")
            await refused(self._rt, entry(who, "effect.abort", str(key), self._rt.clock()), error)
            raise error
        await self._attempt("effect.abort", key, who, aborted)

    async def _attempt(
        self,
        action: str,
        key: str,
        who: Identity,
        resolution: Callable[[EffectRecord], Resolution],
    ) -> None:
        """Resolve the quarantined effect ``key`` as ``resolution`` says, or audit why not."""
        row = entry(who, action, str(key), self._rt.clock())
        try:
            rec = await self._quarantined(key)
            row = msgspec.structs.replace(row, actor_id=rec.actor_id)
            if who.forbidden is not None:
                raise NotPermitted(who.name, who.forbidden)
            how = resolution(rec)
        except (EffectNotFound, ConfigError, NotPermitted) as exc:
            await refused(self._rt, row, exc)
            raise
        now = self._rt.clock()
        new = msgspec.structs.replace(
            rec,
            status=how.status,
            result=how.result,
            reason=how.reason,
            history=[*rec.history, how.note],
            updated_at=now,
        )
        audit = msgspec.structs.replace(row, detail=how.note)
        if await self._rt.store.resolve_effect(rec.key, new, now, audit=audit) is None:
            lost = EffectNotFound(rec.key, "it was resolved by someone else meanwhile")
            await refused(self._rt, row, lost)
            raise lost
        if rec.actor_id in self._rt.cells:  # elsewhere, the owner's scan finds it
            self._rt.wake_actor(rec.actor_id)

    async def _quarantined(self, key: str) -> EffectRecord:
        # Among the quarantined rows first: an indexed lookup. Only a key that is not there
        # costs a scan of the ledger (the key is not indexed), to say what became of it.
        rows = await self._rt.store.find_effects(key=key, status="quarantined")
        if rows:
            return rows[0]
        rows = await self._rt.store.find_effects(key=key)
        if not rows:
            raise EffectNotFound(key)
        rec = rows[0]
        # A failed row says why: a retry a person ordered may have been refused by the open
        # breaker, its step gone on without it (it left the list; this is where it went).
        why = f": {rec.error}" if rec.status == "failed" and rec.error else ""
        raise EffectNotFound(key, f"it is {rec.status}, not quarantined{why}")


class Resolution(NamedTuple):
    """How a quarantined effect is resolved: its new status, the history note, the reason
    kept on it, and the result of one marked done."""

    status: str
    note: str
    reason: str | None
    result: bytes | None = None


def _no_violation(rec: EffectRecord, so: str) -> None:
    if rec.reason and rec.reason.startswith("determinism violation"):
        raise ConfigError(
            f"effect {rec.key} is a determinism violation: the replayed step asked for a "
            f"different call, so {so}; abort it"
        )


def _who(by: str, identity: Identity | None) -> Identity:
    if identity is None:
        if not (isinstance(by, str) and by.strip()):
            raise ConfigError(f"a resolution must say who made it (by=...), not {by!r}")
        return Identity(name=by)
    who = check_identity(identity)
    if by not in ("unknown", who.name):
        raise ConfigError(f"by={by!r} is not the resolving identity's name ({who.name!r})")
    return who


def _result_blob(key: str, result: Any) -> bytes:
    """``result`` as the receipt records it, or a ``ConfigError`` saying why it cannot be."""
    try:
        blob = msgspec.msgpack.encode(result)
        too_deep = nesting_problem(result, blob)
    # OverflowError: an int beyond 64 bits, which msgpack cannot hold
    except UNENCODABLE as exc:
        why = nesting_problem(result) or exc
        raise ConfigError(f"result for effect {key} cannot be recorded: {why}") from exc
    if too_deep is not None:
        raise ConfigError(f"result for effect {key} cannot be recorded: {too_deep}")
    return blob


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
