"""``tether demo``: a refund agent survives a SIGKILL mid-refund, on the embedded SQLite default
(or on PostgreSQL: ``tether demo --db postgresql://…``).

The demo starts a fake payments service (its own process and SQLite file; it honors
idempotency keys) and a worker process running a ``RefundAgent`` session per customer
(``tether.demo_agent``). The worker kills itself with SIGKILL between one refund's success at
the payments service and its record in the store; the demo starts a second worker on the same
store, which resumes every session where it stopped. Meanwhile one large refund waits for a
person's approval (the demo decides it from its own process) and a flaky fraud check trips its
circuit breaker. At the end the demo counts the refunds in the payments service's own file:
each customer exactly once. The exit code is 0 only if every check holds.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import msgspec
import structlog

import tether
from tether.demo_agent import CUSTOMERS, FRAUD_BREAKER, VICTIM, Customer, customer, money
from tether.runtime.approvals import view
from tether.store.open import scheme_of, shown, sqlite_path
from tether.testing.payments import PaymentsService, refunds

WORKER_TIMEOUT = 45.0  # seconds a worker may run before the demo gives up on it
APPROVER = "demo-operator"


# -- files and processes --------------------------------------------------------------------


@dataclass(frozen=True)
class Files:
    store: str  # the tether store: an SQLite file's path, or a PostgreSQL URL
    payments: Path  # the payments service's own SQLite file
    log: Path  # the workers' logs: tether's warnings, as JSON lines
    kind: str  # what the store is, for people to read

    @classmethod
    def fresh(cls, db: str) -> Files:
        if scheme_of(db) in ("postgresql", "postgres"):
            url, kind = _fresh_postgres(db)
            here = Path.cwd() / "tether-demo"
            files = cls(
                url, here.with_name("tether-demo-payments.db"), here.with_suffix(".log"), kind
            )
            Path(f"{files.payments}").unlink(missing_ok=True)
        else:
            store = Path(sqlite_path(db)).resolve()
            files = cls(
                str(store),
                store.with_name(f"{store.stem}-payments.db"),
                store.with_name(f"{store.stem}.log"),
                "embedded SQLite, a fresh file",
            )
            for path in (files.store, files.payments):
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
        files.log.unlink(missing_ok=True)
        return files


DEMO_SCHEMA = "tether_demo"  # the schema the demo owns in a PostgreSQL database not told one


def _fresh_postgres(url: str) -> tuple[str, str]:
    """The demo's store in the PostgreSQL database ``url`` names, empty: the schema
    ``tether_demo`` (dropped and made again: the demo owns it), or the schema the URL names
    (``?schema=``), which must hold no tables — the demo never empties a store of yours."""
    import psycopg

    from tether.store.postgres.dsn import split_schema, with_schema

    dsn, schema = split_schema(url, None)
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            if schema is None:
                schema = DEMO_SCHEMA
                conn.execute(f"DROP SCHEMA IF EXISTS {DEMO_SCHEMA} CASCADE")
                kind = f"PostgreSQL, schema {DEMO_SCHEMA}, made afresh for the demo"
            else:
                row = conn.execute(
                    "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)
                ).fetchone()
                if row is not None and row[0]:
                    raise tether.ConfigError(
                        f"schema {schema!r} holds tables already: the demo needs an empty store "
                        f"(leave out ?schema= and it uses a schema of its own, {DEMO_SCHEMA})"
                    )
                kind = f"PostgreSQL, schema {schema}, empty"
    except psycopg.Error as exc:
        raise tether.StoreOpenError(f"cannot reach the demo's PostgreSQL store: {exc}") from exc
    return with_schema(dsn, schema), kind


@dataclass
class Worker:
    """A worker process running ``tether.demo_agent.main``; its stdout is the event stream."""

    number: int
    proc: subprocess.Popen[str]
    stdout: IO[str]  # the proc's, piped

    @classmethod
    def start(cls, number: int, files: Files, url: str, *, kill: bool) -> Worker:
        code = "from tether.demo_agent import main; main()"
        argv = [sys.executable, "-c", code, files.store, url, str(files.log)]
        with files.log.open("a") as log:  # tracebacks, if any, land next to tether's logs
            proc = subprocess.Popen(
                argv + (["--kill"] if kill else []),
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                text=True,
            )
        if proc.stdout is None:  # stdout=PIPE always makes one
            proc.kill()
            raise RuntimeError("the worker process has no stdout pipe")
        return cls(number, proc, proc.stdout)

    def events(self) -> Iterator[dict[str, Any]]:
        """The worker's events until it exits (killed if it outlives ``WORKER_TIMEOUT``)."""
        watchdog = threading.Timer(WORKER_TIMEOUT, self.proc.kill)
        watchdog.start()
        try:
            for line in self.stdout:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    yield event
            self.proc.wait()
        finally:
            watchdog.cancel()
            if self.proc.poll() is None:  # the demo itself failed: take the worker down too
                self.proc.kill()
                self.proc.wait()

    @property
    def exit(self) -> str:
        code = self.proc.returncode
        if code is not None and code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"


