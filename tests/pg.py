"""A PostgreSQL server for the tests: a database per test run, a schema per test.

Where the server comes from, in order:

1. ``TETHER_TEST_PG_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``): a
   server that accepts that URL as a user who may create databases.
2. Nothing answers there, but PostgreSQL's binaries are installed
   (``/usr/lib/postgresql/*/bin/initdb``): a throwaway cluster in a temporary folder on a
   free port, run as the ``postgres`` user (``initdb`` refuses root), stopped at the end.
   ``TETHER_TEST_PG_THROWAWAY=1`` takes this path even when a server answers.
3. Neither: the PostgreSQL tests skip, saying why — unless ``TETHER_REQUIRE_PG=1`` (CI sets
   it), which makes that a failure.

Each test run creates its own database ``tether_test_<random>`` and drops it at the end;
each test gets a fresh schema in it (``pg_url``: the store URL with ``?schema=…``), dropped
after the test, so tests never see each other's rows and need no server of their own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

DSN_ENV = "TETHER_TEST_PG_DSN"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
REQUIRE_ENV = "TETHER_REQUIRE_PG"
THROWAWAY_ENV = "TETHER_TEST_PG_THROWAWAY"


def unavailable(why: str) -> None:
    """Skip (or, with TETHER_REQUIRE_PG=1, fail) a test that needs PostgreSQL."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{why}; {REQUIRE_ENV}=1 requires it")
    pytest.skip(f"{why}; start one or set {DSN_ENV} (or {REQUIRE_ENV}=1 to make this a failure)")


def with_database(dsn: str, database: str, **query: str) -> str:
    """``dsn`` (a URL) naming ``database`` instead, with ``query`` added."""
    parts = urllib.parse.urlsplit(dsn)
    params = dict(urllib.parse.parse_qsl(parts.query))
    params.update(query)
    return urllib.parse.urlunsplit(
        parts._replace(path="/" + database, query=urllib.parse.urlencode(params))
    )


def _answers(dsn: str) -> str | None:
    """None if a server accepts ``dsn``, else why not."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class Cluster:
    """A throwaway PostgreSQL cluster run as the ``postgres`` user."""

    folder: Path
    bin: Path
    port: int

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *command: str) -> None:
        runas = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
        subprocess.run([*runas, *command], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self._as_postgres(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.folder / "data"),
            "-l",
            str(self.folder / "server.log"),
            "-o",
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off",
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._as_postgres(
                str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "fast", "stop"
            )

    def remove(self) -> None:
        """Delete the cluster's folder (stop it first)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    @classmethod
    def create(cls) -> Cluster | None:
        """A new, started cluster, or None when PostgreSQL's binaries are not installed."""
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            return None
        bin_dir = Path(found[-1]).parent
        folder = Path(tempfile.mkdtemp(prefix="tether-pg-"))
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
        cluster = cls(folder, bin_dir, _free_port())
        cluster._as_postgres(
            str(bin_dir / "initdb"), "-D", str(folder / "data"), "-A", "trust", "-U", "postgres"
        )
        cluster.start()
        return cluster


@dataclasses.dataclass
class PgServer:
    """The server of this test run, and the database created for it."""

    dsn: str  # the administrative URL (database ``postgres``)
    database: str
    cluster: Cluster | None = None

    @property
    def url(self) -> str:
        """The URL of this run's database (the public schema)."""
        return with_database(self.dsn, self.database)

    def schema_url(self, schema: str) -> str:
        return with_database(self.dsn, self.database, schema=schema)

    def execute(self, sql: str, *, database: str | None = None) -> None:
        import psycopg

        target = self.dsn if database is None else with_database(self.dsn, database)
        with psycopg.connect(target, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql)

    def new_schema(self) -> str:
        name = f"t_{secrets.token_hex(6)}"
        self.execute(f"CREATE SCHEMA {name}", database=self.database)
        return name

    def drop_schema(self, name: str) -> None:
        with contextlib.suppress(Exception):  # left to the database's drop at the end
            self.execute(
                f"SET lock_timeout = '5s'; DROP SCHEMA IF EXISTS {name} CASCADE",
                database=self.database,
            )


def _start() -> PgServer:
    dsn = os.environ.get(DSN_ENV, DEFAULT_DSN)
    cluster = None
    why = None if os.environ.get(THROWAWAY_ENV) == "1" else _answers(dsn)
    if why is not None or os.environ.get(THROWAWAY_ENV) == "1":
        cluster = Cluster.create()
        if cluster is None:
            unavailable(
                f"no PostgreSQL server answers at {dsn} ({why}) and PostgreSQL's binaries "
                "are not installed (/usr/lib/postgresql/*/bin/initdb)"
            )
            raise AssertionError("unreachable")  # pragma: no cover
        dsn = cluster.dsn
    database = f"tether_test_{secrets.token_hex(6)}"
    server = PgServer(dsn, database, cluster)
    server.execute(f"CREATE DATABASE {database}")
    return server


