"""The journal and its fold (I3): an actor's state is the fold of its committed events.

``fold`` rebuilds a state from the latest snapshot and the journal after it, checking that
every event up to the actor's ``head_seq`` is there, in order; ``decoders`` are an actor
class's message, event and state decoders, built once per class. Both read only: a cell's
recovery, the check of a send, ``tether check``, and an administration process's view of an
actor it does not run (``folded``, ``session_info``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from tether.actors.actor import Actor, ActorSpec, actor_spec, import_class
from tether.errors import ActorNotFound, ConfigError, CorruptRecordError
from tether.runtime.kernel import Kernel
from tether.runtime.spawn_args import decode_init
from tether.store.records import ActorRecord, JournalRow, Snapshot

if TYPE_CHECKING:
    from tether.actors.session import SessionInfo

_encode = msgspec.msgpack.Encoder().encode


class JournalReads(Protocol):
    """The reads a fold makes: a ``Store``, or the runtime's ``Reader``, which gathers them
    with other activations' reads into one store call."""

    async def get_actor(self, actor_id: str) -> ActorRecord | None: ...
    async def load_snapshot(self, actor_id: str) -> Snapshot | None: ...
    async def load_journal(self, actor_id: str, after_seq: int, limit: int) -> list[JournalRow]: ...


_JOURNAL_CHUNK = 20_000  # rows per journal read: few thread hops, bounded memory

_Decoders = tuple[
    "msgspec.msgpack.Decoder[Any]",
    "msgspec.msgpack.Decoder[Any] | None",
    "msgspec.msgpack.Decoder[Any]",
]
_decoders: dict[type[Any], _Decoders] = {}


async def fold(
    store: JournalReads,
    encode: Callable[[Any], bytes],
    spec: ActorSpec,
    actor_id: str,
    instance: Actor[Any],
) -> tuple[Any, int]:
    """The state of ``actor_id`` as its committed journal makes it (I3), folded with
    ``instance.apply`` from the latest snapshot, and the seq it is at. Reads only: a cell's
    recovery, and an administration process's view of an actor it does not run.

    Every event from the snapshot's seq to the actor's ``head_seq`` (its last committed event,
    stored with every step) must be read, in order, with no gap, and the snapshot must not be
    past the head: otherwise the journal was damaged (a page of the file overwritten) and the
    fold would be a state the actor never had. That, and a store read that fails because the
    file is damaged, is a ``CorruptRecordError`` naming the actor: it goes unserved, and the
    others go on."""
    with _named(actor_id):
        _, event_decoder, state_decoder = decoders(spec)
        snap = await store.load_snapshot(actor_id)
        # Read after the snapshot and before the journal: a head read concurrently with a live
        # owner's commits (an administration process) is then never behind the snapshot, and the
        # journal read after it holds at least every event up to it.
        rec = await store.get_actor(actor_id)
        head = rec.head_seq if rec is not None else 0
        if snap is not None:
            if snap.seq > head:
                raise CorruptRecordError(
                    f"snapshot of {actor_id!r} is at seq {snap.seq}, past its last committed "
                    f"event (head_seq {head}): the journal or the actor's row is damaged"
                )
            try:
                state = state_decoder.decode(snap.state)
            except msgspec.DecodeError as exc:
                raise CorruptRecordError(
                    f"snapshot of {actor_id!r} at seq {snap.seq} cannot be decoded: {exc}"
                ) from exc
            seq = snap.seq
        else:
            state = state_decoder.decode(encode(spec.cls.initial_state))
            seq = 0
        apply = instance.apply
        decode = event_decoder.decode if event_decoder is not None else None
        while True:
            rows = await store.load_journal(actor_id, seq, _JOURNAL_CHUNK)
            if rows and decode is None:
                raise CorruptRecordError(
                    f"{actor_id!r} has journal events but its class folds none"
                )
            # One comparison of two lists: cheap next to the fold, and exact (a damaged b-tree
            # can return rows out of order, or twice, as well as too few).
            if rows and [r.seq for r in rows] != list(range(seq + 1, seq + 1 + len(rows))):
                raise CorruptRecordError(_gap(actor_id, seq, rows, head))
            try:  # one try around the hot loop, not one per event
                for row in rows:
                    state = apply(state, decode(row.payload))  # type: ignore[misc]
            except msgspec.DecodeError as exc:
                try:
                    decode(row.payload)  # type: ignore[misc]
                except msgspec.DecodeError:
                    raise CorruptRecordError(
                        f"journal of {actor_id!r} at seq {row.seq} cannot be decoded: {exc}"
                    ) from exc
                raise  # from the actor's own apply: not a corrupt row
            if rows:
                seq = rows[-1].seq
            if len(rows) < _JOURNAL_CHUNK:
                if seq < head:
                    raise CorruptRecordError(
                        f"journal of {actor_id!r} ends at seq {seq}, but its last committed event "
                        f"is seq {head}: events {seq + 1}..{head} are missing (damaged store)"
                    )
                return state, seq


