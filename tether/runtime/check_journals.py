"""``tether check``, per actor: its journal whole, and its snapshot the fold of that journal.

Each actor's journal must hold exactly the events ``1..head_seq``, in order (``head_seq``:
its last committed event, stored with every step). Its snapshot must be at a seq no later
than the head and equal the state its journal folds to at that seq, folded with the actor's
own class (``apply`` is pure, I3). An actor whose class does not import in this process (the
application is not on ``sys.path``: ``--app-dir``) has its journal checked, not its snapshot:
it is listed in ``CheckReport.unchecked``, and the check does not fail for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from tether.actors.actor import actor_spec, import_class
from tether.errors import CorruptRecordError
from tether.runtime.check_report import CheckReport
from tether.runtime.journal import decoders
from tether.runtime.runtime import Runtime
from tether.runtime.spawn_args import decode_init
from tether.store.records import ActorRecord, JournalRow, Snapshot

_CHUNK = 10_000  # journal rows per read


class _Folder:
    """Folds one actor's events with its class, if the class imports here."""

    def __init__(self, rt: Runtime, rec: ActorRecord) -> None:
        self.rt = rt
        self.why_not: str | None = None
        self.state: Any = None
        self.events: msgspec.msgpack.Decoder[Any] | None = None
        self.states: msgspec.msgpack.Decoder[Any] | None = None
        self.cls: type[Any] | None = None
        try:
            self.cls = cls = import_class(rec.class_path)
            spec = actor_spec(cls)
            self.instance = cls(**decode_init(spec, rec.init))
            _, self.events, self.states = decoders(spec)
            self.state = self.states.decode(rt.encode(spec.cls.initial_state))
        except Exception as exc:  # noqa: BLE001 - any failure to build it: not folded, said so
            self.why_not = f"{type(exc).__name__}: {exc}"

    def apply(self, row: JournalRow) -> None:
        if self.why_not is not None:
            return
        if self.events is None:
            raise CorruptRecordError(f"journal event {row.seq}: the class folds no events")
        self.state = self.instance.apply(self.state, self.events.decode(row.payload))


async def check_actor(rt: Runtime, rec: ActorRecord, report: CheckReport) -> tuple[int, bool]:
    """Check one actor's journal and snapshot, adding what is wrong to ``report``; the number
    of events read, and whether it has a snapshot."""
    actor_id, head = rec.actor_id, rec.head_seq
    try:
        snap = await rt.store.load_snapshot(actor_id)
    except CorruptRecordError as exc:
        report.add("journal_unreadable", f"snapshot of {actor_id!r}: {exc}", actor_id=actor_id)
        snap = None
    folder = _Folder(rt, rec) if snap is not None else None
    seq = read = 0
    state_at_snapshot: Any = None
    gap = False  # reported once per actor: the first gap says what is wrong
    try:
        async for row in _journal(rt, actor_id):
            if row.seq > head:
                report.add(
                    "journal_past_head",
                    f"journal of {actor_id!r} holds events from seq {row.seq} on, after its "
                    f"last committed event (head_seq {head})",
                    actor_id=actor_id,
                )
                break
            if row.seq != seq + 1 and not gap:
                report.add(
                    "journal_gap",
                    f"journal of {actor_id!r} skips from seq {seq} to seq {row.seq} "
                    f"(its last committed event is seq {head})",
                    actor_id=actor_id,
                )
                gap = True
            seq = row.seq
            read += 1
            if folder is not None and snap is not None and seq <= snap.seq:
                _fold_one(folder, row, actor_id, report)
                if seq == snap.seq:
                    state_at_snapshot = folder.state
    except CorruptRecordError as exc:
        report.add(
            "journal_unreadable",
            f"journal of {actor_id!r} after seq {seq} cannot be read: {exc}",
            actor_id=actor_id,
        )
        gap = True  # what follows is unknown, not missing
    if seq < head and not gap:
        report.add(
            "journal_gap",
            f"journal of {actor_id!r} ends at seq {seq}, but its last committed event is "
            f"seq {head}: events {seq + 1}..{head} are missing",
            actor_id=actor_id,
        )
    if snap is not None and folder is not None:
        _check_snapshot(rt, rec, snap, folder, state_at_snapshot, report)
    return read, snap is not None


async def _journal(rt: Runtime, actor_id: str) -> AsyncIterator[JournalRow]:
    """Every journal row of the actor, by seq, read ``_CHUNK`` at a time."""
    seq = 0
    while True:
        rows = await rt.store.load_journal(actor_id, seq, _CHUNK)
        for row in rows:
            yield row
        if len(rows) < _CHUNK:
            return
        seq = rows[-1].seq


def _fold_one(folder: _Folder, row: JournalRow, actor_id: str, report: CheckReport) -> None:
    try:
        folder.apply(row)
    except (msgspec.DecodeError, CorruptRecordError) as exc:
        report.add(
            "journal_unreadable",
            f"journal of {actor_id!r} at seq {row.seq} cannot be decoded: {exc}",
            actor_id=actor_id,
        )
        folder.why_not = "an event does not decode"
    except Exception as exc:  # noqa: BLE001 - the class's own apply: not a damaged row
        folder.why_not = f"its apply raised on seq {row.seq}: {exc!r}"


def _check_snapshot(
    rt: Runtime,
    rec: ActorRecord,
    snap: Snapshot,
    folder: _Folder,
    folded: Any,
    report: CheckReport,
) -> None:
    actor_id = rec.actor_id
    if snap.seq > rec.head_seq:
        report.add(
            "snapshot_past_head",
            f"snapshot of {actor_id!r} is at seq {snap.seq}, after its last committed event "
            f"(head_seq {rec.head_seq})",
            actor_id=actor_id,
        )
        return
    if getattr(folder.cls, "state_outside_journal", False):
        note = (
            f"snapshots of {rec.class_path} actors are not compared with their journals: "
            "their state also holds what they rebuild from elsewhere when they start"
        )
        if note not in report.unchecked:
            report.unchecked.append(note)
        return
    if folder.why_not is not None:
        report.unchecked.append(
            f"snapshot of {actor_id!r} (class {rec.class_path}) not compared with its "
            f"journal: {folder.why_not}"
        )
        return
    if folder.states is None:
        return
    try:
        stored = folder.states.decode(snap.state)
    except msgspec.DecodeError as exc:
        report.add(
            "journal_unreadable",
            f"snapshot of {actor_id!r} at seq {snap.seq} cannot be decoded: {exc}",
            actor_id=actor_id,
        )
        return
    if folded is None:  # the journal ended before the snapshot: reported as a gap already
        return
    if not _same(rt, stored, folded):
        report.add(
            "snapshot_mismatch",
            f"snapshot of {actor_id!r} at seq {snap.seq} is not the fold of its journal up "
            "to that seq",
            actor_id=actor_id,
        )


def _same(rt: Runtime, a: Any, b: Any) -> bool:
    """Equal states: by ``==``, or encoded alike (a state type without equality)."""
    with contextlib.suppress(Exception):  # a state type whose == fails: compare encodings
        if a == b:
            return True
    try:
        return bool(rt.encode(a) == rt.encode(b))
    except Exception:  # noqa: BLE001 - not encodable: cannot be told apart, so not a violation
        return True
