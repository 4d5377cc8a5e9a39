"""``copy_store`` (``tether copy``) to and from PostgreSQL: SQLite → PostgreSQL (how a user
outgrows one machine) and back, every table counted, the copy served as the original would
have been; a copy cut short resumed. Each PostgreSQL store is a fresh schema of this test
run's database (``tests/pg.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime import effect_actors as fx
from tests.store.copy_workload import DEPOSITS, fill, finish_in
from tether.store.copy import copy_store

pytestmark = pytest.mark.anyio

BALANCE = DEPOSITS * (DEPOSITS + 1) // 2


async def test_a_sqlite_store_copied_to_postgresql_serves_there(
    tmp_path: Path, pg_url: str
) -> None:
    src = str(tmp_path / "src.db")
    request_id = await fill(src)
    report = await copy_store(src, pg_url, page_size=7)
    assert report.mismatches() == []
    assert (report.source, report.destination) == ("sqlite", "postgresql")
    assert all(t.source > 0 for t in report.tables)
    assert all(t.inserted == t.source for t in report.tables)
    # Columns PostgreSQL lacks would be named; it has every one SQLite keeps.
    assert report.ignored == {}
    balance, results = await finish_in(pg_url, request_id)
    assert (balance, results) == (BALANCE, [["wired 500 to supplier"]])
    assert [kw["to"] for name, kw in fx.CALLS if name == "wire"] == ["supplier"]


async def test_a_postgresql_store_copied_to_sqlite_serves_there(
    tmp_path: Path, pg_url: str
) -> None:
    request_id = await fill(pg_url)
    dst = str(tmp_path / "dst.db")
    report = await copy_store(pg_url, dst, page_size=5)
    assert report.mismatches() == []
    assert all(t.source > 0 for t in report.tables)
    balance, results = await finish_in(dst, request_id)
    assert (balance, results) == (BALANCE, [["wired 500 to supplier"]])


async def test_a_copy_to_postgresql_cut_short_finishes_with_resume(
    tmp_path: Path, pg_url: str
) -> None:
    src = str(tmp_path / "src.db")
    request_id = await fill(src)

    class Cut(Exception):
        pass

    def cut_in_the_audit_log(table: str, done: int, total: int) -> None:
        if table == "audit" and done == 0:
            raise Cut  # every table before the audit log is copied, the log is not

    with pytest.raises(Cut):
        await copy_store(src, pg_url, page_size=3, progress=cut_in_the_audit_log)
    report = await copy_store(src, pg_url, resume=True, page_size=3)
    assert report.mismatches() == []
    inserted = {t.table: t.inserted for t in report.tables}
    assert inserted["audit"] == report.tables[-1].source > 0
    assert sum(inserted.values()) == inserted["audit"]  # the rest was there already
    balance, results = await finish_in(pg_url, request_id)
    assert (balance, results) == (BALANCE, [["wired 500 to supplier"]])
