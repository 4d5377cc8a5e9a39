"""``tether copy SRC DST`` run in-process: the report, ``--json``, refusals as one error line,
progress on a terminal only. What the copy itself keeps is tested in tests/store/test_copy*."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import re
import select
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import psycopg
import pytest

import tether
from tests.cli_runs import cli
from tests.sample_actors import Account, Deposit, GetBalance
from tests.store.copy_workload import fill
from tether.cli.copy import Progress
from tether.store.copy import COPY_TABLES
from tether.store.postgres.dsn import split_schema

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    path = tmp_path / "src.db"
    anyio.run(fill, str(path))
    return path


def test_copy_prints_each_table_counted_on_both_sides(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "dst.db"
    code, out, err = cli(capsys, "copy", src, dst)
    assert (code, err) == (0, "")  # stderr is no terminal here: no progress lines
    lines = out.splitlines()
    assert lines[0].split() == ["table", "source", "destination", "copied", "now"]
    journal = next(line.split() for line in lines if line.startswith("journal"))
    assert journal[1] == journal[2] == journal[3] != "0"
    assert lines[-1].startswith("OK: ")
    assert f"{len(COPY_TABLES)} tables" in lines[-1]


def test_copy_json_and_a_second_copy_into_the_same_store_refused(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dst = tmp_path / "dst.db"
    code, out, err = cli(capsys, "copy", src, dst, "--json", "--page-size", "4")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["mismatches"] == []
    assert (report["source"], report["destination"]) == ("sqlite", "sqlite")
    assert report["copied"] == sum(t["source"] for t in report["tables"]) > 0
    code, out, err = cli(capsys, "copy", src, dst)
    assert (code, out) == (1, "")
    assert err.startswith("tether: error: the destination")
    assert "--resume" in err
    code, out, err = cli(capsys, "copy", src, dst, "--resume")
    assert (code, err) == (0, "")
    assert "OK: " in out


def test_copy_refuses_a_store_being_served(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def serve_and_copy() -> tuple[int, str, str]:
        async with tether.Runtime(src, poll_interval=0.02):
            return await anyio.to_thread.run_sync(
                lambda: cli(capsys, "copy", src, tmp_path / "dst.db")
            )

    code, out, err = anyio.run(serve_and_copy)
    assert (code, out) == (1, "")
    assert "is being served" in err
    assert err.count("\n") == 1


def test_copy_usage_errors_exit_2(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "copy", src, tmp_path / "dst.db", "--page-size", "0")
    assert code == 2
    assert "must be 1 or more" in err
    code, _, err = cli(capsys, "copy", src)
    assert code == 2
    assert "DST" in err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_one_line_per_table_on_a_terminal_and_silent_elsewhere() -> None:
    shown = Terminal()
    progress = Progress(shown)
    for table, done, total in [("journal", 0, 9), ("journal", 5, 9), ("journal", 9, 9)]:
        progress(table, done, total)
    progress("actors", 0, 0)
    progress.end()
    lines = shown.getvalue().split("\n")
    assert [line.rsplit("\r", 1)[-1].split()[:2] for line in lines if line] == [
        ["copying", "journal"],
        ["copying", "actors"],
    ]
    assert "9 / 9 rows 100%" in lines[0]
    quiet = io.StringIO()
    Progress(quiet)("journal", 0, 9)
    assert quiet.getvalue() == ""


def test_a_copy_to_postgresql_is_checked_by_tether_check_on_both_stores(
    src: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Counts alone would pass a store whose rows are all there but wrong together: the copy
    ends with the integrity check of both stores, and says so."""
    code, out, err = cli(capsys, "copy", src, pg_url)
    assert (code, err) == (0, "")
    assert "tether check: no violation in the source or in the destination" in out
    assert out.splitlines()[-1].startswith("OK: ")


def test_a_copy_of_a_damaged_store_is_refused_by_its_check(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A journal with a hole: every row is copied and the counts agree, but the check of
    both stores names the hole, and the copy exits 1 saying not to serve it."""
    with contextlib.closing(sqlite3.connect(src)) as db, db:
        db.execute("DELETE FROM journal WHERE actor_id = 'acct' AND seq = 2")
    code, out, err = cli(capsys, "copy", src, tmp_path / "dst.db", "--json")
    assert (code, err) == (1, "")
    report = json.loads(out)
    assert [t["source"] for t in report["tables"]] == [t["destination"] for t in report["tables"]]
    found = report["mismatches"]
    assert any(m.startswith("source: journal_gap:") and "'acct'" in m for m in found), found
    assert any(m.startswith("destination: journal_gap:") and "'acct'" in m for m in found), found


async def _fill_journal(path: str, deposits: int) -> None:
    async with tether.Runtime(path, snapshot_every=100_000) as rt:
        account = await rt.spawn(Account, "acct")
        for i in range(deposits):
            await account.tell(Deposit(amount=1), dedup_key=f"d{i}")
        assert await account.ask(GetBalance(), timeout=60) == deposits


def _journal_rows(url: str) -> int:
    dsn, schema = split_schema(url, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT count(*) FROM {schema}.journal").fetchone()
    return int(row[0]) if row is not None else 0


def test_a_copy_interrupted_on_a_terminal_finishes_when_run_again_with_resume(
    tmp_path: Path, pg_url: str
) -> None:
    """``tether copy`` in a real process, its stderr a terminal: a progress line per table;
    Ctrl-C in the middle of the journal stops it saying how to finish, with whole pages
    copied; the same command with ``--resume`` finishes it, counted and checked."""
    deposits = 1500
    src = str(tmp_path / "src.db")
    anyio.run(_fill_journal, src, deposits)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "tether", "copy", src, pg_url, "--page-size", "1"]
    leader, follower = pty.openpty()
    with subprocess.Popen(
        argv, cwd=tmp_path, env=env, stderr=follower, stdout=subprocess.PIPE
    ) as p:
        os.close(follower)
        shown = b""
        while not re.search(rb"copying journal +[1-9][\d,]* / 1,500 rows", shown):
            ready, _, _ = select.select([leader], [], [], 60)
            assert ready, f"no progress on the terminal: {shown!r}"
            shown += os.read(leader, 4096)
        p.send_signal(signal.SIGINT)
        code = p.wait(timeout=60)
        shown += _drain(leader)
    os.close(leader)
    assert code == 130, shown
    assert b"interrupted" in shown, shown
    assert b"--resume" in shown, shown
    assert 0 < _journal_rows(pg_url) < deposits  # whole pages of a part of it
    done = subprocess.run(
        [*argv, "--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""  # not a terminal: no progress lines
    assert "tether check: no violation in the source or in the destination" in done.stdout
    assert _journal_rows(pg_url) == deposits


def _drain(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        out += chunk
    return out
