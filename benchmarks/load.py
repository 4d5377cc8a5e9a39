"""Load: 10,000 agent sessions and 100,000 user messages in one runtime (issue #7).

One ``Runtime`` on a fresh SQLite file (default ``durability="full"``), ``passivate_after``
small (2 s), and a cheap model: each ``UserMessage`` makes the session call one trivial tool
(``echo``) and then answer, so one user message is 3 handler steps (the message, 2 ``Continue``
steps), 3 effects (model, echo, model) and a late reply to the ``ask``. Every session has the
default loop policy (a loop-guard actor ``<id>/loops`` on its first effect) and ``echo`` has a
breaker (``breaker:echo`` under ``tether.guards``)::

    .venv/bin/python benchmarks/load.py                  # 10,000 sessions, 100,000 messages
    .venv/bin/python benchmarks/load.py --quick          # 500 sessions, 5,000 messages (CI)
    .venv/bin/python benchmarks/load.py --json out.json  # also the raw figures and time series

Phases:

1. **spawn**: ``rt.spawn`` every session (``--senders`` at a time).
2. **load**: ``--senders`` tasks; sender k owns sessions k, k+S, k+2S, ... and asks each of them
   one ``UserMessage`` per round, ``--per-session`` rounds. A session never has two messages in
   flight, and with the default sizes the gap between two messages to one session is longer
   than ``passivate_after``: most messages find their session passivated and activate it again
   (recovery from the journal), so this is the churn case, not a hot set.
3. **drain**: wait until every session and loop guard has passivated.
4. **sample** (tracemalloc, outside every timed phase): a second runtime on the same file asks
   ``--sample`` sessions one more message each and measures the Python heap with all of them
   active, then again once they passivated: the memory of one active session (with its loop
   guard) and what stays behind per actor after passivation.
5. **check** (offline, on the closed file): every ask got its own answer; every session's
   journal folds to exactly the tasks sent, in order, each finished; 3 ledger rows per message,
   all ``done`` at attempt 1; one stored reply per ask; mailbox and dead letters empty; no loop
   detection journaled.

A background task samples ``VmRSS`` / ``VmHWM`` (``/proc/self/status``) and ``len(rt.cells)``
every 0.2 s. Nothing asserts anything about time: the exit status is 1 only if a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import logging
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import msgspec
import structlog

import tether
from tether.actors.session import SessionEvent, TaskEnded, TaskStarted, UserSaid

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import git_revision  # noqa: E402 - the house helpers, beside this script

DATA_DIR = HERE / "_data"
ASK_TIMEOUT = 300.0  # a timeout here means a hang, not a slow run

LOG_COUNTS: Counter[str] = Counter()


def _count_log(_logger: Any, method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    LOG_COUNTS[f"{method}:{event_dict.get('event')}"] += 1
    return event_dict


class _CountRecords(logging.Handler):
    """Counts the standard library's log records: asyncio's own ("Exception in callback",
    "Task exception was never retrieved") and the libraries' never reach structlog."""

    def emit(self, record: logging.LogRecord) -> None:
        LOG_COUNTS[f"logging:{record.name}:{record.levelname}"] += 1


