"""``SelfChecking``: a store that can check its own storage, below the rows it holds.

A backend whose storage can be damaged under it (a file: a page overwritten by a disk fault,
a copy taken without its ``-wal``) declares this, and ``tether check`` and the runtime use
it when it is there (never guessed: ``isinstance(store, SelfChecking)``). SQLite's is its
``PRAGMA integrity_check`` / ``quick_check``. A store whose storage a server guards
(PostgreSQL) or that holds decoded records (memory) has nothing to add and need not declare
it: the checks over the rows themselves (``tether.runtime.check``) are the same for every
backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class SelfChecking(Protocol):
    """A store with a check of its own storage."""

    @property
    def damage_at_open(self) -> Sequence[str]:
        """What the check made when the store was opened found, one line per problem (empty:
        nothing, or no check was made). The runtime logs it and serves on: damage in one
        actor's rows is then found, and named, when that actor is read."""
        ...

    async def storage_problems(self, *, quick: bool = False) -> list[str]:
        """Check the whole storage now; each problem found, one line each, ``[]`` if none.
        ``quick``: a cheaper check that skips what is slow (SQLite: ``quick_check`` does not
        compare indexes with their tables)."""
        ...
