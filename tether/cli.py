"""The ``tether`` command: look into a store and act on what waits for a person.

Every command but ``demo`` and ``migrate`` opens the store at ``--db`` (a path or a store URL,
as ``tether.open_store`` takes; default: ``$TETHER_DB``, else ``tether.db``) for
administration only (``Runtime(serve=False)``): no actor runs in this process, and what it
reads goes through ``StoreAdmin``. The application's classes and tools are imported by the
names the store holds, with ``--app-dir`` (default: the current directory) first on
``sys.path``. ``migrate`` upgrades the store itself, offline. Decisions, resolutions and
retries are stored; the runtimes serving the store pick them up. A missing store is an error,
never a new empty store (the store is opened with ``create=False``).

Exit codes: 0 done; 1 the operation failed (unknown id, closed request, invalid tool
arguments, unreadable store; ``check``: a violation found); 2 the command line is wrong; 130
interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import structlog

import tether
from tether.actors.actor import import_class
from tether.actors.messages import TOO_DEEP, nesting_problem
from tether.cli_check import cmd_check
from tether.runtime.approvals import view as approval_view
from tether.store.admin import StoreAdmin
from tether.store.open import open_store
from tether.store.records import PARKED, ActorRecord, DeadLetter, EffectRecord, StoredMessage

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: Mailbox rows read per actor (listing depths and ``show``).
MAILBOX_LIMIT = 100_000
_JOURNAL_CHUNK = 10_000
_CELL_WIDTH = 60  # longest cell in a table before it is cut short
_INTERNAL_PREFIXES = ("tether.", "breaker:")

Handler = Callable[[tether.Runtime, argparse.Namespace], Awaitable[int]]


class CliError(Exception):
    """An expected failure: printed as one ``tether: error:`` line, exit code ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        self.code = code
        super().__init__(message)