def configure_logging() -> None:
    """Count (and show) the runtime's warnings and errors, Python's warnings (a coroutine
    never awaited) and the standard library's log records; drop tether's info lines. Only when
    run as a script: the tests import this module and must keep their own logging setup."""
    show = warnings.showwarning

    def count_warning(message: Any, category: type[Warning], *args: Any, **kw: Any) -> None:
        LOG_COUNTS[f"python:{category.__name__}"] += 1
        show(message, category, *args, **kw)

    warnings.showwarning = count_warning
    logging.getLogger().addHandler(_CountRecords(logging.WARNING))
    structlog.configure(
        processors=[_count_log, structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
    )


# ----------------------------------------------------------------------------- sizes


@dataclass(frozen=True)
class Sizes:
    sessions: int
    per_session: int  # user messages asked of each session
    senders: int  # concurrent senders (and concurrent spawns)
    passivate_after: float
    sample: int  # sessions in the tracemalloc sample (0: no sample)
    sample_idle: float  # passivate_after of the sample's runtime (the sample must fit in it)

    @property
    def messages(self) -> int:
        return self.sessions * self.per_session


FULL = Sizes(
    sessions=10_000, per_session=10, senders=256, passivate_after=2.0, sample=500, sample_idle=8.0
)
QUICK = Sizes(
    sessions=500, per_session=10, senders=64, passivate_after=1.0, sample=100, sample_idle=4.0
)


# ----------------------------------------------------------------------------- the agent


@tether.tool(recovery="retry", breaker="database")
async def echo(text: str) -> str:
    """The trivial tool: answers at once."""
    return f"ok:{text}"


class EchoModel:
    """A model that calls ``echo`` with the task's text, then answers with its result.

    Decided from the request alone (a session's decisions alternate: even = the call, odd =
    the answer), and it keeps nothing: ``tether.testing.ScriptedModel`` records every request,
    which a load run must not (see the findings in the module's report)."""

    async def decide(self, request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
        if request.decisions % 2 == 0:
            text = next(m.text for m in reversed(request.bundle.history) if _is_user(m))
            return tether.ToolCall(tool="echo", args={"text": text})
        last = request.bundle.history[-1]
        return tether.FinalAnswer(text=f"answer:{getattr(last, 'result', None)}")


def _is_user(fragment: Any) -> bool:
    return getattr(fragment, "role", None) == "user"


class LoadSession(tether.AgentSession):
    tools = (echo,)
    model = EchoModel()


def session_id(i: int) -> str:
    return f"s{i:05d}"


def user_text(i: int, r: int) -> str:
    return f"m{i}.{r}"


def expected_answer(i: int, r: int) -> str:
    return f"answer:ok:{user_text(i, r)}"


# ----------------------------------------------------------------------------- measuring


def proc_status() -> dict[str, int]:
    """VmRSS and VmHWM of this process, in kB (0 where /proc is missing)."""
    out = {"VmRSS": 0, "VmHWM": 0}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in out:
                out[key] = int(rest.split()[0])
    return out


def is_guard(actor_id: str) -> bool:
    return actor_id.endswith("/loops")


@dataclass
class Sampler:
    """Samples RSS and the active cells of ``rt`` in the background."""

    rt: tether.Runtime
    t0: float
    interval: float = 0.2
    samples: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    phase_marks: dict[str, float] = field(default_factory=dict)

    def take(self) -> tuple[float, int, int, int, int]:
        st = proc_status()
        cells = list(self.rt.cells)
        guards = sum(1 for a in cells if is_guard(a))
        sessions = sum(1 for a in cells if a.startswith("s") and not is_guard(a))
        row = (round(time.perf_counter() - self.t0, 3), st["VmRSS"], st["VmHWM"], sessions, guards)
        self.samples.append(row)
        return row

    async def run(self) -> None:
        while True:
            self.take()
            await anyio.sleep(self.interval)

    def mark(self, name: str) -> None:
        self.phase_marks[name] = round(time.perf_counter() - self.t0, 3)

    def between(self, start: str, end: str) -> list[tuple[float, int, int, int, int]]:
        a, b = self.phase_marks[start], self.phase_marks[end]
        return [s for s in self.samples if a <= s[0] <= b]


def runtime_books(rt: tether.Runtime) -> dict[str, int]:
    """The sizes of the runtime's per-actor bookkeeping (what could outlive passivation)."""
    sup = rt.supervision
    guards_sup = rt.cells.get("tether.guards")
    entries = getattr(getattr(guards_sup, "instance", None), "child_entries", None)
    return {
        # the guards' supervisor never passivates: its child list is resident
        "tether.guards children": len(entries()) if callable(entries) else -1,
        "cells": len(rt.cells),
        "registry.known": len(rt.registry.known),
        "guards._locks": len(rt.guards._locks),
        "claimed": len(rt.claimed),
        "replies": len(rt.replies),
        "activation.activating": len(rt.activation.activating),
        "activation.not_before": len(rt.activation.not_before),
        "activation.failures": len(rt.activation.failures),
        "_timers": len(rt.scheduler),
        "supervision.held": len(sup.held),
        "supervision.failures": len(sup.failures),
        "supervision.root_restarts": len(sup.root_restarts),
    }


async def wait_passivated(rt: tether.Runtime, limit: float) -> float:
    """Seconds until no session and no loop guard is active (at most ``limit``)."""
    t0 = time.perf_counter()
    with anyio.move_on_after(limit):
        while any(a.startswith("s") for a in rt.cells):  # noqa: ASYNC110 - polling a dict
            await anyio.sleep(0.05)
    return time.perf_counter() - t0


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q * len(ys)))]


