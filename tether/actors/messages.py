"""The wire types: what actors receive (``Message``) and what they journal (``Event``).

Both are frozen msgspec Structs, tagged by class name, so a stored payload names its own type.
Journal types follow msgspec's schema-evolution rules: a field added later needs a default, and
``forbid_unknown_fields`` stays off so that old readers keep working.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, dataclass_transform

import msgspec

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

    class Event(_Frozen):
        """Base class for everything an actor persists to its journal. Subclass it with typed fields."""

else:

    class Message(msgspec.Struct, frozen=True, tag=True, kw_only=True):
        """Base class for everything an actor accepts. Subclass it with typed fields."""

    class Event(msgspec.Struct, frozen=True, tag=True, kw_only=True):
        """Base class for everything an actor persists to its journal. Subclass it with typed fields."""


class Terminated(Message):
    """Sent to each watcher when the actor it watches stops for good (see ``Actor.watch``)."""

    actor_id: str
    reason: str
    status: str = "stopped"


# What encoding a value can raise when the value cannot be stored: a type msgspec does not know
# (TypeError, EncodeError) or an int beyond msgpack's 64 bits (OverflowError). Caught as one,
# wherever a value is about to be stored, and reported as bad input by name.
UNENCODABLE = (TypeError, OverflowError, msgspec.EncodeError)