# -- entry point --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tether`` command with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    parser = _parser()
    try:
        # ``tether console`` takes its own options (tether.console.command): what follows it
        # is handed over as it is.
        args, rest = parser.parse_known_args(argv)
        if rest and args.command != "console":
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
    except SystemExit as exc:  # --help, or a usage error argparse already explained
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        _use_app_dir(args.app_dir)
        if args.command == "demo":
            from tether.demo import run

            return run(args.demo_db)
        if args.command == "console":
            return _console(args.db, rest)
        _check_args(args)
        with _logs_to_stderr():
            code: int = anyio.run(_run, args.db, args)
        return code
    except KeyboardInterrupt:
        print("tether: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `tether actors | head`: the reader left; not an error of ours
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except BaseException as exc:
        expected = _expected(exc)
        if expected is None:
            raise
        if isinstance(expected, KeyboardInterrupt | asyncio.CancelledError):
            print("tether: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        code = expected.code if isinstance(expected, CliError) else EXIT_FAILED
        print(f"tether: error: {_one_line(str(expected))}", file=sys.stderr)
        return code


async def _run(db: str, args: argparse.Namespace) -> int:
    try:
        store = open_store(db, create=False)  # a store that does not exist is an error
        if args.command == "migrate":
            return await _migrate(store, db, force=args.force)
        async with tether.Runtime(store=store, serve=False) as rt:
            handler: Handler = args.handler
            return await handler(rt, args)
    except tether.StoreOpenError as exc:
        if "TETHER_DB" in os.environ:
            raise
        raise CliError(f"{exc} (give --db PATH or set TETHER_DB)") from exc


def _expected(exc: BaseException) -> BaseException | None:
    """The error to report for ``exc`` (unwrapping a task group's single error), or None if it
    is a bug that deserves its traceback."""
    if isinstance(exc, BaseExceptionGroup):
        leaves = [_expected(e) for e in exc.exceptions]
        if leaves and all(e is not None for e in leaves):
            return leaves[0]
        return None
    expected = (CliError, tether.TetherError, OSError, KeyboardInterrupt)
    if isinstance(exc, (*expected, asyncio.CancelledError)):
        return exc
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "failed"


@contextlib.contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """Keep stdout for the command's output: tether's logs go to stderr, warnings and up
    (unless the application configured structlog itself)."""
    if structlog.is_configured():
        yield
        return
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    try:
        yield
    finally:
        structlog.reset_defaults()


def _use_app_dir(app_dir: str) -> None:
    """Put ``app_dir`` first on ``sys.path``, as uvicorn's ``--app-dir`` does: the store names
    the application's actor classes and tools by module, and the ``tether`` script's own
    ``sys.path`` holds neither the current directory nor the application's."""
    path = Path(app_dir)
    if not path.is_dir():
        raise CliError(f"--app-dir {app_dir!r} is not a directory", EXIT_USAGE)
    resolved = str(path.resolve())
    if resolved not in sys.path:
        sys.path.insert(0, resolved)


# -- the command line ---------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tether",
        description="Supervised, durable actors for AI agents: inspect and administer a store.",
    )
    default_db = os.environ.get("TETHER_DB") or "tether.db"
    parser.add_argument(
        "--db",
        default=default_db,
        help="the store: a file, or a URL (sqlite:///a.db, postgresql://…); "
        "default: $TETHER_DB, else tether.db; now %(default)s",
    )
    app_dir_help = (
        "import the application's actor classes and tools from DIR "
        "(put first on sys.path; default: the current directory)"
    )
    parser.add_argument("--app-dir", default=".", metavar="DIR", help=app_dir_help)
    parser.add_argument("--version", action="version", version=f"%(prog)s {tether.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def leaf(
        group: Any, name: str, help_: str, handler: Handler, *, as_json: bool = True
    ) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = group.add_parser(name, help=help_, description=help_)
        p.add_argument("--db", default=argparse.SUPPRESS, help="the store: a file or a URL")
        p.add_argument("--app-dir", default=argparse.SUPPRESS, metavar="DIR", help=app_dir_help)
        if as_json:
            p.add_argument("--json", action="store_true", help="print machine-readable JSON")
        p.set_defaults(handler=handler)
        return p

    leaf(commands, "actors", "every actor in the store", _cmd_actors)
    leaf(
        commands,
        "sessions",
        "the agent sessions (top-level actors of the application)",
        _cmd_sessions,
    )
    show = leaf(
        commands,
        "show",
        "one actor: record, state, journal, mailbox, effects, approvals",
        _cmd_show,
    )
    show.add_argument("actor_id", metavar="ID")
    show.add_argument(
        "--events",
        type=_count,
        default=10,
        metavar="N",
        help="journal events to show (default: 10)",
    )
    leaf(commands, "tree", "the supervision tree", _cmd_tree)
    leaf(
        commands,
        "check",
        "check the whole store's integrity (after an incident): exit 1 naming each violation",
        cmd_check,
    )

    approvals = commands.add_parser("approvals", help="calls held for a person's decision")
    acts = approvals.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = leaf(
        acts, "list", "approval requests (pending ones unless --status)", _cmd_approvals_list
    )
    listing.add_argument(
        "--status", choices=("pending", "approved", "rejected", "all"), default="pending"
    )
    listing.add_argument("--session", metavar="ID", help="only this session's requests")
    leaf(acts, "show", "one approval request", _cmd_approvals_show).add_argument(
        "request_id", metavar="ID"
    )
    for name, help_ in (
        ("approve", "approve the call as it stands"),
        ("reject", "reject the call; the reason goes back to the agent"),
        ("modify", "run the call with these arguments instead (validated by the tool)"),
    ):
        p = leaf(acts, name, help_, _cmd_approvals_decide)
        p.add_argument("request_id", metavar="ID")
        p.add_argument("--by", required=True, type=_name, metavar="NAME", help="who decides")
        if name == "reject":
            p.add_argument("--reason", required=True, type=_name, metavar="TEXT")
        if name == "modify":
            p.add_argument(
                "--args",
                required=True,
                dest="args_json",
                metavar="JSON",
                help="the tool's arguments, as a JSON object",
            )

    quarantine = commands.add_parser("quarantine", help="ambiguous effects held for a person")
    acts = quarantine.add_subparsers(dest="action", required=True, metavar="ACTION")
    leaf(acts, "list", "quarantined effects", _cmd_quarantine_list).add_argument(
        "--actor", metavar="ID", help="only this actor's effects"
    )
    leaf(acts, "show", "one quarantined effect", _cmd_quarantine_show).add_argument(
        "key", metavar="KEY"
    )
    resolve = leaf(acts, "resolve", "resolve a quarantined effect", _cmd_quarantine_resolve)
    resolve.add_argument("key", metavar="KEY")
    how = resolve.add_mutually_exclusive_group(required=True)
    how.add_argument("--done", action="store_true", help="the call did happen (see --result)")
    how.add_argument("--retry", action="store_true", help="call again, with the same key")
    how.add_argument("--abort", action="store_true", help="do not call; the step is told why")
    resolve.add_argument(
        "--result", dest="result_json", metavar="JSON", help="with --done: the call's result"
    )
    resolve.add_argument("--reason", type=_name, metavar="TEXT", help="with --abort: why")
    resolve.add_argument("--by", required=True, type=_name, metavar="NAME", help="who resolves")

    dead = commands.add_parser("dead-letters", help="messages that could not be processed")
    acts = dead.add_subparsers(dest="action", required=True, metavar="ACTION")
    leaf(acts, "list", "dead letters, oldest first", _cmd_dead_list).add_argument(
        "--actor", metavar="ID", help="only this actor's dead letters"
    )
    for name, help_, handler in (
        ("retry", "put a dead letter back in its actor's mailbox", _cmd_dead_retry),
        ("discard", "delete a dead letter for good", _cmd_dead_discard),
    ):
        p = leaf(acts, name, help_, handler)
        p.add_argument("msg_id", metavar="MSG_ID")
        p.add_argument(
            "--by",
            type=_name,
            default=_login(),
            metavar="NAME",
            help="who does it, for the audit log (default: your login name, now %(default)s)",
        )

    audit = leaf(
        commands,
        "audit",
        "the audit log: every attempted decision or resolution, allowed or refused, newest first",
        _cmd_audit,
    )
    audit.add_argument(
        "--target", metavar="ID", help="only attempts on this request, key or message"
    )
    audit.add_argument("--actor", metavar="ID", help="only attempts concerning this actor")
    audit.add_argument(
        "--limit", type=_count, default=100, metavar="N", help="rows to show (default: 100)"
    )
    audit.add_argument(
        "--before", type=_count, metavar="SEQ", help="only rows older than this one (paging)"
    )

    commands.add_parser(
        "console",
        help="the web approval console (pip install 'tether[console]'); "
        "`tether console --help` for its options",
        add_help=False,
    )

    migrate = commands.add_parser(
        "migrate",
        help="upgrade the store to this tether's schema version (stop its runtimes first)",
        description="Upgrade the store to this tether's schema version, in one transaction. "
        "Stop every runtime on the store first.",
    )
    migrate.add_argument("--db", default=argparse.SUPPRESS, help="the store: a file or a URL")
    migrate.add_argument(
        "--force",
        action="store_true",
        help="go on although the store lists runtimes that may be alive (they are known gone)",
    )

    demo = commands.add_parser(
        "demo",
        help="a refund agent killed mid-refund and resumed, on an embedded SQLite store",
    )
    demo.add_argument(
        "--db",
        "--store",
        dest="demo_db",
        metavar="PATH",
        default="tether-demo.db",
        help="store file to create, replacing an old one (default: %(default)s)",
    )
    return parser


def _console(db: str, argv: list[str]) -> int:
    try:
        from tether.console.command import main as console_main
    except ImportError as exc:  # the extra is not installed
        raise CliError(
            f"the console needs its extra: pip install 'tether[console]' ({exc})"
        ) from None
    return console_main(argv, default_db=db)


async def _migrate(store: tether.Store, db: str, *, force: bool) -> int:
    before, after = await store.migrate(force=force)
    if before == after:
        print(f"{db}: schema version {after} already; nothing to do")
    else:
        print(f"{db}: upgraded from schema version {before} to {after}")
    return EXIT_OK


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {n}")
    return n


def _name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _check_args(args: argparse.Namespace) -> None:
    """Checks argparse cannot express; JSON arguments parsed before the store is opened."""
    if getattr(args, "args_json", None) is not None:
        value = _json_arg(args.args_json, "--args")
        if not isinstance(value, dict):
            raise CliError(
                f"--args must be a JSON object of the tool's arguments, not {_json_kind(value)}",
                EXIT_USAGE,
            )
        args.modify_args = value
    if args.command == "quarantine" and args.action == "resolve":
        if args.result_json is not None and not args.done:
            raise CliError("--result goes with --done", EXIT_USAGE)
        if args.reason is not None and not args.abort:
            raise CliError("--reason goes with --abort", EXIT_USAGE)
        if args.abort and args.reason is None:
            raise CliError(
                "--abort needs --reason TEXT: the step (and its agent) is told it", EXIT_USAGE
            )
        args.result = None if args.result_json is None else _json_arg(args.result_json, "--result")


def _json_arg(text: str, option: str) -> Any:
    # Python's json accepts NaN, Infinity and numbers too large for a float (read as inf):
    # none of them is JSON, and stored as a tool's arguments or result they reach the agent
    # as values no JSON consumer can read back. Refuse them here, before anything is stored.
    try:
        value = json.loads(text, parse_constant=_not_json, parse_float=_finite_float)
        too_deep = nesting_problem(value)
    except ValueError as exc:  # JSONDecodeError, _NotJson, an int of over 4300 digits
        raise CliError(f"{option} is not valid JSON: {exc}", EXIT_USAGE) from None
    except RecursionError:  # deeper than json's parser goes, so far beyond the limit
        too_deep = TOO_DEEP
    if too_deep is not None:
        raise CliError(f"{option} cannot be stored: {too_deep}", EXIT_USAGE)
    return value


class _NotJson(ValueError):
    pass


def _not_json(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _NotJson(f"the number {text} is too large")
    return value


def _json_kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


# -- commands -----------------------------------------------------------------------------------


def _admin(rt: tether.Runtime) -> StoreAdmin:
    """What the commands read from the store: no more than an administration tool may."""
    return rt.store


def _is_session(record: ActorRecord) -> bool:
    """Whether ``record`` is an agent session: its class is a ``tether.AgentSession``. When the
    class cannot be imported here, a top-level actor that is not one of tether's internals
    (``tether.*`` supervisors, ``breaker:*`` breakers, ``<session>/...`` guards) counts."""
    try:
        cls = import_class(record.class_path)
    except tether.ConfigError:
        return (
            record.parent_id is None
            and not record.actor_id.startswith(_INTERNAL_PREFIXES)
            and "/" not in record.actor_id
        )
    return bool(getattr(cls, "is_session", False))


class _Corrupt:
    """Damaged rows a listing left out, by key: listed after the readable ones, then the
    command fails naming them (one damaged row must not hide the others, and a script must
    still learn that something was not read)."""

    def __init__(self, what: str = "damaged row(s) in the store") -> None:
        self.what = what
        self.rows: list[tuple[str, str]] = []

    def __call__(self, key: str, exc: tether.CorruptRecordError) -> None:
        self.rows.append((key, str(exc)))

    def json(self, key: str) -> list[dict[str, str]]:
        return [{key: k, "status": "corrupt", "error": err} for k, err in self.rows]

    def print(self) -> None:
        for _, err in self.rows:
            print(_one_line(f"corrupt: {err}"))

    def check(self) -> None:
        if self.rows:
            raise CliError(
                f"{len(self.rows)} {self.what} (listed as corrupt): "
                + ", ".join(k for k, _ in self.rows)
            )


async def _cmd_actors(rt: tether.Runtime, args: argparse.Namespace) -> int:
    corrupt = _Corrupt()
    records = await _admin(rt).list_actors(on_corrupt=corrupt)
    return await _list_actors(rt, args, records, "actors", corrupt)


async def _cmd_sessions(rt: tether.Runtime, args: argparse.Namespace) -> int:
    # A damaged row cannot say whether it is a session: it is listed as corrupt here too.
    corrupt = _Corrupt()
    records = [r for r in await _admin(rt).list_actors(on_corrupt=corrupt) if _is_session(r)]
    return await _list_actors(rt, args, records, "sessions", corrupt)


async def _list_actors(
    rt: tether.Runtime,
    args: argparse.Namespace,
    records: list[ActorRecord],
    what: str,
    corrupt: _Corrupt,
) -> int:
    store = _admin(rt)
    now, lease_now = rt.clock(), await store.store_time()
    rows = [await _actor_summary(store, rec, now, lease_now, corrupt) for rec in records]
    if args.json:
        _print_json([*rows, *corrupt.json("id")])
    elif not rows and not corrupt.rows:
        print(f"no {what} in {args.db}")
    elif not rows:
        corrupt.print()
    else:
        print(
            _table(
                ["ID", "CLASS", "STATUS", "MAILBOX", "PARKED", "JOURNAL", "LEASE"],
                [
                    [
                        r["id"],
                        r["class"],
                        r["status"],
                        r["mailbox"],
                        r["parked"],
                        r["journal"],
                        _lease_text(r),
                    ]
                    for r in rows
                ],
            )
        )
        corrupt.print()
    corrupt.check()
    return EXIT_OK


async def _actor_summary(
    store: StoreAdmin, rec: ActorRecord, now: float, lease_now: float, corrupt: _Corrupt
) -> dict[str, Any]:
    """``now``: this machine's clock, for message times; ``lease_now``: the store's, which
    judges leases."""
    mailbox = await store.list_messages(rec.actor_id, MAILBOX_LIMIT, on_corrupt=corrupt)
    return {
        "id": rec.actor_id,
        "class": rec.class_path,
        "parent": rec.parent_id,
        "status": rec.status,
        "stop_reason": rec.stop_reason,
        "mailbox": len(mailbox),
        "parked": sum(_is_parked(m, now) for m in mailbox),
        "journal": await _journal_length(store, rec.actor_id),
        "lease_owner": rec.lease_owner,
        "lease_expires": rec.lease_expires if rec.lease_owner else None,
        "lease_live": bool(rec.lease_owner) and rec.lease_expires > lease_now,
        "fence": rec.fence,
        "created_at": rec.created_at,
    }


async def _journal_length(store: StoreAdmin, actor_id: str) -> int:
    """The number of events ever journaled (the journal is never truncated; a snapshot at seq
    N stands for events 1..N, so only the rows after the latest snapshot are read)."""
    snap = await store.load_snapshot(actor_id)
    seq = snap.seq if snap is not None else 0
    while True:
        rows = await store.load_journal(actor_id, seq, _JOURNAL_CHUNK)
        if rows:
            seq = rows[-1].seq
        if len(rows) < _JOURNAL_CHUNK:
            return seq


def _lease_text(row: dict[str, Any]) -> str:
    if not row["lease_owner"]:
        return "-"
    return str(row["lease_owner"]) + ("" if row["lease_live"] else " (expired)")


async def _cmd_show(rt: tether.Runtime, args: argparse.Namespace) -> int:
    store = _admin(rt)
    rec = await store.get_actor(args.actor_id)
    if rec is None:
        raise tether.ActorNotFound(args.actor_id)
    now, lease_now = rt.clock(), await store.store_time()
    corrupt = _Corrupt()
    summary = await _actor_summary(store, rec, now, lease_now, corrupt)
    snap = await store.load_snapshot(rec.actor_id)
    after = await _journal_after(store, rec.actor_id, snap.seq if snap is not None else 0)
    total = summary["journal"]
    first = max(0, total - args.events)
    recent = await _journal_after(store, rec.actor_id, first) if args.events else []
    # Counted by the summary (damaged rows reported there); listed here.
    mailbox = await store.list_messages(rec.actor_id, MAILBOX_LIMIT, on_corrupt=_Corrupt())
    effects = await store.find_effects(actor_id=rec.actor_id, on_corrupt=corrupt)
    approvals = await rt.approvals.pending(rec.actor_id)
    session = await _session_view(rt, rec, corrupt)
    out: dict[str, Any] = {
        "actor": summary,
        "session": session,
        "init": _decode(rec.init),
        "snapshot": None if snap is None else {"seq": snap.seq, "state": _decode(snap.state)},
        "events_since_snapshot": len(after),
        "journal": [{"seq": seq, "event": event} for seq, event in recent],
        "mailbox": [_message_view(m, now) for m in mailbox],
        "effects": [_effect_view(e) for e in effects],
        "pending_approvals": [msgspec.to_builtins(a) for a in approvals],
    }
    if corrupt.rows:
        out["corrupt"] = corrupt.json("key")
    if args.json:
        _print_json(out)
        corrupt.check()
        return EXIT_OK
    stop = f" ({rec.stop_reason})" if rec.stop_reason else ""
    lease = _lease_text(summary)
    if rec.lease_owner:
        lease += f", until {_when(rec.lease_expires, lease_now)}"
    print(
        _pairs(
            [
                ("actor", rec.actor_id),
                ("class", rec.class_path),
                ("parent", rec.parent_id or "-"),
                ("status", rec.status + stop),
                ("lease", f"{lease} (fence {rec.fence})"),
                ("created", _when(rec.created_at, now)),
                ("init", _compact(out["init"])),
            ]
        )
    )
    print()
    if session is not None:
        print(_session_text(session))
        print()
    if snap is None:
        print(f"state: no snapshot; the initial state folded with {len(after)} event(s)")
    else:
        print(f"state: snapshot at seq {snap.seq}, then {len(after)} event(s) after it")
        print(_indent(_pretty(out["snapshot"]["state"])))
    print()
    shown = f"; the last {len(recent)}" if len(recent) < total else ""
    print(f"journal: {total} event(s){shown}")
    for row in out["journal"]:
        print(f"  {row['seq']:>6}  {_compact(row['event'])}")
    print()
    print(f"mailbox: {len(mailbox)} message(s)")
    if mailbox:
        rows = [
            [m["msg_id"], m["type"], m["attempts"], m["parks"], m["state"], m["last_error"] or ""]
            for m in out["mailbox"]
        ]
        print(_indent(_table(["MSG_ID", "TYPE", "ATTEMPTS", "PARKS", "STATE", "LAST ERROR"], rows)))
    print()
    print(f"effects: {len(effects)}")
    for e in out["effects"]:
        outcome = _compact(e["result"]) if e["status"] == "done" else _cut(e["error"] or "")
        print(
            f"  {e['key']}  #{e['index']} {e['tool']}({_compact(e['args'])}) "
            f"{e['status']}, {e['attempts']} attempt(s)" + (f" -> {outcome}" if outcome else "")
        )
        if e["reason"]:
            print(f"      reason: {e['reason']}")
        for note in e["history"]:
            print(f"      - {note}")
    print()
    print(f"pending approvals: {len(approvals)}")
    for a in approvals:
        print(f"  {a.request_id}  {a.tool}({_compact(a.args)})  deadline {_when(a.deadline, now)}")
    if corrupt.rows:
        print()
        corrupt.print()
    corrupt.check()
    return EXIT_OK


async def _session_view(
    rt: tether.Runtime, rec: ActorRecord, corrupt: _Corrupt
) -> dict[str, Any] | None:
    """An agent session's ``rt.session_info``, from its committed journal (None for another
    actor, or a class this process cannot import)."""
    if not _is_session(rec):
        return None
    try:
        return msgspec.to_builtins(await rt.session_info(rec.actor_id))  # type: ignore[no-any-return]
    except tether.CorruptRecordError as exc:
        corrupt(rec.actor_id, exc)
    except tether.ConfigError:  # not importable here: the journal is shown raw below
        pass
    return None


def _session_text(s: dict[str, Any]) -> str:
    lines = [f"session: {s['status']}"]
    if s["task"]:
        # Committed steps only: the one under way shows once it commits.
        done = f"{s['steps']} step(s) committed"
        lines.append(f"  task {s['task']}, {done}: {_cut(s['task_text'])}")
    lines += [f"  {name}: {_cut(s[name])}" for name in ("belief", "frontier", "outcome") if s[name]]
    return "\n".join(lines)


async def _journal_after(store: StoreAdmin, actor_id: str, seq: int) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = []
    while True:
        rows = await store.load_journal(actor_id, seq, _JOURNAL_CHUNK)
        out.extend((row.seq, _decode(row.payload)) for row in rows)
        if rows:
            seq = rows[-1].seq
        if len(rows) < _JOURNAL_CHUNK:
            return out


def _is_parked(m: StoredMessage, now: float) -> bool:
    """Set aside while its step waits for a person: for good (``PARKED``) or until a deadline
    (an approval's, a breaker's retry time)."""
    return m.deliver_at >= PARKED or (m.parks > 0 and m.deliver_at > now)


def _message_view(m: StoredMessage, now: float) -> dict[str, Any]:
    if m.deliver_at >= PARKED:
        state = "parked"
    elif _is_parked(m, now):
        state = f"parked until {_when(m.deliver_at, now)}"
    elif m.deliver_at > now:
        state = f"due {_when(m.deliver_at, now)}"
    else:
        state = "due"
    return {
        "msg_id": m.msg_id,
        "type": m.type,
        "attempts": m.attempts,
        "parks": m.parks,
        "parked": _is_parked(m, now),
        "deliver_at": None if m.deliver_at >= PARKED else m.deliver_at,
        "state": state,
        "wants_reply": m.wants_reply,
        "errors": list(m.errors),
        "last_error": m.errors[-1] if m.errors else None,
        "payload": _decode(m.payload),
    }


def _effect_view(e: EffectRecord) -> dict[str, Any]:
    return {
        "key": e.key,
        "msg_id": e.msg_id,
        "index": e.idx,
        "tool": e.tool,
        "status": e.status,
        "attempts": e.attempts,
        "args": _decode(e.args),
        "result": _decode(e.result) if e.result is not None else None,
        "error": e.error,
        "reason": e.reason,
        "history": list(e.history),
        "created_at": e.created_at,
        "updated_at": e.updated_at,
    }


async def _cmd_tree(rt: tether.Runtime, args: argparse.Namespace) -> int:
    corrupt = _Corrupt()
    roots = await rt.tree(on_corrupt=corrupt)
    if args.json:
        _print_json([*msgspec.to_builtins(roots), *corrupt.json("id")])
    elif not roots and not corrupt.rows:
        print(f"no actors in {args.db}")
    else:
        for root in roots:
            print(root.render())
        corrupt.print()
    corrupt.check()
    return EXIT_OK


# -- approvals ----------------------------------------------------------------------------------


async def _cmd_approvals_list(rt: tether.Runtime, args: argparse.Namespace) -> int:
    status = None if args.status == "all" else args.status
    # A request whose record cannot be decoded is listed as corrupt, by id (``approvals show``
    # on it gives the error).
    corrupt = _Corrupt("approval request(s) cannot be decoded")
    records = await _admin(rt).find_approvals(
        status=status, actor_id=args.session, on_corrupt=corrupt
    )
    rows = [approval_view(r) for r in records]
    if args.json:
        _print_json([*rows, *corrupt.json("request_id")])
    elif not rows and not corrupt.rows:
        which = "" if status is None else f"{status} "
        print(f"no {which}approval requests")
    else:
        if rows:
            _print_approvals_table(rows, rt.clock())
        corrupt.print()
    corrupt.check()
    return EXIT_OK


def _print_approvals_table(rows: list[tether.ApprovalRequest], now: float) -> None:
    print(
        _table(
            ["REQUEST", "SESSION", "TOOL", "ARGS", "STATUS", "APPROVALS", "DEADLINE", "REASON"],
            [
                [
                    a.request_id,
                    a.session_id,
                    a.tool,
                    _compact(a.args),
                    a.status,
                    f"{len(a.approved_by)}/{a.approvers_needed}",
                    _when(a.deadline, now) if a.status == "pending" else "-",
                    a.reason,
                ]
                for a in rows
            ],
        )
    )


async def _cmd_approvals_show(rt: tether.Runtime, args: argparse.Namespace) -> int:
    request = await rt.approvals.get(args.request_id)
    if args.json:
        _print_json(request)
    else:
        print(_approval_text(request, rt.clock()))
    return EXIT_OK


def _approval_text(a: tether.ApprovalRequest, now: float) -> str:
    pairs = [
        ("request", a.request_id),
        ("session", a.session_id),
        ("tool", a.tool),
        ("args", _compact(a.args, cut=False)),
    ]
    if a.requested_args != a.args:
        pairs.append(("requested", _compact(a.requested_args, cut=False)))
    pairs += [
        ("status", a.status),
        ("reason", a.reason),
        (
            "approvals",
            f"{len(a.approved_by)} of {a.approvers_needed}: {', '.join(a.approved_by) or '-'}",
        ),
        ("deadline", f"{_when(a.deadline, now)}, then {a.on_timeout}"),
        ("created", _when(a.created_at, now)),
    ]
    pairs += [
        (f"context.{k}", v if isinstance(v, str) else _compact(v, cut=False))
        for k, v in a.context.items()
    ]
    lines = [_pairs(pairs)]
    if a.decisions:
        lines.append("decisions:")
        for d in a.decisions:
            extra = f": {d['reason']}" if d.get("reason") else ""
            if "args" in d:
                extra += f" args={_compact(d['args'], cut=False)}"
            lines.append(f"  {_when(d['at'], now)}  {d['kind']} by {d['by']}{extra}")
    return "\n".join(lines)


def _typed(name: str) -> tether.Identity:
    """The CLI authenticates no one: ``--by`` is a name the person typed, audited as such
    (names nobody checked count as one approver together towards a quorum)."""
    return tether.Identity(name=name, via="cli", authenticated=False)


async def _cmd_approvals_decide(rt: tether.Runtime, args: argparse.Namespace) -> int:
    decision: tether.Approve | tether.Reject | tether.Modify
    if args.action == "approve":
        decision = tether.Approve(by=args.by)
    elif args.action == "reject":
        decision = tether.Reject(by=args.by, reason=args.reason)
    else:
        decision = tether.Modify(by=args.by, args=args.modify_args)
    request = await rt.approvals.decide(args.request_id, decision, identity=_typed(args.by))
    if args.json:
        _print_json(request)
    elif request.status == "pending":
        print(
            f"{request.request_id}: {args.action} by {args.by} recorded; "
            f"{len(request.approved_by)} of {request.approvers_needed} approval(s), still pending"
        )
    else:
        print(
            f"{request.request_id}: {request.status} ({request.tool}({_compact(request.args)})); "
            f"session {request.session_id} resumes in the runtime that serves it"
        )
    return EXIT_OK


# -- quarantine ---------------------------------------------------------------------------------


async def _cmd_quarantine_list(rt: tether.Runtime, args: argparse.Namespace) -> int:
    corrupt = _Corrupt()
    rows = await rt.quarantine.list(args.actor, on_corrupt=corrupt)
    if args.json:
        _print_json([*msgspec.to_builtins(rows), *corrupt.json("key")])
    elif not rows and not corrupt.rows:
        print("no quarantined effects")
    else:
        _print_quarantine(rows, rt.clock())
        corrupt.print()
    corrupt.check()
    return EXIT_OK


def _print_quarantine(rows: list[tether.QuarantinedEffect], now: float) -> None:
    if not rows:
        return
    print(
        _table(
            ["KEY", "ACTOR", "#", "TOOL", "ARGS", "ATTEMPTS", "SINCE", "REASON"],
            [
                [
                    q.key,
                    q.actor_id,
                    q.index,
                    q.tool,
                    _compact(q.args),
                    q.attempts,
                    _when(q.since, now),
                    q.reason,
                ]
                for q in rows
            ],
        )
    )


async def _cmd_quarantine_show(rt: tether.Runtime, args: argparse.Namespace) -> int:
    q = await rt.quarantine.get(args.key)
    if args.json:
        _print_json(q)
        return EXIT_OK
    now = rt.clock()
    print(
        _pairs(
            [
                ("key", q.key),
                ("actor", q.actor_id),
                ("message", f"{q.msg_id}, effect #{q.index}"),
                ("tool", q.tool),
                ("args", _compact(q.args, cut=False)),
                ("attempts", str(q.attempts)),
                ("since", _when(q.since, now)),
                ("reason", q.reason),
            ]
        )
    )
    if q.history:
        print("history:")
        for note in q.history:
            print(f"  - {note}")
    return EXIT_OK


async def _cmd_quarantine_resolve(rt: tether.Runtime, args: argparse.Namespace) -> int:
    q = await rt.quarantine.get(args.key)
    who = _typed(args.by)
    if args.done:
        await rt.quarantine.mark_done(args.key, args.result, identity=who)
        what = "marked done" + (
            f" with result {_compact(args.result)}" if args.result is not None else ""
        )
    elif args.retry:
        await rt.quarantine.retry(args.key, identity=who)
        what = "to be called again with the same key"
    else:
        await rt.quarantine.abort(args.key, args.reason, identity=who)
        what = f"aborted: {args.reason}"
    resolution = "done" if args.done else "retry" if args.retry else "aborted"
    if args.json:
        _print_json(
            {
                "key": q.key,
                "actor_id": q.actor_id,
                "tool": q.tool,
                "resolution": resolution,
                "by": args.by,
            }
        )
    else:
        print(f"{q.key} ({q.tool} of {q.actor_id}): {what}, by {args.by}")
    return EXIT_OK


# -- dead letters -------------------------------------------------------------------------------


async def _cmd_dead_list(rt: tether.Runtime, args: argparse.Namespace) -> int:
    corrupt = _Corrupt()
    letters = await rt.dead_letters.list(args.actor, on_corrupt=corrupt)
    if args.json:
        _print_json(
            [
                *({**msgspec.to_builtins(d), "payload": _decode(d.payload)} for d in letters),
                *corrupt.json("msg_id"),
            ]
        )
    elif not letters and not corrupt.rows:
        print("no dead letters")
    else:
        _print_dead_letters(letters, rt.clock())
        corrupt.print()
    corrupt.check()
    return EXIT_OK


def _print_dead_letters(letters: list[DeadLetter], now: float) -> None:
    if not letters:
        return
    print(
        _table(
            ["MSG_ID", "ACTOR", "TYPE", "ATTEMPTS", "WHEN", "REASON", "LAST ERROR"],
            [
                [
                    d.msg_id,
                    d.actor_id,
                    d.type,
                    d.attempts,
                    _when(d.created_at, now),
                    d.reason,
                    next((e for e in reversed(d.errors) if e.startswith("attempt ")), ""),
                ]
                for d in letters
            ],
        )
    )


async def _cmd_dead_retry(rt: tether.Runtime, args: argparse.Namespace) -> int:
    await rt.dead_letters.retry(args.msg_id, identity=_typed(args.by))
    if args.json:
        _print_json({"msg_id": args.msg_id, "retried": True})
    else:
        print(f"{args.msg_id}: back in its actor's mailbox with a fresh attempt count")
    return EXIT_OK


async def _cmd_dead_discard(rt: tether.Runtime, args: argparse.Namespace) -> int:
    await rt.dead_letters.discard(args.msg_id, identity=_typed(args.by))
    if args.json:
        _print_json({"msg_id": args.msg_id, "discarded": True})
    else:
        print(f"{args.msg_id}: discarded")
    return EXIT_OK


# -- audit --------------------------------------------------------------------------------------


async def _cmd_audit(rt: tether.Runtime, args: argparse.Namespace) -> int:
    rows = await _admin(rt).list_audit(
        target=args.target, actor_id=args.actor, before=args.before, limit=args.limit
    )
    if args.json:
        _print_json(rows)
    elif not rows:
        print("no audit rows" + (" matching" if args.target or args.actor else ""))
    else:
        now = rt.clock()
        print(
            _table(
                ["SEQ", "WHEN", "WHO", "VIA", "ACTION", "TARGET", "VERSION", "OUTCOME", "DETAIL"],
                [
                    [
                        a.seq,
                        _when(a.at, now),
                        a.identity if a.authenticated else f"{a.identity} (unauthenticated)",
                        a.via + (f" {a.remote}" if a.remote else ""),
                        a.action,
                        a.target,
                        "-"
                        if a.version_before is None
                        else f"{a.version_before}->{'-' if a.version_after is None else a.version_after}",
                        a.outcome,
                        a.detail,
                    ]
                    for a in rows
                ],
            )
        )
    return EXIT_OK


def _login() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name (a container's uid without a passwd entry)
        return f"uid {os.getuid()}"


# -- output -------------------------------------------------------------------------------------


def _decode(blob: bytes) -> Any:
    """A stored msgpack value, untyped (Messages and Events carry their type tag)."""
    try:
        return msgspec.msgpack.decode(blob)
    except msgspec.DecodeError:
        return {"(undecodable)": blob.hex()}


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, msgspec.msgpack.Ext):
        return {"(msgpack ext)": obj.code, "data": bytes(obj.data).hex()}
    return repr(obj)


def _print_json(value: Any) -> None:
    data = msgspec.json.encode(value, enc_hook=_enc_hook)
    sys.stdout.write(msgspec.json.format(data, indent=2).decode() + "\n")


def _compact(value: Any, *, cut: bool = True) -> str:
    text = msgspec.json.encode(value, enc_hook=_enc_hook).decode()
    return _cut(text) if cut else text


def _pretty(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value, enc_hook=_enc_hook), indent=2).decode()


def _cut(text: str, width: int = _CELL_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_cut(str(c)) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [list(headers), *cells]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _pairs(pairs: Sequence[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in pairs)


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _when(ts: float, now: float) -> str:
    """A wall-clock time in this machine's zone, with how far it is from now."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    delta = ts - now
    span = _span(abs(delta))
    return f"{stamp} ({'in ' + span if delta > 0 else span + ' ago'})"


def _span(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


if __name__ == "__main__":
    sys.exit(main())