# ----------------------------------------------------------------------------- the run


class Failed(Exception):
    """A check failed: something was lost, duplicated, or did not settle."""


async def spawn_all(rt: tether.Runtime, ids: list[int], senders: int) -> None:
    it = iter(ids)

    async def spawner() -> None:
        for i in it:
            await rt.spawn(LoadSession, session_id(i), goal="echo what the user says")

    async with anyio.create_task_group() as tg:
        for _ in range(senders):
            tg.start_soon(spawner)


async def ask_rounds(
    rt: tether.Runtime,
    owned: list[list[int]],
    rounds: range,
    answers: dict[tuple[int, int], int],
    latencies: list[float],
) -> list[str]:
    """Each sender asks its sessions one message per round; wrong answers are returned."""
    wrong: list[str] = []

    async def sender(mine: list[int]) -> None:
        for r in rounds:
            for i in mine:
                t = time.perf_counter()
                got = await rt.ref(session_id(i)).ask(
                    tether.UserMessage(user_text(i, r)), timeout=ASK_TIMEOUT
                )
                latencies.append(time.perf_counter() - t)
                answers[(i, r)] = answers.get((i, r), 0) + 1
                if got.answer != expected_answer(i, r):
                    wrong.append(f"{session_id(i)} round {r}: {got!r}")

    async with anyio.create_task_group() as tg:
        for mine in owned:
            tg.start_soon(sender, mine)
    return wrong


async def run_load(sizes: Sizes, db: Path) -> dict[str, Any]:
    """Phases 1-3 and 4 (see the module docstring); returns the figures and the raw series."""
    n, per, s = sizes.sessions, sizes.per_session, sizes.senders
    out: dict[str, Any] = {"sizes": asdict(sizes)}
    answers: dict[tuple[int, int], int] = {}
    latencies: list[float] = []
    gc.collect()
    rss_start = proc_status()["VmRSS"]
    async with tether.Runtime(db, passivate_after=sizes.passivate_after) as rt:
        t0 = time.perf_counter()
        sampler = Sampler(rt, t0)
        async with anyio.create_task_group() as bg:
            bg.start_soon(sampler.run)

            # 1. spawn
            sampler.mark("spawn")
            await spawn_all(rt, list(range(n)), s)
            sampler.mark("spawned")
            t_spawn = sampler.phase_marks["spawned"] - sampler.phase_marks["spawn"]

            # 2. load
            owned = [list(range(k, n, s)) for k in range(min(s, n))]
            stats0 = rt.stats()
            sampler.mark("load")
            wrong = await ask_rounds(rt, owned, range(per), answers, latencies)
            sampler.mark("loaded")
            stats1 = rt.stats()
            t_load = sampler.phase_marks["loaded"] - sampler.phase_marks["load"]
            sampler.take()

            # 3. drain
            drain = await wait_passivated(rt, sizes.passivate_after * 4 + 30)
            gc.collect()
            await anyio.sleep(0.3)
            sampler.mark("drained")
            after = sampler.take()
            books = runtime_books(rt)
            dead = await rt.store.dead_letters()
            bg.cancel_scope.cancel()

    m = n * per
    load_rows = sampler.between("load", "loaded")
    peak_sessions = max((r[3] for r in sampler.samples), default=0)
    peak_guards = max((r[4] for r in sampler.samples), default=0)
    peak_rss = max(proc_status()["VmHWM"], max((r[1] for r in sampler.samples), default=0))
    out["phases"] = {
        "spawn": {"seconds": round(t_spawn, 3), "sessions_per_s": n / t_spawn},
        "load": {
            "seconds": round(t_load, 3),
            "messages": m,
            "messages_per_s": m / t_load,
            "steps_per_s": 3 * m / t_load,
            "effects_per_s": 3 * m / t_load,
            "commits": stats1["commits"] - stats0["commits"],
            "writes": stats1["writes"] - stats0["writes"],
            "ask_p50_ms": 1000 * percentile(latencies, 0.5),
            "ask_p90_ms": 1000 * percentile(latencies, 0.9),
            "ask_p99_ms": 1000 * percentile(latencies, 0.99),
            "ask_max_ms": 1000 * max(latencies, default=0.0),
            "active_sessions_median": statistics.median(r[3] for r in load_rows)
            if load_rows
            else 0,
        },
        "drain": {"seconds": round(drain, 3), "active_after": books["cells"]},
    }
    out["memory"] = {
        "rss_start_kb": rss_start,
        "peak_rss_kb": peak_rss,
        "rss_after_drain_kb": after[1],
        "peak_active_sessions": peak_sessions,
        "peak_active_guards": peak_guards,
        "rss_growth_per_peak_active_session_kb": (peak_rss - rss_start) / peak_sessions
        if peak_sessions
        else None,
    }
    out["books_after_drain"] = books
    out["series"] = {"columns": ["t", "rss_kb", "hwm_kb", "sessions", "guards"]}
    out["series"]["rows"] = sampler.samples
    out["marks"] = sampler.phase_marks

    problems: list[str] = [*wrong[:10]]
    if len(wrong) > 10:
        problems.append(f"... {len(wrong)} wrong answers in all")
    missing = [(i, r) for i in range(n) for r in range(per) if answers.get((i, r)) != 1]
    if missing:
        problems.append(f"{len(missing)} asks not answered exactly once, e.g. {missing[:5]}")
    if dead:
        problems.append(f"{len(dead)} dead letters, e.g. {dead[0]}")
    if sampler.samples[-1][3] or sampler.samples[-1][4]:
        problems.append(f"still active after the drain: {sampler.samples[-1]}")
    out["problems"] = problems
    return out


