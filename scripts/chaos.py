"""The large world chaos run (issue #7): SIGKILL the runtime process hundreds of times under a
workload of agent sessions and plain actors, then check the world, not the runtime's account.

Usage, from the repository root::

    .venv/bin/python scripts/chaos.py --kills 300 --sessions 24 --seed 20251122
    .venv/bin/python scripts/chaos.py --kills 300 --runtimes 3 \
        --pg postgresql://postgres@127.0.0.1:5432/postgres

Options: ``--kills K`` (default 300), ``--sessions N`` (24), ``--tasks T`` tasks per session at
most (6), ``--counters C`` (6), ``--sinks`` (3), ``--seed S`` (default: from the clock; printed,
and it reproduces the kill schedule and the workload's choices — not the exact interleaving),
``--dir D`` (default: a new temporary directory, kept: every child's stdout/stderr, the ack
logs, the decisions, the kill log and ``figures.json`` stay there), ``--interject`` (let user
messages join running tasks; it found a determinism bug, since fixed, which
``tests/chaos/test_world.py`` keeps a minimal test of), ``--runtimes R`` (1): runtime
processes serving the same sessions at once, a random one killed each round (see
``tests/chaos/world.py``). The store: ``--db URL`` (an empty store: default, an SQLite file in
the directory), or ``--pg DSN``: a new database on that PostgreSQL server, made for this run and
dropped after it (``--keep-db`` keeps it; its URL is printed).

What runs: two fake payments services (one honoring idempotency keys, one ignoring them), the
runtimes (killed K times in all, one restarted after each kill), a client and a decider (``Runtime(serve=False)``
each); see ``tests/chaos/world.py`` for the kill modes (startup, recovery, load, approvals
pending, inside a group commit) and ``tests/chaos/world_programs.py`` for the workload. At the
end a last runtime runs to quiescence and the checker prints the figures table; the exit status
is 0 only if every must-be-zero figure is 0.

Expected wall time: about 0.8 s per kill on a 2-core VM (each incarnation starts a Python
process, ~0.35 s, and lives up to ~1.5 s), plus ~10 s of setup, quiescence and checking: 300
kills take about 4 to 5 minutes. Every wait has a timeout and every child is reaped on any exit
(Ctrl-C included); nothing to resume: a new run starts from a new directory.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.chaos.world import WorldSpec, dump, run_world  # noqa: E402


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@contextlib.contextmanager
def fresh_pg_database(server_url: str, *, keep: bool) -> Iterator[str]:
    """A new database on the PostgreSQL server of ``server_url`` (``postgresql://…``), its
    URL; dropped on exit unless ``keep``."""
    import secrets
    import urllib.parse

    import psycopg

    name = f"tether_chaos_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = urllib.parse.urlsplit(server_url)._replace(path=f"/{name}").geturl()
    try:
        yield url
    finally:
        if not keep:
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/chaos.py", description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--counters", type=int, default=6)
    parser.add_argument("--sinks", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--interject", action="store_true")
    parser.add_argument("--quiesce-timeout", type=float, default=300.0)
    parser.add_argument("--runtimes", type=int, default=1)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--db", default=None, help="an empty store's URL")
    where.add_argument(
        "--pg", default=None, help="a PostgreSQL server's postgresql:// URL: a new database on it"
    )
    parser.add_argument("--keep-db", action="store_true")
    args = parser.parse_args(argv)
    if args.runtimes < 1:
        parser.error("--runtimes is at least 1")
    seed = args.seed if args.seed is not None else int(time.time())
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="tether-chaos-"))
    if workdir.exists() and any(workdir.iterdir()):
        parser.error(f"--dir {workdir} is not empty: a world starts from empty files")
    say(f"seed {seed}; files in {workdir}")
    with contextlib.ExitStack() as stack:
        db = args.db
        if args.pg:
            db = stack.enter_context(fresh_pg_database(args.pg, keep=args.keep_db))
            say(f"store: {db}" + (" (kept)" if args.keep_db else " (dropped at the end)"))
        return run(args, seed, workdir, db)


def run(args: argparse.Namespace, seed: int, workdir: Path, db: str | None) -> int:
    spec = WorldSpec(
        db=db,
        runtimes=args.runtimes,
        kills=args.kills,
        sessions=args.sessions,
        counters=args.counters,
        sinks=args.sinks,
        tasks=args.tasks,
        seed=seed,
        interject=args.interject,
        quiesce_timeout=args.quiesce_timeout,
    )
    figures = run_world(workdir, spec, say=say)
    dump(figures, workdir / "figures.json")
    say(figures.table())
    failures = figures.failures()
    if failures:
        say(f"FAILED: {len(failures)} problem(s); files in {workdir}")
        return 1
    say(f"OK: every must-be-zero figure is 0 ({figures.kills} kills survived)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
