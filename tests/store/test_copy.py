"""``copy_store`` (``tether copy``) between SQLite stores: every table moved and counted, the
copy served as the original would have been, refusals (a served source, a filled
destination), and a copy cut short and run again (``resume``). The PostgreSQL directions are
in ``test_copy_pg.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

import tether
from tests.runtime import effect_actors as fx
from tests.store.copy_workload import DEPOSITS, fill, finish_in
from tether.store.copy import COPY_TABLES, copy_store

pytestmark = pytest.mark.anyio

BALANCE = DEPOSITS * (DEPOSITS + 1) // 2


async def test_a_copied_store_holds_every_row_and_serves_as_the_original(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    request_id = await fill(src)
    seen: list[tuple[str, int, int]] = []
    report = await copy_store(
        src, dst, page_size=7, progress=lambda t, done, total: seen.append((t, done, total))
    )
    assert report.mismatches() == []
    counts = {t.table: t.source for t in report.tables}
    assert [t for t, _ in COPY_TABLES] == [t.table for t in report.tables]
    empty = sorted(t for t, n in counts.items() if n == 0)
    assert empty == [], f"the workload left {empty} empty: the copy of those is untested"
    assert all(t.inserted == t.source == t.destination for t in report.tables)
    assert counts["journal"] > 7  # several pages
    assert ("journal", counts["journal"], counts["journal"]) in seen
    # The copy serves: the wire held for a person in the source is approved in the copy and
    # runs there once; the account's balance was folded from the copied snapshot and journal.
    balance, results = await finish_in(dst, request_id)
    assert balance == BALANCE
    assert results == [["wired 500 to supplier"]]
    assert [kw["to"] for name, kw in fx.CALLS if name == "wire"] == ["supplier"]


async def test_a_store_being_served_is_not_copied(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    await fill(src)
    async with tether.Runtime(src, poll_interval=0.02):
        with pytest.raises(tether.StoreError, match="is being served: runtime"):
            await copy_store(src, dst)
    # Stopped, it copies.
    assert (await copy_store(src, dst)).mismatches() == []


async def test_a_destination_that_holds_rows_is_refused_unless_resuming(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    await fill(src)
    async with tether.Runtime(dst) as rt:
        await rt.spawn(fx.Banker, "someone-else")
    with pytest.raises(tether.StoreError, match=r"not empty \(actors 1 rows\)"):
        await copy_store(src, dst)
    # resume keeps what is there: the counts then say the stores differ.
    report = await copy_store(src, dst, resume=True)
    assert report.mismatches() == [
        f"actors: {report.tables[2].source} rows in the source, "
        f"{report.tables[2].source + 1} in the destination"
    ]


async def test_a_copy_cut_short_finishes_when_run_again_with_resume(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    request_id = await fill(src)

    class Cut(Exception):
        pass

    def cut_in_the_journal(table: str, done: int, total: int) -> None:
        if table == "journal" and done > 0:
            raise Cut  # after the first page of the journal: a partial copy

    with pytest.raises(Cut):
        await copy_store(src, dst, page_size=7, progress=cut_in_the_journal)
    with pytest.raises(tether.StoreError, match=r"not empty \(journal 7 rows\)"):
        await copy_store(src, dst)
    report = await copy_store(src, dst, resume=True, page_size=7)
    assert report.mismatches() == []
    journal = report.tables[0]
    assert journal.inserted == journal.source - 7  # the first page was there already
    assert all(t.inserted == t.source for t in report.tables[1:])
    balance, results = await finish_in(dst, request_id)
    assert (balance, results) == (BALANCE, [["wired 500 to supplier"]])


async def test_copying_a_store_onto_itself_or_from_nowhere_is_refused(tmp_path: Path) -> None:
    src = str(tmp_path / "src.db")
    await fill(src)
    with pytest.raises(tether.StoreError, match="the same store"):
        await copy_store(src, src)
    with pytest.raises(tether.StoreOpenError, match="no store at"):
        await copy_store(str(tmp_path / "missing.db"), str(tmp_path / "dst.db"))
    with pytest.raises(ValueError, match="page_size"):
        await copy_store(src, str(tmp_path / "dst.db"), page_size=0)


async def test_an_integrity_check_given_runs_on_both_stores_and_its_findings_are_mismatches(
    tmp_path: Path,
) -> None:
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    await fill(src)
    checked: list[str] = []

    async def journal_rows(url: str) -> list[str]:
        # A check of its own: it opens the closed store and reads it, as `tether check` does.
        checked.append(url)
        store = tether.open_store(url, create=False)
        await store.open()
        try:
            rows = await store.load_journal("acct", 0, 1000)
        finally:
            await store.close()
        return [] if url == src else [f"{len(rows)} journal rows of acct in the copy"]

    report = await copy_store(src, dst, check=journal_rows)
    assert checked == [src, dst]
    assert report.checks == {
        "source": [],
        "destination": [f"{DEPOSITS} journal rows of acct in the copy"],
    }
    assert report.mismatches() == [f"destination: {DEPOSITS} journal rows of acct in the copy"]
