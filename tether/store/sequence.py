"""The message cursor of a store with one writer at a time (SQLite, memory): a sequence.

One writer makes a store's mailbox sequence order its commit order, so no message can commit
below a sequence number a scan has passed: the cursor may be the last one returned. A message
made ready again takes a number above every one ever given. A store with concurrent writers
must not do this (``tether.store.protocol``, "The scan for new messages is a cursor").
"""

from __future__ import annotations

from tether.errors import StoreError
from tether.store.records import MessageCursor


def cursor_at(seq: int) -> MessageCursor:
    """The cursor of a scan that returned everything up to ``seq``."""
    return MessageCursor(str(seq).encode())


def seq_after(cursor: MessageCursor | None, store: str) -> int:
    """The sequence number a scan from ``cursor`` starts after (None: 0, the beginning);
    ``StoreError`` naming ``store`` for a cursor it did not make."""
    if cursor is None:
        return 0
    text = bytes(cursor)
    if not text.isdigit():
        raise StoreError(f"{cursor!r} is not a message cursor of {store}")
    return int(text)
