"""The world chaos run (issue #7): a workload of agent sessions and plain actors, a killer that
SIGKILLs the runtime process K times (restarting it each time), and a checker that looks at the
world (the payments services' own files, the acknowledgement logs, the decisions a person made)
rather than at the runtime's own account.

:func:`run_world` is the driver; :func:`check_world` the checker; :class:`Figures` what they
report (``Figures.table()``; ``Figures.failures()`` lists every must-be-zero figure that is
not). The child programs are in ``tests/chaos/world_programs.py``; the CI version is
``tests/chaos/test_world.py`` and the large run ``scripts/chaos.py``.

The processes of one world, all on one tether store (``WorldSpec.db``: a URL, by default an
SQLite file in the world's directory; ``postgresql://…`` runs the same world on PostgreSQL):

* two fake payments services (``tether.testing.payments``): ``keyed`` honors idempotency keys
  (``refund_keyed``, ``big_refund``), ``loose`` ignores them (``charge_once``, the
  non-idempotent ``recovery="quarantine"`` tool);
* the runtimes (``world_programs runtime``), ``WorldSpec.runtimes`` processes serving the same
  sessions at once, the only processes that run actors: K times one of them is SIGKILLed and
  restarted (``_Killer`` says which);
* the client (``Runtime(serve=False)``) sending tasks and messages with dedup keys, logging each
  acknowledged send; the runtime's own feeders do the same from inside the killed process;
* the decider (``Runtime(serve=False)``): a person deciding approvals and resolving quarantined
  effects (after looking in the ``loose`` service's file), logging each decision it got an OK
  for.

The killer picks, with a seeded RNG (the seed is printed and reproduces the schedule, if not the
exact interleaving), one mode per incarnation of the runtime:

* ``startup``: within 0.5 s of the process start (the store opening, dead runtimes reaped);
* ``recovery``: within 0.25 s of "ready": actors activating, journals replayed, parked steps and
  ambiguous effects found again;
* ``load``: 0.25 s to 1.5 s after "ready", under the feeders' and the client's load;
* ``approval``: as soon as an approval request is pending (steps parked on a person);
* ``commit``: the store itself SIGKILLs the process right before or right after applying the
  N-th batch holding steps or effect writes: inside a group commit, exactly.

After the K-th kill: the senders stop, the runtimes (the last victim restarted) run until the
mailbox is empty (every message processed, no step parked on an approval or a quarantined
effect), the decider and the runtimes exit cleanly, and the world is checked.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import typing
from collections import Counter as Tally
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

import tether
from tests.chaos import world_programs as wp
from tests.chaos.harness import ROOT, Child, Children
from tests.chaos.store_probe import StoreProbe
from tether.actors.actor import actor_spec
from tether.actors.session import TaskEnded, TaskStarted, ToolResult, UserSaid
from tether.store.open import scheme_of
from tether.testing import check_store
from tether.testing.payments import PaymentsService, refunds

READY_TIMEOUT = 30.0
EXIT_TIMEOUT = 30.0
MODES = ("startup", "recovery", "load", "approval", "commit")
WEIGHTS = (0.10, 0.30, 0.30, 0.15, 0.15)


class WorldChild(Child):
    """A :class:`Child` running ``python -m tests.chaos.world_programs``."""

    def __init__(self, directory: Path, name: str, program: str, *args: object) -> None:
        self.name = name
        self.out = directory / f"{name}.out"
        self.err = directory / f"{name}.err"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, "-m", "tests.chaos.world_programs", program, *map(str, args)]
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                argv, cwd=ROOT, stdout=out, stderr=err, env=env, stdin=subprocess.DEVNULL
            )
        self.pid = self.proc.pid

    def describe(self) -> str:
        err = self.err.read_text(errors="replace")
        lines = [x for x in err.splitlines() if '"level": "debug"' not in x]
        return (
            f"--- {self.name} (pid {self.pid}, returncode {self.proc.returncode})\n"
            f"stdout:\n{self.out.read_text()[-2000:]}\nstderr (tail):\n" + "\n".join(lines[-40:])
        )


class WorldChildren(Children):
    def start(self, name: str, scenario: str, *args: object) -> Child:
        n = self._names[name] = self._names.get(name, 0) + 1
        child = WorldChild(self.directory, f"{name}-{n}", scenario, *args)
        self.started.append(child)
        return child

    def describe_last(self, k: int = 4) -> str:
        return "\n".join(c.describe() for c in self.started[-k:])


class WorldSpec(msgspec.Struct, kw_only=True):
    kills: int = 20
    sessions: int = 4
    counters: int = 3
    sinks: int = 2
    tasks: int = 2
    seed: int = 0
    # the payments services hold each answer this long after recording the call: a kill in
    # that window leaves a call made and not reported back (the ambiguous case)
    service_delay: float = 0.05
    interject: bool = False  # see WorldConfig.interject
    quiesce_timeout: float = 120.0
    runtimes: int = 1  # runtime processes serving the store at once (one killed per round)
    db: str | None = None  # the store's URL; None: an SQLite file in the world's directory


class Kill(msgspec.Struct, kw_only=True):
    incarnation: int
    slot: int  # which of the runtime processes
    pid: int
    mode: str
    by: str  # "killer" or "commit" (the store killed its own process mid-commit)
    after: float  # seconds since the process started
    pending_approvals: int
    effects_in_flight: int  # ledger rows with an intent and no receipt
    mailbox: int


class Figures(msgspec.Struct, kw_only=True):
    seed: int = 0
    store: str = "sqlite"  # the scheme of the store's URL
    runtimes: int = 1
    wall_seconds: float = 0.0
    kills: int = 0
    kills_by_mode: dict[str, int] = {}
    kills_by_slot: list[int] = []  # kills of each runtime process slot
    commit_kills: int = 0
    kills_with_pending_approvals: int = 0
    kills_with_effects_in_flight: int = 0
    # effects through the key-honoring service
    keyed_effects_checked: int = 0
    keyed_duplicates: int = 0
    keyed_ambiguous_retried: int = 0
    # the non-idempotent tool
    charges_checked: int = 0
    charges_run_twice: int = 0
    charges_missing: int = 0
    ambiguous: int = 0
    ambiguous_quarantined_listed: int = 0
    ambiguous_not_listed: int = 0
    quarantined_left: int = 0
    # messages
    messages_checked: int = 0
    messages_resent_same_key: int = 0
    messages_lost: int = 0
    messages_applied_twice: int = 0
    forwards_checked: int = 0
    forwards_lost: int = 0
    forwards_twice: int = 0
    tasks_acked: int = 0
    tasks_lost: int = 0
    tasks_applied_twice: int = 0
    dead_letters: int = 0
    # approvals
    approvals_checked: int = 0
    approvals_approved: int = 0
    approvals_rejected: int = 0
    approvals_lost: int = 0
    approvals_pending: int = 0
    # sessions
    sessions: int = 0
    tasks_finished: int = 0
    tasks_stopped: int = 0
    tasks_unfinished: int = 0
    # the store's own integrity (tether check): its violations, each one in ``problems``
    store_violations: int = 0
    problems: list[str] = []

    MUST_BE_ZERO: typing.ClassVar[tuple[str, ...]] = (
        "keyed_duplicates",
        "charges_run_twice",
        "charges_missing",
        "ambiguous_not_listed",
        "quarantined_left",
        "messages_lost",
        "messages_applied_twice",
        "forwards_lost",
        "forwards_twice",
        "tasks_lost",
        "tasks_applied_twice",
        "dead_letters",
        "approvals_lost",
        "approvals_pending",
        "tasks_unfinished",
        "store_violations",
    )

    def failures(self) -> list[str]:
        bad = [f"{name}={getattr(self, name)}" for name in self.MUST_BE_ZERO if getattr(self, name)]
        return bad + self.problems

    def table(self) -> str:
        modes = ", ".join(f"{m} {self.kills_by_mode.get(m, 0)}" for m in MODES)
        rows = [
            ("seed", str(self.seed)),
            ("store", self.store),
            ("runtime processes serving it at once", str(self.runtimes)),
            ("wall time", f"{self.wall_seconds:.0f} s"),
            ("kills survived (SIGKILL + restart)", str(self.kills)),
            ("  by mode", modes),
            ("  by runtime slot", " / ".join(map(str, self.kills_by_slot))),
            ("  inside a group commit (store-triggered)", str(self.commit_kills)),
            ("  with approvals pending", str(self.kills_with_pending_approvals)),
            (
                "  with effects in flight (intent, no receipt)",
                str(self.kills_with_effects_in_flight),
            ),
            ("effects checked, key-honoring service", str(self.keyed_effects_checked)),
            ("  duplicates (must be 0)", str(self.keyed_duplicates)),
            ("  ambiguous, retried with the same key", str(self.keyed_ambiguous_retried)),
            ("non-idempotent effects checked", str(self.charges_checked)),
            ("  run twice (must be 0)", str(self.charges_run_twice)),
            ("  finished task without its charge (must be 0)", str(self.charges_missing)),
            ("  ambiguous", str(self.ambiguous)),
            ("  ambiguous, quarantined and listed", str(self.ambiguous_quarantined_listed)),
            ("  ambiguous, not listed (must be 0)", str(self.ambiguous_not_listed)),
            ("  still quarantined at the end (must be 0)", str(self.quarantined_left)),
            ("acknowledged messages checked", str(self.messages_checked)),
            ("  re-sent with the same dedup key", str(self.messages_resent_same_key)),
            ("  lost (must be 0)", str(self.messages_lost)),
            ("  applied twice (must be 0)", str(self.messages_applied_twice)),
            ("actor-to-actor forwards checked", str(self.forwards_checked)),
            ("  lost / twice (must be 0)", f"{self.forwards_lost} / {self.forwards_twice}"),
            ("acknowledged user messages checked", str(self.tasks_acked)),
            ("  lost / twice (must be 0)", f"{self.tasks_lost} / {self.tasks_applied_twice}"),
            ("dead letters (must be 0)", str(self.dead_letters)),
            ("approvals checked", str(self.approvals_checked)),
            (
                "  approved / rejected",
                f"{self.approvals_approved} / {self.approvals_rejected}",
            ),
            ("  lost (must be 0)", str(self.approvals_lost)),
            ("  still pending (must be 0)", str(self.approvals_pending)),
            ("sessions", str(self.sessions)),
            ("  tasks finished / stopped", f"{self.tasks_finished} / {self.tasks_stopped}"),
            ("  tasks unfinished (must be 0)", str(self.tasks_unfinished)),
            ("tether check: store violations (must be 0)", str(self.store_violations)),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"| {'figure'.ljust(width)} | value |", f"|{'-' * (width + 2)}|-------|"]
        lines += [f"| {k.ljust(width)} | {v} |" for k, v in rows]
        if self.problems:
            lines.append(f"problems ({len(self.problems)}):")
            lines += [f"  - {p}" for p in self.problems[:50]]
        return "\n".join(lines)


def _wait(predicate: Callable[[], bool], timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


# -- the driver -----------------------------------------------------------------------------


def run_world(workdir: Path, spec: WorldSpec, *, say: Callable[[str], None] = print) -> Figures:
    """Run one world in ``workdir`` and check it; raises AssertionError only when the run
    itself cannot go on (a child crashed, a wait timed out). The world's verdict is in the
    returned figures (``failures()``)."""
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    url = spec.db or str(workdir / "agents.db")
    say(
        f"world: seed={spec.seed} kills={spec.kills} sessions={spec.sessions} "
        f"runtimes={spec.runtimes} store={scheme_of(url)} dir={workdir}"
    )
    children = WorldChildren(workdir)
    with contextlib.ExitStack() as stack:
        delay = spec.service_delay
        keyed = stack.enter_context(PaymentsService.start(workdir / "keyed.db", delay=delay))
        loose = stack.enter_context(
            PaymentsService.start(workdir / "loose.db", honor_keys=False, delay=delay)
        )
        stack.callback(children.close)
        cfg = wp.WorldConfig(
            db=url,
            keyed_url=keyed.url,
            keyed_db=str(keyed.db_path),
            loose_url=loose.url,
            loose_db=str(loose.db_path),
            seed=spec.seed,
            sessions=spec.sessions,
            counters=spec.counters,
            sinks=spec.sinks,
            tasks=spec.tasks,
            interject=spec.interject,
            runtimes=spec.runtimes,
        )
        (workdir / "config.json").write_bytes(msgspec.json.encode(cfg))
        setup = children.start("setup", "setup", workdir)
        if setup.wait(60) != 0:
            raise AssertionError(f"setup failed\n{setup.describe()}")
        probe = stack.enter_context(StoreProbe.open(url))
        killer = _Killer(workdir, spec, children, probe, say, started)
        killer.run()
    figures = check_world(workdir, killer.kills, killer.killed_pids)
    figures.seed = spec.seed
    figures.runtimes = spec.runtimes
    figures.kills_by_slot = [sum(k.slot == i for k in killer.kills) for i in range(spec.runtimes)]
    figures.store = scheme_of(url)
    figures.wall_seconds = time.monotonic() - started
    return figures


class _Killer:
    """The kill schedule of one world: ``spec.runtimes`` runtime processes serve the store
    (slots); each round SIGKILLs one and restarts it.

    The mode of the next round is drawn before the restart, because three modes need a young
    process: ``startup``, ``recovery`` and ``commit`` (armed when it starts) kill the process
    just restarted; ``load`` and ``approval`` kill a slot drawn at random. With one slot this
    is the single-runtime schedule: start, wait as the mode says, kill."""

    def __init__(
        self,
        workdir: Path,
        spec: WorldSpec,
        children: WorldChildren,
        probe: StoreProbe,
        say: Callable[[str], None],
        started: float,
    ) -> None:
        self.workdir, self.spec, self.children, self.probe = workdir, spec, children, probe
        self.say, self.started = say, started
        self.rng = random.Random(spec.seed)
        self.kills: list[Kill] = []
        self.killed_pids: set[int] = set()
        self.slots: list[Child] = []
        self.born: list[float] = []  # when each slot's process started (monotonic)
        self.incarnation = 0

    def _draw(self) -> tuple[str, str]:
        mode = self.rng.choices(MODES, WEIGHTS)[0]
        arm = "none"
        if mode == "commit":
            arm = f"{self.rng.choice(('before', 'after'))}:{self.rng.randint(1, 40)}"
        return mode, arm

    def _start(self, slot: int, arm: str) -> None:
        self.incarnation += 1
        child = self.children.start("runtime", "runtime", self.workdir, self.incarnation, arm)
        if slot == len(self.slots):
            self.slots.append(child)
            self.born.append(time.monotonic())
        else:
            self.slots[slot], self.born[slot] = child, time.monotonic()

    def run(self) -> None:
        spec, rng, workdir = self.spec, self.rng, self.workdir
        self.decider = self.children.start("decider", "decider", workdir)
        self.client = self.children.start("client", "client", workdir)
        self.client.wait_report("tasks sent", READY_TIMEOUT)
        for slot in range(spec.runtimes - 1):  # the others serve from the start
            self._start(slot, "none")
        mode, arm = self._draw()
        young = spec.runtimes - 1
        self._start(young, arm)
        while len(self.kills) < spec.kills:
            self._others_alive()
            victim = young if mode in ("startup", "recovery", "commit") else None
            victim = rng.randrange(spec.runtimes) if victim is None else victim
            self._kill(victim, mode)
            if len(self.kills) % 25 == 0:
                self.say(f"  {len(self.kills)} kills, {time.monotonic() - self.started:.0f} s")
            if len(self.kills) < spec.kills:
                mode, arm = self._draw()
            else:
                arm = "none"  # the last restart serves to the end
            young = victim
            self._start(young, arm)
        self._finish()

    def _others_alive(self) -> None:
        for c in (self.decider, self.client):
            if not c.alive():
                raise AssertionError(f"{c.name} exited during the run\n{c.describe()}")

    def _kill(self, slot: int, mode: str) -> None:
        rng, probe = self.rng, self.probe
        rt, born = self.slots[slot], self.born[slot]
        by = "killer"
        if mode == "startup":
            time.sleep(max(0.0, born + rng.uniform(0.02, 0.5) - time.monotonic()))
        else:
            rt.wait_report("ready", READY_TIMEOUT)
            if mode == "recovery":
                time.sleep(rng.uniform(0.0, 0.25))
            elif mode == "load":
                time.sleep(rng.uniform(0.25, 1.5))
            elif mode == "approval":

                def held_or_dead() -> bool:
                    return probe.pending_approvals() > 0 or not rt.alive()

                _wait(held_or_dead, 3.0)
                time.sleep(rng.uniform(0.0, 0.1))
            else:  # commit: the store kills its own process

                def dead() -> bool:
                    return not rt.alive()

                _wait(dead, 5.0)
        snapshot = (probe.pending_approvals(), probe.effects_in_flight(), probe.mailbox().messages)
        if rt.alive():
            rt.signal(signal.SIGKILL)
        code = rt.wait(EXIT_TIMEOUT)
        if code != -signal.SIGKILL:
            raise AssertionError(f"the runtime exited by itself ({code})\n{rt.describe()}")
        if mode == "commit" and any(
            c["pid"] == rt.pid for c in wp.read_lines(self.workdir / wp.COMMIT_KILLS)
        ):
            by = "commit"
        for other, child in enumerate(self.slots):
            if other != slot and not child.alive():
                raise AssertionError(f"a runtime died unkilled\n{child.describe()}")
        self.killed_pids.add(rt.pid)
        self.kills.append(
            Kill(
                incarnation=self.incarnation,
                slot=slot,
                pid=rt.pid,
                mode=mode if by == "commit" or mode != "commit" else "load",
                by=by,
                after=round(time.monotonic() - born, 3),
                pending_approvals=snapshot[0],
                effects_in_flight=snapshot[1],
                mailbox=snapshot[2],
            )
        )
        with (self.workdir / "kills.jsonl").open("a") as f:
            f.write(msgspec.json.encode(self.kills[-1]).decode() + "\n")

    def _finish(self) -> None:
        """Stop sending, let the runtimes run to quiescence, stop everyone cleanly."""
        spec, probe, workdir = self.spec, self.probe, self.workdir
        (workdir / wp.FEED_STOP).touch()
        for rt in self.slots:
            rt.wait_report("ready", READY_TIMEOUT)
        if self.client.wait(EXIT_TIMEOUT) != 0:
            raise AssertionError(f"the client failed\n{self.client.describe()}")
        quiet = stuck = 0
        last = ""

        def quiescent() -> bool:
            # Quiet: the mailbox stays empty for a second. Stuck: only parked messages are
            # left and nothing changes for 15 s (a step waits for something nobody will do):
            # the check then says what is wrong.
            nonlocal quiet, stuck, last
            if not all(rt.alive() for rt in self.slots) or not self.decider.alive():
                return True
            box = probe.mailbox()
            quiet = quiet + 1 if box.messages == 0 else 0
            moved = box.fingerprint != last
            stuck = stuck + 1 if box.messages and box.messages == box.parked and not moved else 0
            last = box.fingerprint
            return quiet >= 10 or stuck >= 150

        served = _wait(quiescent, spec.quiesce_timeout, step=0.1)
        if not served or not all(rt.alive() for rt in self.slots):
            raise AssertionError(
                f"no quiescence within {spec.quiesce_timeout} s: "
                f"mailbox={probe.mailbox().messages} "
                f"pending approvals={probe.pending_approvals()} "
                f"in flight={probe.effects_in_flight()}\n"
                f"{self.children.describe_last(spec.runtimes + 3)}\n{self.decider.describe()}"
            )
        (workdir / wp.DECIDER_STOP).touch()
        if self.decider.wait(EXIT_TIMEOUT) != 0:
            raise AssertionError(f"the decider failed\n{self.decider.describe()}")
        (workdir / wp.RUNTIME_EXIT).touch()
        for rt in self.slots:
            if rt.wait(EXIT_TIMEOUT) != 0:
                raise AssertionError(f"a last runtime did not exit cleanly\n{rt.describe()}")


# -- the checker ----------------------------------------------------------------------------


class _StoreView(msgspec.Struct):
    journals: dict[str, list[Any]]
    effects: list[Any]
    approvals: list[Any]
    dead_letters: int


async def _read_store(cfg: wp.WorldConfig) -> _StoreView:
    classes: dict[str, type[Any]] = {}
    classes.update({wp.session_id(i): wp.WorldAgent for i in range(cfg.sessions)})
    classes.update({wp.counter_id(i): wp.Counter for i in range(cfg.counters)})
    classes.update({wp.sink_id(i): wp.Sink for i in range(cfg.sinks)})
    journals: dict[str, list[Any]] = {}
    async with tether.Runtime(cfg.db, serve=False) as rt:
        for actor_id, cls in classes.items():
            types = actor_spec(cls).event_types
            decoder = msgspec.msgpack.Decoder(typing.Union[types])  # noqa: UP007
            events: list[Any] = []
            after = 0
            while True:
                rows = await rt.store.load_journal(actor_id, after, 5000)
                if not rows:
                    break
                events += [decoder.decode(r.payload) for r in rows]
                after = rows[-1].seq
            journals[actor_id] = events
        effects = await rt.store.find_effects()
        approvals = await rt.store.find_approvals()
        dead = len(await rt.store.dead_letters())
    return _StoreView(journals, effects, approvals, dead)


def check_world(workdir: Path, kills: list[Kill], killed_pids: set[int]) -> Figures:
    """Check the world of a finished run from its files. Every figure named in
    ``Figures.MUST_BE_ZERO`` must be 0; ``problems`` says which ids are at fault."""
    cfg = wp.load_config(workdir)
    view = anyio.run(_read_store, cfg)
    f = Figures(kills=len(kills), sessions=cfg.sessions)
    f.kills_by_mode = dict(Tally(k.mode for k in kills))
    f.commit_kills = sum(k.by == "commit" for k in kills)
    f.kills_with_pending_approvals = sum(k.pending_approvals > 0 for k in kills)
    f.kills_with_effects_in_flight = sum(k.effects_in_flight > 0 for k in kills)
    problems = f.problems = []

    keyed_rows = defaultdict(list)
    for r in refunds(cfg.keyed_db):
        keyed_rows[r["order_id"]].append(r)
    loose_rows = defaultdict(list)
    for r in refunds(cfg.loose_db):
        loose_rows[r["order_id"]].append(r)
    decisions = wp.read_lines(workdir / wp.DECISIONS)
    calls = wp.read_lines(workdir / wp.CALLS)

    # -- effects through the key-honoring service: one row per order, with the ledger's key
    ledger = {e.key: e for e in view.effects}
    by_tool: dict[str, list[Any]] = defaultdict(list)
    for e in view.effects:
        by_tool[e.tool].append(e)
    keyed = by_tool["refund_keyed"] + by_tool["big_refund"]
    f.keyed_effects_checked = len(keyed_rows)
    for order_id, rows in keyed_rows.items():
        if len(rows) > 1:
            f.keyed_duplicates += len(rows) - 1
            problems.append(f"{order_id}: {len(rows)} refunds in the key-honoring service")
    for e in keyed:
        args = msgspec.msgpack.decode(e.args)
        rows = keyed_rows.get(args["order_id"], [])
        if e.status == "done" and [r["idempotency_key"] for r in rows] != [e.key]:
            problems.append(f"{args['order_id']}: receipt {e.key} but service rows {rows}")
        if any("did not report back" in h for h in e.history):
            f.keyed_ambiguous_retried += 1

    # -- the non-idempotent tool: one row per (session, task) identity
    charges = by_tool["charge_once"]
    f.charges_checked = len(charges)
    for ident, rows in loose_rows.items():
        if len(rows) > 1:
            f.charges_run_twice += len(rows) - 1
            problems.append(f"{ident}: charged {len(rows)} times")
    for e in charges:
        ident = msgspec.msgpack.decode(e.args)["ident"]
        rows = loose_rows.get(ident, [])
        if e.status != "done" or len(rows) != 1:
            f.charges_missing += 1
            problems.append(f"{ident}: effect {e.status} with {len(rows)} charges")
        elif msgspec.msgpack.decode(e.result) != wp.charge_result(ident, rows[0]["refund_id"]):
            problems.append(f"{ident}: receipt {e.result!r} is not the service's {rows[0]}")
    # Ambiguous: what the runtime found without a receipt after a kill, and what the world
    # shows: a call entered by a process that was killed before the call returned.
    said = {e.key for e in charges if any("did not report back" in h for h in e.history)}
    returned = {(c["key"], c["pid"]) for c in calls if c["phase"] == "return"}
    cut = {
        c["key"]
        for c in calls
        if c["tool"] == "charge_once"
        and c["phase"] == "call"
        and c["pid"] in killed_pids
        and (c["key"], c["pid"]) not in returned
    }
    listed = {d["key"] for d in decisions if d["kind"] == "quarantine"}
    ambiguous = said | cut
    f.ambiguous = len(ambiguous)
    f.ambiguous_quarantined_listed = len(ambiguous & listed)
    f.ambiguous_not_listed = len(ambiguous - listed)
    for key in sorted(ambiguous - listed):
        rec = ledger.get(key)
        problems.append(f"ambiguous charge {key} never listed: {rec.history if rec else None}")
    f.quarantined_left = sum(e.status == "quarantined" for e in view.effects)

    # -- messages: every acknowledged one applied exactly once, every forward exactly once
    acks = wp.read_lines(workdir / wp.ACK_RUNTIME) + wp.read_lines(workdir / wp.ACK_CLIENT)
    acked = {a["mid"]: a["to"] for a in acks if a.get("kind", "bump") == "bump"}
    f.messages_resent_same_key = sum(1 for a in acks if a.get("again"))
    applied: dict[str, list[str]] = defaultdict(list)
    noted: Tally[str] = Tally()
    for i in range(cfg.counters):
        cid = wp.counter_id(i)
        for ev in view.journals[cid]:
            applied[ev.mid].append(cid)
    for i in range(cfg.sinks):
        for ev in view.journals[wp.sink_id(i)]:
            noted[ev.mid] += 1
    f.messages_checked = len(acked)
    for mid, to in acked.items():
        if not applied.get(mid):
            f.messages_lost += 1
            problems.append(f"message {mid} to {to} acknowledged, never applied")
        elif applied[mid] != [to]:
            problems.append(f"message {mid} to {to} applied at {applied[mid]}")
    for mid, where in applied.items():
        if len(where) > 1:
            f.messages_applied_twice += 1
            problems.append(f"message {mid} applied {len(where)} times")
        f.forwards_checked += 1
        if noted[mid] == 0:
            f.forwards_lost += 1
            problems.append(f"forward of {mid} lost")
        elif noted[mid] > 1:
            f.forwards_twice += 1
            problems.append(f"forward of {mid} noted {noted[mid]} times")
    problems.extend(
        f"forward of {mid} noted, its message never applied" for mid in set(noted) - set(applied)
    )

    # -- sessions: acknowledged user messages, tasks, their effects and approvals
    task_acks = {a["text"]: a["to"] for a in acks if a.get("kind") == "task"}
    f.tasks_acked = len(task_acks)
    approvals_by_order: dict[str, Any] = {}
    for rec in view.approvals:
        approvals_by_order[msgspec.msgpack.decode(rec.args)["order_id"]] = rec
    said_by: Tally[str] = Tally()
    for i in range(cfg.sessions):
        sid = wp.session_id(i)
        started: dict[int, str] = {}
        ended: dict[int, str] = {}
        results: dict[int, list[Any]] = defaultdict(list)
        task = 0
        for ev in view.journals[sid]:
            if isinstance(ev, TaskStarted):
                task = ev.task
                started[task] = ev.text
                said_by[ev.text] += 1
            elif isinstance(ev, UserSaid):
                said_by[ev.text] += 1
            elif isinstance(ev, ToolResult):
                results[task].append(ev.record)
            elif isinstance(ev, TaskEnded):
                ended[ev.task] = ev.outcome
        for t in started:
            outcome = ended.get(t)
            if outcome is None:
                f.tasks_unfinished += 1
                problems.append(f"{sid} task {t} never ended")
                continue
            if outcome == "finished":
                f.tasks_finished += 1
            elif outcome.startswith(("stopped: ", "cancelled")) and len(outcome) > 10:
                f.tasks_stopped += 1
                problems.append(f"{sid} task {t}: {outcome}")  # none is expected here
                continue
            else:
                f.tasks_unfinished += 1
                problems.append(f"{sid} task {t} ended without a reason: {outcome!r}")
                continue
            _check_task(sid, t, results[t], keyed_rows, approvals_by_order, problems)
    for text, sid in task_acks.items():
        if said_by[text] == 0:
            f.tasks_lost += 1
            problems.append(f"user message {text!r} to {sid} acknowledged, never applied")
    for text, n in said_by.items():
        if n > 1:
            f.tasks_applied_twice += 1
            problems.append(f"user message {text!r} applied {n} times")
    f.dead_letters = view.dead_letters

    # -- approvals: every decision the person got an OK for is in the record and the outcome
    decided = {d["request_id"]: d for d in decisions if d["kind"] == "approval"}
    records = {r.request_id: r for r in view.approvals}
    f.approvals_checked = len(records)
    f.approvals_pending = sum(r.status == "pending" for r in records.values())
    f.approvals_approved = sum(r.status == "approved" for r in records.values())
    f.approvals_rejected = sum(r.status == "rejected" for r in records.values())
    want = {"approve": "approved", "reject": "rejected"}
    for rid, d in decided.items():
        rec = records.get(rid)
        if rec is None or rec.status != want[d["decision"]]:
            f.approvals_lost += 1
            problems.append(f"decision {d} not in the record: {rec and rec.status}")
    for rid, rec in records.items():
        if rec.status != "pending" and rid not in decided:
            problems.append(f"approval {rid} is {rec.status}, decided by nobody we know")

    # -- the store itself, as `tether check` sees it once every process is gone
    report = check_store(cfg.db)
    f.store_violations = len(report.violations)
    problems.extend(f"tether check: {v.kind}: {v.message}" for v in report.violations)
    return f


def _check_task(
    sid: str,
    task: int,
    records: list[Any],
    keyed_rows: dict[str, list[Any]],
    approvals_by_order: dict[str, Any],
    problems: list[str],
) -> None:
    """A finished task saw its refund (the service's), its charge, and its big refund as the
    person decided it: one refund if approved, none and the reason if rejected."""
    tools = [r.tool for r in records]
    if tools != ["refund_keyed", "charge_once", "big_refund"]:
        problems.append(f"{sid} task {task}: tool calls {tools}")
        return
    refund, _, big = records
    order_id = wp.keyed_order(sid, task)
    rows = keyed_rows.get(order_id, [])
    if len(rows) != 1 or refund.result != f"{order_id} {rows[0]['refund_id']}":
        problems.append(f"{sid} task {task}: refund saw {refund.result!r}, service has {rows}")
    big_id = wp.big_order(sid, task)
    rec = approvals_by_order.get(big_id)
    rows = keyed_rows.get(big_id, [])
    if rec is None:
        problems.append(f"{sid} task {task}: no approval request for {big_id}")
    elif rec.status == "approved":
        if len(rows) != 1 or big.result != f"{big_id} {rows[0]['refund_id']}":
            problems.append(f"{sid} task {task}: approved, saw {big.result!r}, rows {rows}")
    elif rec.status == "rejected":
        if rows or not (big.error and "rejected" in big.error):
            problems.append(f"{sid} task {task}: rejected, saw {big.error!r}, rows {rows}")
    else:
        problems.append(f"{sid} task {task}: approval {rec.request_id} is {rec.status}")


def dump(figures: Figures, path: Path) -> None:
    path.write_text(json.dumps(msgspec.to_builtins(figures), indent=2, sort_keys=True))