# -- the story ------------------------------------------------------------------------------


def say(text: str = "") -> None:
    print(text, flush=True)


def about(c: Customer, text: str) -> None:
    say(f"  {c.session:<6} {c.order_id}  {text}")


@dataclass
class Story:
    """Prints the workers' events, once each, and remembers what the checks need."""

    files: Files
    answered: dict[str, str] = field(default_factory=dict)
    shown: set[str] = field(default_factory=set)  # what is said once
    decided: list[tether.ApprovalRequest] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # event kinds

    def tell(self, worker: Worker, event: dict[str, Any]) -> None:
        kind = str(event.get("event"))
        self.seen.add(kind)
        handler: Callable[[Worker, dict[str, Any]], None] | None = getattr(self, f"on_{kind}", None)
        if handler is not None:
            handler(worker, event)

    def on_fraud_503(self, worker: Worker, e: dict[str, Any]) -> None:
        c = _by_order(e["order_id"])
        about(c, f"fraud check: the scoring service answers 503 (call {e['call']})")

    def on_fraud_skipped(self, worker: Worker, e: dict[str, Any]) -> None:
        found = re.search(r"Do not call it again for (\d+) s", e["reason"])
        told = f"breaker open, retry in {found.group(1)} s" if found else e["reason"]
        about(customer(e["session"]), f"told: fraud check unavailable ({told}); goes on without it")

    def on_breaker(self, worker: Worker, e: dict[str, Any]) -> None:
        if "breaker" in self.shown:
            return
        self.shown.add("breaker")
        detail = re.sub(r"until (\d{9,})", lambda m: "until " + _clock(float(m[1])), e["detail"])
        say(f"  rt.tree(): {FRAUD_BREAKER} [{detail}]")

    def on_refunded(self, worker: Worker, e: dict[str, Any]) -> None:
        c, amount = _by_order(e["order_id"]), money(e["amount_cents"])
        if e["replayed"]:
            about(
                c, f"refund {amount} retried, same key: {e['refund_id']}, replayed by the service"
            )
        else:
            about(c, f"refund {amount}: made by the payments service, {e['refund_id']}")

    def on_held(self, worker: Worker, e: dict[str, Any]) -> None:
        if e["request_id"] in self.shown:
            return
        self.shown.add(e["request_id"])
        amount = money(int(e["args"].get("amount_cents", 0)))
        about(
            customer(e["session"]),
            f"{e['tool']} {amount}: held for approval {e['request_id']}; the worker goes on",
        )

    def on_dying(self, worker: Worker, e: dict[str, Any]) -> None:
        about(
            customer(e["session"]),
            "SIGKILL: the refund is made, and the worker dies before the store records it",
        )

    def on_answer(self, worker: Worker, e: dict[str, Any]) -> None:
        if e["session"] not in self.answered:
            self.answered[e["session"]] = e["text"]
            about(customer(e["session"]), f'answers: "{e["text"]}"')

    def on_waiting(self, worker: Worker, e: dict[str, Any]) -> None:
        self.decided += anyio.run(_approve_pending, self.files.store)


