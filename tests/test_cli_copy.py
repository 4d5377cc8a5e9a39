"""``tether copy SRC DST`` run in-process: the report, ``--json``, refusals as one error line,
progress on a terminal only. What the copy itself keeps is tested in tests/store/test_copy*."""

from __future__ import annotations

import io
import json
from pathlib import Path

import anyio
import pytest

import tether
from tests.cli_runs import cli
from tests.store.copy_workload import fill
from tether.cli.copy import Progress
from tether.store.copy import COPY_TABLES


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
