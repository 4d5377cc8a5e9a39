"""``copy_store(src, dst)``: the whole of ``tether copy`` but the printing.

Before a row moves: both stores open at this tether's schema version (an older one is refused
by its own ``open``: ``tether migrate`` it first), neither served by a runtime that may be
alive, and the destination empty unless the copy resumes. Then each table of ``COPY_TABLES``,
page by page, each page one transaction in the destination. After: every table's row count
compared on both sides, and, when a checker is given, the integrity check run on both.

Interrupted (Ctrl-C, a lost connection), the destination holds whole pages of a partial copy:
running the same copy again with ``resume=True`` skips every row already there and writes the
rest, and its counts say when it is whole. A runtime must not be started on a destination
whose copy has not finished with matching counts.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from tether.errors import StoreError
from tether.store.copy.tables import COPY_TABLES, CopyableStore, TablePage
from tether.store.hosts import hostname_of, runtime_gone
from tether.store.open import open_store, scheme_of
from tether.store.protocol import Store

#: ``progress(table, rows_done, rows_total)``: called after each page (and once per table
#: before its first page, with 0 done).
Progress = Callable[[str, int, int], None]
#: ``check(url)``: an integrity check of the whole store at ``url`` (``tether check``), its
#: findings, one sentence each; [] when clean. Run on both sides, closed, after the copy.
Check = Callable[[str], Awaitable[list[str]]]

PAGE_SIZE = 1000


class TableCount(msgspec.Struct, frozen=True):
    table: str
    source: int
    destination: int
    inserted: int  # rows this run wrote (fewer than ``source`` when resuming)


class CopyReport(msgspec.Struct, kw_only=True):
    source: str
    destination: str
    tables: list[TableCount] = []
    # columns of the source the destination has no place for, by table (left behind)
    ignored: dict[str, list[str]] = {}
    # findings of the integrity check, by side ("source", "destination"), when one was run
    checks: dict[str, list[str]] = {}

    def mismatches(self) -> list[str]:
        """Every count that differs and every finding of the checks, one sentence each."""
        out = [
            f"{t.table}: {t.source} rows in the source, {t.destination} in the destination"
            for t in self.tables
            if t.source != t.destination
        ]
        for side, found in self.checks.items():
            out += [f"{side}: {finding}" for finding in found]
        return out

    @property
    def copied(self) -> int:
        return sum(t.source for t in self.tables)


async def copy_store(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    *,
    resume: bool = False,
    force: bool = False,
    page_size: int = PAGE_SIZE,
    progress: Progress | None = None,
    check: Check | None = None,
) -> CopyReport:
    """Copy every table of the store at ``source`` into the one at ``destination`` (created
    if it does not exist yet) and compare their counts; see the module docstring.

    ``resume``: the destination may hold rows already (an interrupted copy of this source):
    rows whose key is there are kept, the rest written. ``force``: copy although runtimes are
    registered in either store that this host cannot tell are gone (runtimes of other hosts
    that are known to be stopped for good). ``StoreError`` for every refusal, naming why."""
    if page_size < 1:
        raise ValueError(f"page_size must be at least 1, not {page_size!r}")
    src_text, dst_text = os.fspath(source), os.fspath(destination)
    if _same(src_text, dst_text):
        raise StoreError(f"the source and the destination are the same store ({src_text!r})")
    src = open_store(src_text, create=False)
    dst = open_store(dst_text, create=True)
    report = CopyReport(source=scheme_of(src_text), destination=scheme_of(dst_text))
    await src.open()
    try:
        await dst.open()
        try:
            reader, writer = _copyable(src, src_text), _copyable(dst, dst_text)
            await _refuse_served(src, "source", src_text, force)
            await _refuse_served(dst, "destination", dst_text, force)
            if not resume:
                await _refuse_filled(writer, dst_text)
            for table, _ in COPY_TABLES:
                report.tables.append(
                    await _copy_table(reader, writer, table, page_size, progress, report)
                )
        finally:
            await dst.close()
    finally:
        await src.close()
    if check is not None:
        report.checks = {"source": await check(src_text), "destination": await check(dst_text)}
    return report


async def _copy_table(
    reader: CopyableStore,
    writer: CopyableStore,
    table: str,
    page_size: int,
    progress: Progress | None,
    report: CopyReport,
) -> TableCount:
    page = await reader.dump_table(table, None, page_size)
    total = page.total or 0
    done = inserted = 0
    if progress is not None:
        progress(table, 0, total)
    while page.rows:
        loaded = await writer.load_table(page)
        inserted += loaded.inserted
        done += len(page.rows)
        if loaded.ignored:
            report.ignored[table] = list(loaded.ignored)
        if progress is not None:
            progress(table, done, total)
        if page.last is None or len(page.rows) < page_size:
            break
        page = await reader.dump_table(table, page.last, page_size)
    # Counted again on both sides, after the fact: the verdict never rests on the pages.
    source = await _count(reader, table)
    destination = await _count(writer, table)
    return TableCount(table, source, destination, inserted)


async def _count(store: CopyableStore, table: str) -> int:
    page: TablePage = await store.dump_table(table, None, 0)
    return page.total or 0


def _copyable(store: Store, url: str) -> CopyableStore:
    if isinstance(store, CopyableStore):
        return store
    if type(store).__name__ == "PostgresStore":  # its side lives beside the copy for now
        from tether.store.copy.postgres import PostgresTables
        from tether.store.postgres.store import PostgresStore

        if isinstance(store, PostgresStore):
            return PostgresTables(store)
    raise StoreError(
        f"the {scheme_of(url)} store {url!r} cannot be copied: {type(store).__name__} "
        "implements no dump_table/load_table (tether.store.copy.CopyableStore)"
    )


async def _refuse_served(store: Store, side: str, url: str, force: bool) -> None:
    live = [r for r in await store.list_runtimes() if not runtime_gone(r.host, r.pid, r.started_at)]
    if not live or force:
        return
    who = ", ".join(f"{r.runtime_id} (pid {r.pid} on {hostname_of(r.host)})" for r in live)
    raise StoreError(
        f"the {side} store {url!r} is being served: runtime(s) {who} registered in it may be "
        "running. Stop every runtime first (a runtime that died on another host stays "
        "registered until its leases expire and another runtime reaps it: if you know it is "
        "gone for good, copy with --force)"
    )


async def _refuse_filled(writer: CopyableStore, url: str) -> None:
    counts = {table: await _count(writer, table) for table, _ in COPY_TABLES}
    filled = {t: n for t, n in counts.items() if n}
    if filled:
        rows = ", ".join(f"{t} {n}" for t, n in filled.items())
        raise StoreError(
            f"the destination {url!r} is not empty ({rows} rows): copy into a new store, or "
            "pass --resume to finish an interrupted copy of this same source into it"
        )


def _same(a: str, b: str) -> bool:
    if "://" in a or "://" in b:
        return a == b
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def describe(report: CopyReport) -> dict[str, Any]:
    """The report as plain data (``tether copy --json``)."""
    data: dict[str, Any] = msgspec.to_builtins(report)
    data["mismatches"] = report.mismatches()
    data["copied"] = report.copied
    return data
