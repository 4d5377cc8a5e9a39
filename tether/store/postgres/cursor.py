"""The message scan's cursor on PostgreSQL: transaction snapshots, as PgQ's ticks.

Concurrent writers make the mailbox's sequence order differ from its commit order: a
transaction holding seq 10 can commit after seq 11 was read, and a scan for "seq above the
last one seen" would skip 10 for good (``tether.store.protocol``). So each mailbox row
carries ``xid``, the id of the transaction that made it ready (its insert, or the write that
made it ready again), and a scan reads a *band*: the rows whose transaction is visible in
the snapshot ``hi`` taken now and was not visible in ``lo``, the snapshot the previous band
ended at. Every transaction that commits becomes visible in exactly one band of a chain
(snapshots only grow), so every committed row is returned once, however late it commits;
an open transaction holds back nothing but its own rows (no xmin horizon to wait for).

A band longer than one page is read in ``(xid, seq)`` order, the cursor then also holding
``hi`` and the last row returned, so the next page goes on inside the same band.

A scan for a runtime (``runtime_id``) leaves out the rows of actors whose lease another
registered runtime holds, unexpired on the server's clock (``held_elsewhere``), in the same
statement, so on the band's own snapshot: that runtime delivers them, and if it dies
``orphaned`` names the actor once its lease has expired, for a new owner whose activation reads
the actor's whole mailbox. The band moves past those rows all the same (``tether.store.protocol``
allows it): a runtime handles its own and free actors' mail, not every runtime's traffic.

Cursor bytes: ``pg1 <lo or -> <hi or -> <xid or -> <seq or ->`` (snapshots in their text
form ``xmin:xmax:xip,…``).
"""

from __future__ import annotations

import re

from tether.errors import StoreError
from tether.store.records import MessageCursor

_SNAPSHOT = re.compile(r"\d+:\d+:(\d+(,\d+)*)?")
_NONE = "-"


class Band:
    """Where a scan stands: ``lo`` the snapshot every earlier band ended at (None: none, the
    store's beginning); ``hi`` the snapshot of a band read part-way, and ``after`` the
    ``(xid, seq)`` of its last row returned (both None: no band under way)."""

    __slots__ = ("after", "hi", "lo")

    def __init__(
        self, lo: str | None, hi: str | None = None, after: tuple[int, int] | None = None
    ) -> None:
        self.lo = lo
        self.hi = hi
        self.after = after

    def encode(self) -> MessageCursor:
        xid, seq = self.after if self.after is not None else (None, None)
        words = ["pg1", *(_NONE if w is None else str(w) for w in (self.lo, self.hi, xid, seq))]
        return MessageCursor(" ".join(words).encode())


def decode(cursor: MessageCursor | None) -> Band:
    """The band a cursor stands at; ``StoreError`` for one this store did not make."""
    if cursor is None:
        return Band(None)
    try:
        tag, lo, hi, xid, seq = bytes(cursor).decode("ascii").split(" ")
        if tag != "pg1":
            raise ValueError(tag)
        snapshots = [None if s == _NONE else s for s in (lo, hi)]
        for s in snapshots:
            if s is not None and not _SNAPSHOT.fullmatch(s):
                raise ValueError(s)
        after = None if xid == _NONE else (int(xid), int(seq))
        if (snapshots[1] is None) != (after is None):
            raise ValueError("a band under way has both its snapshot and its last row")
    except ValueError as exc:
        raise StoreError(f"{cursor!r} is not a message cursor of a PostgreSQL store") from exc
    return Band(snapshots[0], snapshots[1], after)


def held_elsewhere(actor: str, server_now: str) -> str:
    """SQL true when the lease of the actor whose id is the expression ``actor`` is held by a
    registered runtime other than the parameter ``runtime_id``, unexpired at ``server_now``
    (an SQL expression of the server's clock): exactly the actors ``orphaned`` does not name
    and the scanning runtime does not hold."""
    return (
        "EXISTS (SELECT 1 FROM actors a JOIN runtimes r ON r.runtime_id = a.lease_owner "
        f"WHERE a.actor_id = {actor} AND a.lease_owner <> %(runtime_id)s "
        f"AND a.lease_expires >= {server_now})"
    )


def band_sql(band: Band, *, skip: bool, server_now: str | None = None) -> str:
    """The scan of one page of ``band``: parameters ``now`` (twice with the due check's
    ``created_at`` form), optionally the skipped prefix's length and text, and the limit;
    with ``server_now`` (the SQL of the server's clock), ``runtime_id``, the scanning runtime,
    whose scan leaves out the actors another live runtime holds (``held_elsewhere``).
    Reads ``hi`` itself (``pg_current_snapshot()``) when no band is under way; every row
    carries its ``(xid, seq)`` and the band's ``hi`` as text."""
    hi = "%(hi)s::pg_snapshot" if band.hi is not None else "pg_current_snapshot()"
    conditions = ["pg_visible_in_snapshot(m.xid, s.hi)", "m.xid < pg_snapshot_xmax(s.hi)"]
    if band.lo is not None:
        conditions += [
            "m.xid >= pg_snapshot_xmin(%(lo)s::pg_snapshot)",
            "NOT pg_visible_in_snapshot(m.xid, %(lo)s::pg_snapshot)",
        ]
    if band.after is not None:
        conditions.append("(m.xid, m.seq) > (%(xid)s::text::xid8, %(seq)s)")
    conditions.append("(m.deliver_at <= %(now)s OR m.deliver_at = m.created_at)")
    if skip:
        conditions.append("NOT (m.parks = 0 AND left(m.msg_id, %(skip_len)s) = %(skip)s)")
    if server_now is not None:
        conditions.append(f"NOT {held_elsewhere('m.actor_id', server_now)}")
    return (
        f"SELECT m.actor_id, m.msg_id, m.parks > 0, m.xid::text, m.seq, s.hi::text "
        f"FROM (SELECT {hi} AS hi) s LEFT JOIN mailbox m ON {' AND '.join(conditions)} "
        "ORDER BY m.xid, m.seq LIMIT %(limit)s"
    )