def _stop(server: PgServer) -> None:
    with contextlib.suppress(Exception):
        server.execute(f"DROP DATABASE IF EXISTS {server.database} WITH (FORCE)")
    if server.cluster is not None:
        server.cluster.stop()
        server.cluster.remove()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The PostgreSQL server of this test run, with a database of its own (dropped at the
    end). Skips (fails under TETHER_REQUIRE_PG=1) when there is none."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[dev]')")
    server = _start()
    try:
        yield server
    finally:
        _stop(server)


@pytest.fixture
def pg_schema(pg_server: PgServer) -> Iterator[str]:
    """A fresh, empty schema in this run's database, dropped after the test."""
    name = pg_server.new_schema()
    try:
        yield name
    finally:
        pg_server.drop_schema(name)


@pytest.fixture
def pg_url(pg_server: PgServer, pg_schema: str) -> str:
    """The URL of a fresh, empty PostgreSQL store (its own schema): what ``Runtime(url)``,
    ``open_store(url)`` and ``tether --db url`` open."""
    return pg_server.schema_url(pg_schema)


def dump(url: str) -> list[str]:
    """Every row of every table of the store at ``url`` (its schema), as text, in order:
    compared before and after, it shows whether anything was written."""
    import psycopg
    from psycopg import sql

    from tether.store.postgres.dsn import split_schema

    dsn, schema = split_schema(url, None)
    out: list[str] = []
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        current = conn.execute("SELECT current_schema()").fetchone()
        where = schema or (str(current[0]) if current is not None else "public")
        tables = [
            str(name)
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY tablename",
                (where,),
            ).fetchall()
        ]
        for table in tables:
            query = sql.SQL("SELECT t::text FROM {} t ORDER BY 1").format(
                sql.Identifier(where, table)
            )
            out += [f"{table}: {row}" for (row,) in conn.execute(query).fetchall()]
    return out


@dataclasses.dataclass
class Bouncer:
    """A PgBouncer in session mode in front of this test run's server, run as ``postgres``."""

    folder: Path
    port: int
    proc: subprocess.Popen[bytes]

    def url(self, database: str, **query: str) -> str:
        return with_database(f"postgresql://postgres@127.0.0.1:{self.port}/", database, **query)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _pgbouncer() -> str | None:
    """The pgbouncer binary, installed from Debian's package if missing and possible."""
    found = shutil.which("pgbouncer") or shutil.which("/usr/sbin/pgbouncer")
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "pgbouncer"],
            capture_output=True,
            timeout=300,
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        found = shutil.which("/usr/sbin/pgbouncer")
    return found


@pytest.fixture
def pgbouncer(pg_server: PgServer) -> Iterator[Bouncer]:
    """A PgBouncer (session pooling) in front of the test run's server."""
    binary = _pgbouncer()
    if binary is None:
        unavailable("pgbouncer is not installed (apt-get install pgbouncer)")
        raise AssertionError("unreachable")
    target = urllib.parse.urlsplit(pg_server.dsn)
    folder = Path(tempfile.mkdtemp(prefix="tether-pgbouncer-"))
    port = _free_port()
    (folder / "userlist.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={target.hostname or '127.0.0.1'} port={target.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\n"
        f"auth_type = trust\nauth_file = {folder / 'userlist.txt'}\n"
        "pool_mode = session\nmax_client_conn = 100\ndefault_pool_size = 20\n"
        f"unix_socket_dir =\nlogfile = {folder / 'pgbouncer.log'}\n"
    )
    runas: list[str] = []
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        shutil.chown(folder, "postgres", "postgres")
        for name in ("userlist.txt", "pgbouncer.ini"):
            shutil.chown(folder / name, "postgres", "postgres")
        runas = ["runuser", "-u", "postgres", "--"]
    proc = subprocess.Popen([*runas, binary, str(folder / "pgbouncer.ini")])
    bouncer = Bouncer(folder, port, proc)
    try:
        deadline = 100
        while _answers(bouncer.url(pg_server.database)) is not None:
            deadline -= 1
            if deadline == 0 or proc.poll() is not None:
                log = folder / "pgbouncer.log"
                raise AssertionError(
                    "pgbouncer did not start: " + (log.read_text() if log.exists() else "")
                )
            subprocess.run(["sleep", "0.1"], check=True)
        yield bouncer
    finally:
        bouncer.stop()
