"""The PostgreSQL store's reads of mail: the message scan (a chain of transaction snapshots,
``cursor.py``), due and orphaned actors, replies, dedup keys, watchers; each one statement on a
reader connection."""

from __future__ import annotations

from typing import Any

from tether.store.postgres import cursor as scan
from tether.store.postgres.reads import Reads, _fetch
from tether.store.postgres.writes import SERVER_NOW
from tether.store.records import MessageCursor, MessagePage, Reply, ScannedMessage


class MailReads(Reads):
    """The mail reads of ``PostgresStore``, with the others (``Reads``)."""

    async def scan_messages(
        self,
        cursor: MessageCursor | None,
        now: float,
        limit: int,
        *,
        skip_prefix: str | None = None,
        runtime_id: str | None = None,
    ) -> MessagePage:
        band = scan.decode(cursor)
        messages: list[ScannedMessage] = []
        while True:
            found = await self._scan_band(band, now, limit - len(messages), skip_prefix, runtime_id)
            hi = str(found[0][5])
            messages += [
                ScannedMessage(actor_id, msg_id, bool(restored))
                for actor_id, msg_id, restored, _, _, _ in found
                if msg_id is not None
            ]
            if len(messages) >= limit:  # the band goes on past this page
                last = found[-1]
                after = (int(last[3]), int(last[4]))
                return MessagePage(messages, scan.Band(band.lo, hi, after).encode(), True)
            if band.hi is None:  # a band read whole, up to now
                return MessagePage(messages, scan.Band(hi).encode(), False)
            band = scan.Band(hi)  # the end of a band read part-way: on to now, in this call

    async def _scan_band(
        self,
        band: scan.Band,
        now: float,
        limit: int,
        skip_prefix: str | None,
        runtime_id: str | None,
    ) -> list[Any]:
        params: dict[str, Any] = {"now": now, "limit": limit, "lo": band.lo, "hi": band.hi}
        if band.after is not None:
            params["xid"], params["seq"] = str(band.after[0]), band.after[1]
        if skip_prefix:
            params["skip"], params["skip_len"] = skip_prefix, len(skip_prefix)
        params["runtime_id"] = runtime_id
        statement = scan.band_sql(
            band, skip=bool(skip_prefix), server_now=None if runtime_id is None else SERVER_NOW
        )
        return await self._readers.read(_fetch, statement, params)

    async def due_between(
        self, after: float, upto: float, *, runtime_id: str | None = None
    ) -> list[str]:
        held = scan.held_elsewhere("m.actor_id", SERVER_NOW)
        found = await self._read(
            "SELECT DISTINCT m.actor_id FROM mailbox m WHERE m.deliver_at > %(after)s "
            "AND m.deliver_at <= %(upto)s AND m.deliver_at > m.created_at"
            + ("" if runtime_id is None else f" AND NOT {held}"),
            {"after": after, "upto": upto, "runtime_id": runtime_id},
        )
        return [r[0] for r in found]

    async def orphaned(self, now: float, limit: int) -> list[str]:
        found = await self._read(
            "SELECT DISTINCT m.actor_id FROM mailbox m JOIN actors a ON a.actor_id = m.actor_id "
            "WHERE (m.deliver_at <= %s OR m.deliver_at = m.created_at) AND a.status = 'active' "
            f"AND (a.lease_owner IS NULL OR a.lease_expires < {SERVER_NOW} "
            "OR NOT EXISTS (SELECT 1 FROM runtimes r WHERE r.runtime_id = a.lease_owner)) "
            "LIMIT %s",
            (now, limit),
        )
        return [r[0] for r in found]

    async def get_replies(self, msg_ids: list[str]) -> list[Reply]:
        if not msg_ids:
            return []
        found = await self._read(
            "SELECT msg_id, ok, payload FROM replies WHERE msg_id = ANY(%s)", (msg_ids,)
        )
        return [Reply(msg_id=m, ok=ok, payload=p) for m, ok, p in found]

    async def find_dedup(self, actor_id: str, dedup_key: str) -> str | None:
        found = await self._read(
            "SELECT msg_id FROM dedup WHERE actor_id = %s AND dedup_key = %s",
            (actor_id, dedup_key),
        )
        return str(found[0][0]) if found else None

    async def watchers(self, actor_id: str) -> list[str]:
        found = await self._read(
            "SELECT watcher FROM watches WHERE watched = %s ORDER BY watcher", (actor_id,)
        )
        return [r[0] for r in found]