def _by_order(order_id: str) -> Customer:
    return next(c for c in CUSTOMERS if c.order_id == order_id)


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def _quiet() -> None:
    """Keep the demo's output to the story: tether's own logs at warning level and above."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


# -- what the demo process does in the store ------------------------------------------------


async def _approve_pending(db: str) -> list[tether.ApprovalRequest]:
    """Decide the pending approvals from this process, as a person would: the store is shared,
    and the worker serving the session picks the decision up."""
    decided = []
    async with tether.Runtime(db, serve=False) as rt:
        for request in await rt.approvals.pending():
            args = json.dumps(request.args, sort_keys=True)
            say(f"Approval {request.request_id} waits for a person: {request.reason}")
            say(f"  {request.session_id} asks to call {request.tool} {args}")
            decision = await rt.approvals.decide(request.request_id, tether.Approve(by=APPROVER))
            say(f"  {decision.status} by {APPROVER} from the demo's process, not the worker's:")
            say("  tether.Runtime(db, serve=False) on the same store, as the CLI does it")
            decided.append(decision)
    return decided


class Effect(msgspec.Struct):
    tool: str
    status: str
    attempts: int
    result: dict[str, Any] | None


class SessionFacts(msgspec.Struct):
    refunds: list[Effect]  # the session's refund calls, as its ledger holds them
    approvals: list[tether.ApprovalRequest]
    outcome: str  # the last TaskEnded's outcome ("" if none)


async def _facts(db: str) -> tuple[dict[str, SessionFacts], list[str]]:
    """What the store says: each session's refund effects, approvals and task outcome; and the
    fraud breaker's journal (event types)."""
    out: dict[str, SessionFacts] = {}
    async with tether.Runtime(db, serve=False) as rt:
        for c in CUSTOMERS:
            effects = [
                Effect(
                    e.tool,
                    e.status,
                    e.attempts,
                    msgspec.msgpack.decode(e.result) if e.result else None,
                )
                for e in await rt.store.find_effects(actor_id=c.session)
                if e.tool in ("refund", "big_refund")
            ]
            approvals = [view(a) for a in await rt.store.find_approvals(actor_id=c.session)]
            ended = [ev for ev in await _journal(rt, c.session) if ev.get("type") == "TaskEnded"]
            outcome = str(ended[-1].get("outcome", "")) if ended else ""
            out[c.session] = SessionFacts(effects, approvals, outcome)
        breaker = [str(ev.get("type")) for ev in await _journal(rt, FRAUD_BREAKER)]
    return out, breaker


async def _journal(rt: tether.Runtime, actor_id: str) -> list[dict[str, Any]]:
    rows = await rt.store.load_journal(actor_id, 0, 10_000)
    events = [msgspec.msgpack.decode(row.payload) for row in rows]
    return [e for e in events if isinstance(e, dict)]


# -- the run --------------------------------------------------------------------------------


def run(db: str = "tether-demo.db") -> int:
    """Run the demo and print what happened. Returns the process exit code."""
    _quiet()
    started = time.monotonic()
    files = Files.fresh(db)
    say("tether demo: a refund agent serves 4 customers; its worker is killed mid-refund")
    say(f"  store     {shown(files.store)} ({files.kind})")
    with PaymentsService.start(files.payments) as payments:
        say(f"  payments  a fake payments service (pid {payments.proc.pid}) that honors")
        say(f"            idempotency keys; it records refunds in {files.payments.name}")
        story = Story(files)
        first = Worker.start(1, files, payments.url, kill=True)
        say(f"\nWorker 1 (pid {first.proc.pid}) starts a RefundAgent session per customer:")
        for event in first.events():
            story.tell(first, event)
        say(f"Worker 1 is gone: {first.exit}. What it left behind:")
        anyio.run(_left_behind, files)
        second = Worker.start(2, files, payments.url, kill=False)
        say(f"\nWorker 2 (pid {second.proc.pid}) opens the same store; each session resumes:")
        for event in second.events():
            story.tell(second, event)
        say(f"Worker 2 finished: {second.exit}.")
    facts, breaker = anyio.run(_facts, files.store)
    say()
    _table(files, facts)
    say()
    ok = _checks(files, story, first, second, facts, breaker)
    verdict = "every check holds" if ok else "SOME CHECKS FAILED"
    say(f"  {verdict} ({time.monotonic() - started:.1f} s)")
    _footer(files, ok)
    return 0 if ok else 1