async def run_sample(sizes: Sizes, db: Path) -> dict[str, Any]:
    """Phase 4: a new runtime on the same file; ``sizes.sample`` sessions get one more message
    each. The Python heap (tracemalloc) with all of them active, then after they passivated."""
    k, per = sizes.sample, sizes.per_session
    ids = list(range(0, sizes.sessions, max(1, sizes.sessions // k)))[:k]
    out: dict[str, Any] = {"sessions": len(ids), "passivate_after": sizes.sample_idle}
    answers: dict[tuple[int, int], int] = {}
    async with tether.Runtime(db, passivate_after=sizes.sample_idle) as rt:
        gc.collect()
        tracemalloc.start(1)
        try:
            base = tracemalloc.take_snapshot()
            cur0, _ = tracemalloc.get_traced_memory()
            rss0 = proc_status()["VmRSS"]
            books0 = runtime_books(rt)
            t = time.perf_counter()
            owned = [ids[j :: sizes.senders] for j in range(min(sizes.senders, len(ids)))]
            wrong = await ask_rounds(rt, owned, range(per, per + 1), answers, [])
            took = time.perf_counter() - t
            gc.collect()
            cur1, _ = tracemalloc.get_traced_memory()
            rss1 = proc_status()["VmRSS"]
            active = [a for a in rt.cells if a.startswith("s")]
            sessions_active = sum(1 for a in active if not is_guard(a))
            guards_active = len(active) - sessions_active
            snap_active = tracemalloc.take_snapshot()
            books1 = runtime_books(rt)
            drain = await wait_passivated(rt, sizes.sample_idle * 4 + 30)
            gc.collect()
            await anyio.sleep(0.3)
            gc.collect()
            cur2, _ = tracemalloc.get_traced_memory()
            rss2 = proc_status()["VmRSS"]
            snap_after = tracemalloc.take_snapshot()
            books2 = runtime_books(rt)
        finally:
            tracemalloc.stop()
    problems = list(wrong)
    notes = []
    if sessions_active != len(ids):  # the figure is then per active session, not a failure
        notes.append(
            f"only {sessions_active} of {len(ids)} sample sessions were active when measured "
            f"(the sample took {took:.1f} s, passivate_after={sizes.sample_idle})"
        )
    missing = [key for key in ((i, per) for i in ids) if answers.get(key) != 1]
    if missing:
        problems.append(f"{len(missing)} sample asks not answered exactly once")
    out.update(
        seconds=round(took, 3),
        drain_seconds=round(drain, 3),
        sessions_active=sessions_active,
        guards_active=guards_active,
        heap_active_per_session=(cur1 - cur0) / max(1, sessions_active),
        heap_retained_per_session=(cur2 - cur0) / max(1, len(ids)),
        rss_active_per_session=1024 * (rss1 - rss0) / max(1, sessions_active),
        rss_kb=(rss0, rss1, rss2),
        books_before=books0,
        books_active=books1,
        books_after=books2,
        top_active=_top(snap_active, base, len(ids)),
        top_retained=_top(snap_after, base, len(ids)),
        problems=problems,
        notes=notes,
    )
    out["ids"] = ids
    return out


def _top(snap: tracemalloc.Snapshot, base: tracemalloc.Snapshot, per: int) -> list[str]:
    """The largest growths since ``base`` by allocation site, in bytes per sample session."""
    here = str(HERE.parent) + os.sep
    rows = []
    for st in snap.compare_to(base, "lineno")[:12]:
        if st.size_diff <= 0:
            continue
        frame = st.traceback[0]
        name = frame.filename.removeprefix(here)
        for marker in ("site-packages/", "python3.11/", "python3.12/", "python3.13/"):
            name = name.split(marker)[-1]
        rows.append(
            f"{st.size_diff / per:8.0f} B  {st.count_diff / per:6.1f} obj  {name}:{frame.lineno}"
        )
    return rows


# ----------------------------------------------------------------------------- offline check


_event_decoder = msgspec.msgpack.Decoder(SessionEvent)


def check_store(db: Path, sizes: Sizes, sampled: list[int]) -> dict[str, Any]:
    """Read the closed file: every session's journal, the ledger, replies, mailbox, dead
    letters. Returns the counts and the problems found."""
    n, per = sizes.sessions, sizes.per_session
    extra = set(sampled)
    tasks_sent = {i: per + (1 if i in extra else 0) for i in range(n)}
    total = sum(tasks_sent.values())
    problems: list[str] = []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
        counts = {
            "sessions": one(
                "SELECT COUNT(*) FROM actors WHERE actor_id GLOB 's[0-9]*' "
                "AND actor_id NOT LIKE '%/loops'"
            ),
            "loop_guards": one("SELECT COUNT(*) FROM actors WHERE actor_id LIKE '%/loops'"),
            "actors_not_active": one("SELECT COUNT(*) FROM actors WHERE status != 'active'"),
            "mailbox": one("SELECT COUNT(*) FROM mailbox"),
            "dead_letters": one("SELECT COUNT(*) FROM dead_letters"),
            "replies": one("SELECT COUNT(*) FROM replies WHERE actor_id GLOB 's[0-9]*'"),
            "journal_rows": one("SELECT COUNT(*) FROM journal"),
            "guard_journal_rows": one("SELECT COUNT(*) FROM journal WHERE actor_id LIKE '%/loops'"),
            "snapshots": one("SELECT COUNT(*) FROM snapshots"),
            "session_activations": one(
                "SELECT SUM(fence) FROM actors WHERE actor_id GLOB 's[0-9]*' "
                "AND actor_id NOT LIKE '%/loops'"
            ),
            "guard_activations": one("SELECT SUM(fence) FROM actors WHERE actor_id LIKE '%/loops'"),
            "db_bytes": db.stat().st_size,
        }
        ledger = {
            f"{tool}/{status}/attempt {attempts}": c
            for tool, status, attempts, c in con.execute(
                "SELECT tool, status, attempts, COUNT(*) FROM effects GROUP BY 1, 2, 3"
            )
        }
        counts["ledger"] = ledger
        want = {
            "sessions": n,
            "loop_guards": n,
            "actors_not_active": 0,
            "mailbox": 0,
            "dead_letters": 0,
            "replies": total,
            "guard_journal_rows": 0,
        }
        for key, value in want.items():
            if counts[key] != value:
                problems.append(f"{key}: {counts[key]}, expected {value}")
        want_ledger = {"model/done/attempt 1": 2 * total, "echo/done/attempt 1": total}
        if ledger != want_ledger:
            problems.append(f"ledger {ledger}, expected {want_ledger}")

        # Every session's journal: exactly the tasks sent, in order, each finished with its
        # own answer; no message joined a running task.
        started: dict[str, list[str]] = {}
        ended: dict[str, list[tuple[str, str]]] = {}
        joined = 0
        rows = con.execute(
            "SELECT actor_id, payload FROM journal WHERE actor_id GLOB 's[0-9]*' "
            "AND actor_id NOT LIKE '%/loops' ORDER BY actor_id, seq"
        )
        decode = _event_decoder.decode
        for actor_id, payload in rows:
            ev = decode(payload)
            if isinstance(ev, TaskStarted):
                started.setdefault(actor_id, []).append(ev.text)
            elif isinstance(ev, TaskEnded):
                ended.setdefault(actor_id, []).append((ev.outcome, ev.answer))
            elif isinstance(ev, UserSaid):
                joined += 1
        bad = 0
        for i, k in tasks_sent.items():
            sid = session_id(i)
            texts = [user_text(i, r) for r in range(k)]
            ends = [("finished", expected_answer(i, r)) for r in range(k)]
            if started.get(sid, []) != texts or ended.get(sid, []) != ends:
                bad += 1
                if bad <= 3:
                    problems.append(
                        f"{sid}: started {started.get(sid, [])[:3]}..., "
                        f"ended {ended.get(sid, [])[:3]}..., expected {k} tasks"
                    )
        if bad:
            problems.append(f"{bad} sessions whose journal is not exactly the tasks sent")
        if joined:
            problems.append(f"{joined} UserSaid events: a message joined a running task")
        counts["tasks_in_journals"] = sum(len(v) for v in ended.values())
    finally:
        con.close()
    return {"counts": counts, "problems": problems}


# ----------------------------------------------------------------------------- report


def kb(x: float) -> str:
    return f"{x / 1024:,.1f} MiB"


def fmt(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.1f}"


def table(res: dict[str, Any]) -> str:
    sz = res["sizes"]
    ph, mem, books = res["phases"], res["memory"], res["books_after_drain"]
    load = ph["load"]
    rows: list[tuple[str, str, str]] = [
        (
            "spawn",
            f"{fmt(ph['spawn']['sessions_per_s'])} sessions/s",
            f"{sz['sessions']:,} sessions in {ph['spawn']['seconds']:.1f} s",
        ),
        (
            "user messages (ask -> final answer)",
            f"**{fmt(load['messages_per_s'])} msg/s**",
            f"{load['messages']:,} in {load['seconds']:.1f} s, {sz['senders']} senders",
        ),
        ("handler steps", f"{fmt(load['steps_per_s'])} steps/s", "3 per message"),
        (
            "effects through the ledger",
            f"{fmt(load['effects_per_s'])} effects/s",
            "model, echo, model; each intent committed before the call",
        ),
        (
            "group commits",
            f"{fmt(load['commits'] / load['seconds'])} commits/s",
            f"{load['writes'] / max(1, load['commits']):.1f} writes per commit",
        ),
        (
            "ask latency",
            f"p50 {load['ask_p50_ms']:.0f} ms / p99 {load['ask_p99_ms']:.0f} ms",
            f"max {load['ask_max_ms']:.0f} ms",
        ),
        (
            "activations (sessions / loop guards)",
            f"{res['check']['counts']['session_activations']:,} / "
            f"{res['check']['counts']['guard_activations']:,}",
            f"passivate_after={sz['passivate_after']:g} s: most messages reactivate their session",
        ),
        (
            "active sessions (peak / median in load)",
            f"{mem['peak_active_sessions']:,} / {load['active_sessions_median']:,.0f}",
            f"of {sz['sessions']:,}; loop guards peak {mem['peak_active_guards']:,}",
        ),
        ("peak RSS", f"**{kb(mem['peak_rss_kb'])}**", f"VmHWM; {kb(mem['rss_start_kb'])} at start"),
        (
            "RSS after drain",
            kb(mem["rss_after_drain_kb"]),
            f"all passivated in {ph['drain']['seconds']:.1f} s; {books['cells']} cells left",
        ),
        (
            "RSS growth / peak active session",
            f"{mem['rss_growth_per_peak_active_session_kb']:.1f} kB",
            "(peak RSS - start RSS) / peak active sessions: an upper bound",
        ),
    ]
    smp = res.get("sample")
    if smp:
        rows += [
            (
                "heap per active session (tracemalloc)",
                f"**{smp['heap_active_per_session'] / 1024:.1f} kB**",
                f"{smp['sessions_active']} sessions + {smp['guards_active']} loop guards active, "
                f"{sz['per_session'] + 1} tasks of history each",
            ),
            (
                "heap retained per passivated actor pair",
                f"{smp['heap_retained_per_session']:.0f} B",
                "session + loop guard, after both passivated (fresh runtime)",
            ),
        ]
    chk = res["check"]["counts"]
    rows.append(
        (
            "nothing lost",
            "**PASS**" if not res["problems"] else "**FAIL**",
            f"{chk['tasks_in_journals']:,} tasks journaled and answered, "
            f"{sum(chk['ledger'].values()):,} ledger rows, mailbox {chk['mailbox']}, "
            f"dead letters {chk['dead_letters']}",
        ),
    )
    lines = ["| figure | value | note |", "|---|---:|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main


async def run_all(sizes: Sizes, db: Path) -> dict[str, Any]:
    res = await run_load(sizes, db)
    sampled: list[int] = []
    if sizes.sample:
        res["sample"] = await run_sample(sizes, db)
        sampled = res["sample"]["ids"]
        res["problems"] += [f"sample: {p}" for p in res["sample"]["problems"]]
    res["check"] = check_store(db, sizes, sampled)
    res["problems"] += res["check"]["problems"]
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="tether load: many sessions, bounded memory.")
    p.add_argument("--quick", action="store_true", help="500 sessions x 10 messages (CI)")
    p.add_argument("--json", metavar="PATH", help="also write the figures and time series")
    p.add_argument("--sessions", type=int)
    p.add_argument("--per-session", type=int)
    p.add_argument("--senders", type=int)
    p.add_argument("--passivate-after", type=float)
    p.add_argument("--sample", type=int, help="sessions in the tracemalloc sample (0: none)")
    args = p.parse_args(argv)
    configure_logging()
    sizes = QUICK if args.quick else FULL
    for name in ("sessions", "per_session", "senders", "passivate_after", "sample"):
        value = getattr(args, name)
        if value is not None:
            sizes = replace(sizes, **{name: value})
    meta = {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "git": git_revision(),
        "command": " ".join([".venv/bin/python", "benchmarks/load.py", *sys.argv[1:]]),
    }
    print(
        f"tether load: {sizes.sessions:,} sessions x {sizes.per_session} messages, "
        f"{sizes.senders} senders, passivate_after={sizes.passivate_after:g} s. "
        f"Python {meta['python']}, SQLite {meta['sqlite']}, {meta['cpus']} CPUs",
        flush=True,
    )
    DATA_DIR.mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="load-", dir=DATA_DIR))
    t0 = time.perf_counter()
    try:
        res = asyncio.run(run_all(sizes, scratch / "load.db"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        with contextlib.suppress(OSError):  # not empty: another benchmark is using it
            DATA_DIR.rmdir()
    wall = time.perf_counter() - t0
    res["meta"] = {**meta, "wall_seconds": round(wall, 1)}
    res["log_counts"] = dict(LOG_COUNTS)
    print()
    print(f"`{meta['command']}` ({wall:.0f} s wall, git {meta['git']})")
    print()
    print(table(res))
    smp = res.get("sample")
    if smp:
        print("\nheap per active sample session, by allocation site (bytes, objects):")
        print("\n".join("    " + r for r in smp["top_active"][:10]))
        print("heap retained per sample session after passivation:")
        print("\n".join("    " + r for r in smp["top_retained"][:6]) or "    (none)")
        print(f"runtime bookkeeping, fresh runtime, after the sample: {smp['books_after']}")
        for note in smp["notes"]:
            print(f"note: {note}")
    print(f"runtime bookkeeping after the load's drain: {res['books_after_drain']}")
    load = res["phases"]["load"]
    print(
        f"ask latency: p50 {load['ask_p50_ms']:.0f} ms, p90 {load['ask_p90_ms']:.0f} ms, "
        f"p99 {load['ask_p99_ms']:.0f} ms, max {load['ask_max_ms']:.0f} ms"
    )
    warnings = sum(LOG_COUNTS.values())
    print(
        f"log lines at warning or above: {warnings}" + (f" {dict(LOG_COUNTS)}" if warnings else "")
    )
    if warnings:  # normal operation logs nothing at warning or above
        res["problems"].append(f"{warnings} log lines at warning or above")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str) + "\n")
        print(f"raw results: {args.json}")
    if res["problems"]:
        print("FAILED:\n  " + "\n  ".join(res["problems"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Run as the module ``load``, not as ``__main__``: the sessions are stored under their
    # class's import path, which another process (``tether check``, ``tether show``) must be
    # able to import, and tether warns of one in ``__main__`` (MainModuleWarning), a warning
    # this run counts as a failure.
    import load

    sys.exit(load.main())
