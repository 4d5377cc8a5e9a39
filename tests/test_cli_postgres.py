"""The CLI and the demo on a PostgreSQL store: ``--db postgresql://…``, ``$TETHER_DB``,
``tether migrate`` creating and refusing schemas, ``tether demo --db postgresql://…``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import psycopg
import pytest

from tests.cli_runs import cli, cli_json
from tests.pg import PgServer
from tests.test_cli import _build, assert_one_line_error
from tether.store.postgres.dsn import split_schema
from tether.store.postgres.schema import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]


def test_the_cli_reads_and_decides_on_a_postgresql_store(
    pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store built by a serving runtime is listed and decided on with ``--db URL`` and with
    ``$TETHER_DB``, and the decision's audit row is there."""
    anyio.run(_build, pg_url, backend="asyncio")
    capsys.readouterr()  # the build's own logs
    ids = {r["id"] for r in cli_json(capsys, "--db", pg_url, "actors")}
    assert {"a1", "b1", "acct"} <= ids
    monkeypatch.setenv("TETHER_DB", pg_url)
    assert {r["id"] for r in cli_json(capsys, "actors")} == ids
    [request] = cli_json(capsys, "approvals", "list")
    code, out, err = cli(capsys, "approvals", "approve", request["request_id"], "--by", "alice")
    assert (code, err) == (0, ""), out
    assert len(cli_json(capsys, "quarantine", "list")) == 1
    assert len(cli_json(capsys, "dead-letters", "list")) == 1
    [row] = cli_json(capsys, "audit")
    assert (row["identity"], row["action"], row["outcome"]) == ("alice", "approve", "allowed")


def test_migrate_creates_a_postgresql_store_once_and_a_newer_one_is_refused(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tether migrate`` creates the schema of a new store (version 0 to the current one),
    then has nothing to do; a store whose schema is newer than this tether's is refused by
    every command, naming its version, and left as it was."""
    code, out, _ = cli(capsys, "--db", pg_url, "migrate")
    assert (code, out.strip()) == (
        0,
        f"{pg_url}: upgraded from schema version 0 to {SCHEMA_VERSION}",
    )
    code, out, _ = cli(capsys, "--db", pg_url, "migrate")
    assert (code, out.strip()) == (
        0,
        f"{pg_url}: schema version {SCHEMA_VERSION} already; nothing to do",
    )
    dsn, schema = split_schema(pg_url, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.tether_schema (version, name) VALUES (%s, 'from the future')",
            (SCHEMA_VERSION + 1,),
        )
    for command in (["actors"], ["migrate"]):
        code, out, err = cli(capsys, "--db", pg_url, *command)
        assert (code, out) == (1, ""), command
        assert_one_line_error(err, f"schema version {SCHEMA_VERSION + 1}")


def test_a_missing_postgresql_store_is_not_created_by_a_listing(
    pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command but ``migrate`` opens an existing store only: an empty schema is an
    error that says to run ``tether migrate``, and stays empty."""
    code, out, err = cli(capsys, "--db", pg_url, "actors")
    assert (code, out) == (1, "")
    assert_one_line_error(err, "tether migrate")
    dsn, schema = split_schema(pg_url, None)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchone()
    assert row == (0,)


def test_the_demo_runs_on_postgresql(pg_server: PgServer, tmp_path: Path) -> None:
    """``tether demo --db postgresql://…`` (no schema: the demo's own, made afresh): the
    worker is SIGKILLed mid-refund, every session resumes, every check holds; twice in a
    row, so that the demo's schema is emptied for the second run."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "tether", "demo", "--db", pg_server.url],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "every check holds" in done.stdout
        assert "schema=tether_demo" in done.stdout


def test_migrate_says_on_a_terminal_that_it_runs_in_one_transaction(
    pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, out, err = cli(capsys, "--db", pg_url, "migrate")
    assert code == 0, err
    assert err.startswith(
        f"migrating {pg_url} in one transaction (interrupted, it changes nothing)"
    )
    assert "upgraded from schema version 0" in out