async def _left_behind(files: Files) -> None:
    """After the kill: the refund is at the payments service, not in the store."""
    victim = customer(VICTIM)
    made = [r for r in refunds(files.payments) if r["order_id"] == victim.order_id]
    async with tether.Runtime(files.store, serve=False) as rt:
        effects = [e for e in await rt.store.find_effects(actor_id=VICTIM) if e.tool == "refund"]
    ids = ", ".join(r["refund_id"] for r in made) or "none"
    say(f"  payments service: {len(made)} refund for {victim.order_id} ({ids})")
    for e in effects:
        state = "an intent without a receipt" if e.status == "pending" else e.status
        say(f"  tether store: {VICTIM}'s refund call is {state} (status {e.status})")


def _refund_of(f: SessionFacts) -> Effect | None:
    done = [e for e in f.refunds if e.status == "done"]
    return done[-1] if done else None


def _table(files: Files, facts: dict[str, SessionFacts]) -> None:
    rows = [["customer", "order", "amount", "refunds", "approval", "replayed", "task"]]
    for c in CUSTOMERS:
        f = facts[c.session]
        count = sum(1 for r in refunds(files.payments) if r["order_id"] == c.order_id)
        effect = _refund_of(f)
        replayed = bool(effect and effect.result and effect.result.get("replayed"))
        approvals = ", ".join(
            f"{a.status} by {', '.join(a.approved_by) or '-'}" for a in f.approvals
        )
        rows.append(
            [
                c.session,
                c.order_id,
                money(c.amount_cents),
                str(count),
                approvals or "-",
                f"yes, attempt {effect.attempts}" if effect and replayed else "no",
                f.outcome or "no",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        say("  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


def _checks(
    files: Files,
    story: Story,
    first: Worker,
    second: Worker,
    facts: dict[str, SessionFacts],
    breaker: list[str],
) -> bool:
    made = refunds(files.payments)
    counts = {c.session: sum(r["order_id"] == c.order_id for r in made) for c in CUSTOMERS}
    approvals = [a for f in facts.values() for a in f.approvals]
    victim = _refund_of(facts[VICTIM])
    checks = [
        (
            all(n == 1 for n in counts.values()) and len(made) == len(CUSTOMERS),
            f"each customer refunded exactly once: {len(made)} refunds for {len(CUSTOMERS)} "
            "orders in the payments service's file",
        ),
        (
            len(approvals) == 1 and approvals[0].status == "approved" and bool(story.decided),
            "one risky refund held for approval, approved from another process, then made",
        ),
        (
            "BreakerOpened" in breaker and "fraud_skipped" in story.seen,
            "the flaky fraud check tripped its breaker; the agent was told, and went on",
        ),
        (
            first.proc.returncode == -signal.SIGKILL
            and "dying" in story.seen
            and second.proc.returncode == 0
            and victim is not None
            and bool(victim.result and victim.result.get("replayed")),
            f"worker 1 died between {VICTIM}'s payment and its record; worker 2 resumed "
            "the step, same key",
        ),
        (
            all(f.outcome == "finished" for f in facts.values()),
            f"all {len(CUSTOMERS)} sessions finished their task and answered",
        ),
    ]
    for ok, text in checks:
        say(f"  {'ok  ' if ok else 'FAIL'}  {text}")
    return all(ok for ok, _ in checks)


def _footer(files: Files, ok: bool) -> None:
    db = shlex.quote(shown(files.store))
    say(f"\nstore: {shown(files.store)}")
    say("inspect it:")
    for command in (
        "tether sessions",
        f"tether show {VICTIM}",
        "tether approvals list --status all",
        "tether tree",
    ):
        say(f"  {command} --db {db}")
    say(f"the workers' log (tether's warnings, JSON lines): {files.log}")
    if not ok and files.log.exists():
        tail = files.log.read_text(errors="replace").splitlines()[-15:]
        say("its last lines:\n" + "\n".join("  " + line for line in tail))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tether.demo [--db PATH]``."""
    parser = argparse.ArgumentParser(prog="tether demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db",
        "--store",
        default="tether-demo.db",
        help="store file to create, or a PostgreSQL URL (default: %(default)s)",
    )
    return run(parser.parse_args(argv).db)


if __name__ == "__main__":
    sys.exit(main())
