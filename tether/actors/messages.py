"""The wire types: what actors receive (``Message``) and what they journal (``Event``).

Both are frozen msgspec Structs, tagged by class name, so a stored payload names its own type.
Journal types follow msgspec's schema-evolution rules: a field added later needs a default, and
``forbid_unknown_fields`` stays off so that old readers keep working.
"""

from __future__ import annotations

import msgspec


class Message(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """Base class for everything an actor accepts. Subclass it with typed fields."""


class Event(msgspec.Struct, frozen=True, tag=True, kw_only=True):
    """Base class for everything an actor persists to its journal. Subclass it with typed fields."""
