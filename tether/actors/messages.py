"""The wire types: what actors receive (``Message``) and what they journal (``Event``).

Both are frozen msgspec Structs, tagged by class name, so a stored payload names its own type.
Journal types follow msgspec's schema-evolution rules: a field added later needs a default, and
``forbid_unknown_fields`` stays off so that old readers keep working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, dataclass_transform

import msgspec
import msgspec.inspect

if TYPE_CHECKING:
    # Type checkers are told that subclasses inherit frozen and kw_only, so users write
    # `class Deposit(tether.Message): amount: int` with no options and mypy --strict agrees.
    @dataclass_transform(
        frozen_default=True, kw_only_default=True, field_specifiers=(msgspec.field,)
    )
    class _Frozen(msgspec.Struct, frozen=True):
        pass

    class Message(_Frozen):
        """Base class for everything an actor accepts. Subclass it with typed fields."""

        interrupts: ClassVar[bool] = False

    class Event(_Frozen):
        """Base class for everything an actor persists to its journal. Subclass it with typed fields."""

else:

    class Message(msgspec.Struct, frozen=True, tag=True, kw_only=True):
        """Base class for everything an actor accepts. Subclass it with typed fields.

        A subclass that sets ``interrupts = True`` (``tether.CancelTask``) cuts short the
        tool call its actor's running step waits on, when it arrives (``docs/recovery.md``,
        "Interrupted calls")."""

        interrupts: ClassVar[bool] = False

    class Event(msgspec.Struct, frozen=True, tag=True, kw_only=True):
        """Base class for everything an actor persists to its journal. Subclass it with typed fields."""


class Terminated(Message):
    """Sent to each watcher when the actor it watches stops for good (see ``Actor.watch``)."""

    actor_id: str
    reason: str
    status: str = "stopped"


class DeadLettered(Message):
    """Delivered to an actor whose ``handle`` accepts it when one of its own messages is moved
    to the dead letters (I7), stored in the same transaction as that move: the actor can end
    what the message was part of (an agent session fails the task whose step it was). Never
    sent for a ``DeadLettered`` itself."""

    msg_id: str
    msg_type: str  # the dead letter's message type
    payload: bytes  # its stored form (decode it as that type)
    reason: str
    errors: list[str]  # one entry per attempt


class FallibleReply(msgspec.Struct, frozen=True, kw_only=True):
    """A reply that may stand for a failure: an ``ask`` answered with it raises what
    ``failure()`` returns instead of returning it (whichever process asked). The handler
    still commits it as its reply, so asking again with the same dedup key raises the same."""

    def failure(self) -> Exception | None:
        """The error the asker gets instead of this reply; None: the reply is returned."""
        return None


# What encoding a value can raise when the value cannot be stored: a type msgspec does not know
# (TypeError, EncodeError), an int beyond msgpack's 64 bits (OverflowError), or containers
# nested deeper than the interpreter's stack allows (RecursionError: where, depends on how deep
# the stack already is, and on the Python version; :func:`nesting_problem` is the limit that
# does not). Caught as one, wherever a value is about to be stored, and reported as bad input
# by name.
UNENCODABLE = (TypeError, OverflowError, msgspec.EncodeError, RecursionError)

MAX_NESTING = 256
"""How many containers (lists, tuples, sets, dicts, structs) deep a value tether stores may
nest. Encoding and decoding recurse once per level, against Python's recursion limit (1000 by
default) less the stack already in use: a value that encodes at one depth of the stack fails to
decode at another, as a bare ``RecursionError``. At 256 levels there is room for both from any
reasonable stack, on every Python version; no JSON-like data a person or a model writes comes
near it."""

TOO_DEEP = (
    f"it nests lists, dicts or structs more than {MAX_NESTING} levels deep "
    "(the limit tether stores)"
)

# The bytes that can begin a msgpack array or map (fixmap, fixarray, map/array 16 and 32).
# Every container on a path from the root of an encoded value has its own such byte, so a
# payload holding at most MAX_NESTING of them cannot nest deeper: most are ruled out in C.
_NOT_CONTAINER_START = bytes(b for b in range(256) if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF))


def nesting_problem(value: object, encoded: bytes | None = None) -> str | None:
    """Why ``value`` nests too deeply to be stored, or None. ``encoded`` (its msgpack form,
    when the caller has it) lets the usual value pass without a walk. Never recurses.

    The usual value costs a lookup or two: a scalar, or a Struct whose fields are all scalars
    by their types (most messages, most tools' arguments), is one level deep whatever it holds.
    """
    if encoded is not None and len(encoded) <= MAX_NESTING:
        return None
    if (_kinds.get(type(value)) or _kind(type(value))) != _NESTS:
        return None
    if encoded is not None and len(encoded.translate(None, _NOT_CONTAINER_START)) <= MAX_NESTING:
        return None
    level: list[tuple[Any, int]] = [(value, 1)]
    while level:
        item, depth = level.pop()
        kind = _kinds.get(type(item)) or _kind(type(item))
        if kind == _SCALAR:
            continue
        if depth > MAX_NESTING:
            return TOO_DEEP
        if kind == _FLAT:
            continue  # one level, with nothing below it
        if isinstance(item, dict):
            children: Any = [*item.keys(), *item.values()]
        elif isinstance(item, list | tuple | set | frozenset):
            children = item
        else:
            children = msgspec.structs.astuple(item)
        below = depth + 1
        # a known scalar is not pushed; anything else is sorted out when it is popped
        level.extend([(c, below) for c in children if _kinds.get(type(c)) != _SCALAR])
    return None


# What a value's type says of its nesting, found once per type (``isinstance`` against
# msgspec.Struct costs as much as a small message's whole check): a scalar, a Struct whose
# fields are all scalars by their types (one level, whatever it holds), or something that may
# nest deeper. 0 (falsy) is "not known yet".
_SCALAR, _FLAT, _NESTS = 1, 2, 3
_kinds: dict[type, int] = dict.fromkeys((str, int, float, bool, type(None), bytes), _SCALAR)
_CONTAINERS = (msgspec.Struct, dict, list, tuple, set, frozenset)
_SCALAR_TYPES = (
    msgspec.inspect.StrType,
    msgspec.inspect.IntType,
    msgspec.inspect.FloatType,
    msgspec.inspect.BoolType,
    msgspec.inspect.NoneType,
    msgspec.inspect.BytesType,
    msgspec.inspect.LiteralType,
    msgspec.inspect.EnumType,
    msgspec.inspect.DateTimeType,
    msgspec.inspect.DateType,
    msgspec.inspect.TimeType,
    msgspec.inspect.TimeDeltaType,
    msgspec.inspect.UUIDType,
    msgspec.inspect.DecimalType,
)


def _kind(cls: type) -> int:
    kind = _SCALAR
    if issubclass(cls, msgspec.Struct):
        info = msgspec.inspect.type_info(cls)
        fields = info.fields if isinstance(info, msgspec.inspect.StructType) else None
        kind = _FLAT if fields is not None and all(_scalar(f.type) for f in fields) else _NESTS
    elif issubclass(cls, _CONTAINERS):
        kind = _NESTS
    _kinds[cls] = kind
    return kind


def _scalar(t: msgspec.inspect.Type) -> bool:
    if isinstance(t, msgspec.inspect.UnionType):
        return all(_scalar(u) for u in t.types)
    return isinstance(t, _SCALAR_TYPES)