@contextlib.contextmanager
def _named(actor_id: str) -> Iterator[None]:
    """A ``CorruptRecordError`` raised inside names the actor whose journal it is."""
    try:
        yield
    except CorruptRecordError as exc:
        if repr(actor_id) in str(exc):
            raise
        raise CorruptRecordError(f"the journal of {actor_id!r} cannot be read: {exc}") from exc


def _gap(actor_id: str, seq: int, rows: Sequence[JournalRow], head: int) -> str:
    """Why ``rows``, read after ``seq``, are not the events ``seq + 1``, ``seq + 2``, …"""
    expected = seq + 1
    for row in rows:
        if row.seq != expected:
            break
        expected += 1
    return (
        f"journal of {actor_id!r} skips from seq {expected - 1} to seq {row.seq} (its last "
        f"committed event is seq {head}): events are missing or out of order (damaged store)"
    )


def decoders(spec: ActorSpec) -> _Decoders:
    """The decoders of an actor class's messages, events (None if it folds none) and state:
    built once per class, shared by its cells and by the check of every send to it."""
    found = _decoders.get(spec.cls)
    if found is None:
        types = spec.message_types
        found = _decoders[spec.cls] = (
            msgspec.msgpack.Decoder(types[0] if len(types) == 1 else _union(types)),
            msgspec.msgpack.Decoder(_union(spec.event_types)) if spec.event_types else None,
            msgspec.msgpack.Decoder(spec.state_type),
        )
    return found


def _union(types: tuple[type[Any], ...]) -> Any:
    import typing

    return typing.Union[types]  # noqa: UP007 - built at run time from a tuple


async def folded(runtime: Kernel, rec: ActorRecord, cls: type[Any]) -> Any:
    """An instance of ``rec``'s actor that reads the state its committed journal folds
    to, to describe itself (it never handles a message): ``rt.tree()``'s detail of an actor
    not active here, ``rt.session_info``."""
    spec = actor_spec(cls)
    instance = cls(**decode_init(spec, rec.init))
    state, _ = await fold(runtime.store, _encode, spec, rec.actor_id, instance)
    instance._tether_cell = _Folded(rec.actor_id, state, runtime)
    return instance


async def session_info(runtime: Kernel, session_id: str) -> SessionInfo:
    """``rt.session_info``: the agent session's view of itself, from its committed journal."""
    rec = await runtime.store.get_actor(session_id)
    if rec is None:
        raise ActorNotFound(session_id)
    cls = import_class(rec.class_path)
    if not getattr(cls, "is_session", False):
        raise ConfigError(f"{session_id!r} is a {rec.class_path}, not an agent session")
    info: SessionInfo = (await folded(runtime, rec, cls)).info()
    return info


class _Folded:
    """What an actor instance built only to describe itself reads through its cell: its id,
    its state, and the runtime (for its clock)."""

    __slots__ = ("actor_id", "runtime", "state")

    def __init__(self, actor_id: str, state: Any, runtime: Kernel) -> None:
        self.actor_id = actor_id
        self.state = state
        self.runtime = runtime
