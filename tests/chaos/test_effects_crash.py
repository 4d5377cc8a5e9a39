"""I4 and I5 under SIGKILL: an agent refunding orders through a payments service running in its
own process is killed at each point of an effect, restarted on the same store, and finishes;
then the refunds are counted in the service's own SQLite file.

The four kill points of one effect:

* (a) ``after-intent``: the intent is committed, the call was never made;
* (b) ``during-call``: the service has recorded the refund but holds its answer (a delay fault
  on the victim's call) when the test SIGKILLs the agent;
* (c) ``before-receipt``: the call returned, its receipt was not committed;
* (d) ``before-step``: the receipt is committed, the step (event, reply, ack) is not.

(a), (c) and (d) are exact: the child's store kills its own process around the chosen batch
(``tests.chaos.effect_programs.KillingStore``). Each run refunds three orders, one per session,
victim last; the restarted run sends all three again with the same dedup keys. The child
programs are in ``tests/chaos/effect_programs.py``. Two payments services (one honoring
idempotency keys, one ignoring them) serve the whole module; orders are unique per test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.chaos.effect_programs import (
    ORDER,
    SESSIONS,
    VICTIM,
    Refund,
    amount,
    order,
    session,
)
from tests.chaos.harness import ROOT, Child, Children
from tests.chaos.programs import LEASE_TTL, POLL
from tether.testing.payments import PaymentsService, refunds

pytestmark = pytest.mark.slow  # crash tests: real child processes, real signals

HOLD = 20.0  # how long the service holds the victim's answer in (b): the agent dies first
RUN_TIMEOUT = 40.0  # every child run, generously (each takes about a second)


class EffectChild(Child):
    """A :class:`Child` running ``python -m tests.chaos.effect_programs`` instead."""

    def __init__(self, directory: Path, name: str, scenario: str, *args: object) -> None:
        self.name = name
        self.out = directory / f"{name}.out"
        self.err = directory / f"{name}.err"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, "-m", "tests.chaos.effect_programs", scenario, *map(str, args)]
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=err, env=env)
        self.pid = self.proc.pid


class EffectChildren(Children):
    def start(self, name: str, scenario: str, *args: object) -> Child:
        n = self._names[name] = self._names.get(name, 0) + 1
        child = EffectChild(self.directory, f"{name}-{n}", scenario, *args)
        self.started.append(child)
        return child


@pytest.fixture(scope="module")
def honoring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PaymentsService]:
    """A payments service that honors idempotency keys (a repeated key refunds nothing)."""
    with PaymentsService.start(tmp_path_factory.mktemp("pay") / "honoring.db") as service:
        yield service


@pytest.fixture(scope="module")
def ignoring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PaymentsService]:
    """A payments service that ignores idempotency keys (every call refunds)."""
    db = tmp_path_factory.mktemp("pay") / "ignoring.db"
    with PaymentsService.start(db, honor_keys=False) as service:
        yield service


# -- running a scenario -------------------------------------------------------------------------


class Scenario:
    """Three sessions refunding three orders on one agent store, through ``service``; their
    child runs, and what the world looks like after them."""

    def __init__(self, tmp_path: Path, service: PaymentsService, policy: str) -> None:
        self.service = service
        self.policy = policy
        self.prefix = f"{policy}-{uuid.uuid4().hex[:8]}"
        self.db = tmp_path / "agents.db"
        self.calls_log = tmp_path / "calls.jsonl"
        self.children = EffectChildren(tmp_path)
        self.last: Child | None = None  # the last clean run: its reports are the outcome
        self.at_kill: dict[str, int] = {}  # refunds per order when the agent was killed

    # -- the runs --

    def _start(self, name: str, kill: str, resolve: str) -> Child:
        args = (self.db, self.service.url, self.service.db_path, self.calls_log, self.prefix)
        return self.children.start(name, "refunds", *args, self.policy, kill, resolve)

    def kill_at(self, kill: str) -> None:
        """Run the agent until it is SIGKILLed at ``kill``, during the victim's refund."""
        if kill == "during-call":
            # The victim's call is the run's last: hold its answer once the refund is recorded.
            held_call = self.service.calls() + len(ORDER)
            self.service.set_faults(delay_calls={held_call: HOLD})
            try:
                first = self._start("first", kill, "none")
                first.wait_for(
                    lambda: self.counts()[self.victim_order] == 1,
                    RUN_TIMEOUT,
                    "the service to record the victim's refund",
                )
                assert self.service.calls() == held_call, self.describe()
                assert first.kill(), "the agent was not running when the test killed it"
            finally:
                self.service.set_faults()
        else:
            first = self._start("first", kill, "none")
            assert first.wait(RUN_TIMEOUT) == -signal.SIGKILL, self.describe()
            assert first.value("dying") == kill, self.describe()
        assert first.has("victim"), self.describe()
        assert not first.has(f"refunded {self.victim_order}"), self.describe()
        self.at_kill = self.counts()

    def start(self, resolve: str) -> Child:
        """Start a clean run on the same store (it re-sends the three refunds, deduplicated)."""
        self.last = self._start("restart", "none", resolve)
        return self.last

    def finish(self, resolve: str = "none") -> None:
        """A clean run that must see every refund through."""
        child = self.start(resolve)
        assert child.wait(RUN_TIMEOUT) == 0, self.describe()
        assert child.has("finished"), self.describe()

    # -- the world --

    @property
    def orders(self) -> list[str]:
        return [order(self.prefix, i) for i in range(SESSIONS)]

    @property
    def victim_order(self) -> str:
        return order(self.prefix, VICTIM)

    @property
    def victim(self) -> str:
        return session(self.prefix, VICTIM)

    def refunds(self) -> list[dict[str, Any]]:
        """This scenario's refunds, read from the service's SQLite file."""
        return [r for r in refunds(self.service.db_path) if r["order_id"] in self.orders]

    def counts(self) -> dict[str, int]:
        found = self.refunds()
        return {o: sum(1 for r in found if r["order_id"] == o) for o in self.orders}

    def calls(self, order_id: str, tool: str | None = None) -> list[dict[str, Any]]:
        """What the agents sent for ``order_id``: tool calls, or reconcile hooks if asked."""
        lines = self.calls_log.read_text().splitlines() if self.calls_log.exists() else []
        every = [json.loads(line) for line in lines]
        return [
            c
            for c in every
            if c["order_id"] == order_id
            and (c["tool"] == tool if tool is not None else c["tool"] != "reconcile")
        ]

    def victim_pids(self) -> list[int]:
        return [c["pid"] for c in self.calls(self.victim_order)]

    def victim_keys(self) -> set[str]:
        return {c["key"] for c in self.calls(self.victim_order)}

    def reported(self, key: str, child: Child | None = None) -> Any:
        """The JSON value of the last ``key=`` line of ``child`` (the last clean run)."""
        child = child or self.last
        value = child.value(key) if child is not None else None
        assert value is not None, f"no {key}= line\n{self.describe()}"
        return json.loads(value)

    def ledger(self, actor_id: str) -> dict[str, Any]:
        [row] = self.reported("ledger")[actor_id]
        return row  # type: ignore[no-any-return]

    def never_quarantined(self) -> bool:
        """The last clean run saw no quarantined effect."""
        return self.last is not None and self.last.value("quarantined") is None

    def describe(self) -> str:
        return f"refunds: {self.refunds()}\n{self.children.describe()}"


def run(
    tmp_path: Path, service: PaymentsService, policy: str, kill: str | None, resolve: str = "none"
) -> Scenario:
    """Refund three orders in a child killed at ``kill`` (None: no such run), then in a clean
    child on the same store, resolving a quarantined effect with ``resolve``."""
    s = Scenario(tmp_path, service, policy)
    try:
        if kill is not None:
            s.kill_at(kill)
        s.finish(resolve)
    finally:
        s.children.close()
    return s


def assert_every_order_refunded_once(o: Scenario) -> None:
    """One refund per order in the service, and each session's state and reply naming it."""
    assert o.counts() == dict.fromkeys(o.orders, 1), o.describe()
    by_order = {r["order_id"]: r["refund_id"] for r in o.refunds()}
    replies = o.reported("replies")
    states = o.reported("states")
    for i in range(SESSIONS):
        order_id = order(o.prefix, i)
        assert replies[order_id]["refund_id"] == by_order[order_id], o.describe()
        assert states[session(o.prefix, i)] == {order_id: by_order[order_id]}, o.describe()
        assert o.ledger(session(o.prefix, i))["status"] == "done", o.describe()
    assert o.reported("quarantined_after") == 0, o.describe()


def assert_the_others_were_untouched(o: Scenario) -> None:
    """The sessions refunded before the kill were neither called again nor refunded again."""
    for i in ORDER:
        if i != VICTIM:
            assert o.at_kill[order(o.prefix, i)] == 1, o.describe()
            assert len(o.calls(order(o.prefix, i))) == 1, o.describe()


# -- 1. recovery="retry" against a service that honors keys -------------------------------------


def test_kill_after_the_intent_before_the_call_refunds_exactly_once_on_retry(
    tmp_path: Path, honoring: PaymentsService
) -> None:
    o = run(tmp_path, honoring, "retry", "after-intent")
    assert o.at_kill[o.victim_order] == 0, o.describe()
    assert_every_order_refunded_once(o)
    assert_the_others_were_untouched(o)
    assert len(o.victim_pids()) == 1, o.describe()  # only the restarted agent called
    assert o.reported("replies")[o.victim_order]["replayed"] is False
    row = o.ledger(o.victim)
    assert o.victim_keys() == {row["key"]}
    assert row["attempts"] == 2, o.describe()  # the dead attempt counts
    assert "did not report back" in row["history"][0], o.describe()
    assert o.never_quarantined(), o.describe()


@pytest.mark.parametrize(
    "kill", ["during-call", "before-receipt"], ids=["during-the-call", "before-the-receipt"]
)
def test_kill_after_the_service_refunded_refunds_exactly_once_because_the_retry_reuses_the_key(
    tmp_path: Path, honoring: PaymentsService, kill: str
) -> None:
    o = run(tmp_path, honoring, "retry", kill)
    assert o.at_kill[o.victim_order] == 1, o.describe()
    assert_every_order_refunded_once(o)
    assert_the_others_were_untouched(o)
    # Called by the dead agent and again by the restarted one, with one key: the service
    # answered the second call with the first refund.
    pids = o.victim_pids()
    assert len(pids) == 2, o.describe()
    assert pids[0] != pids[1]
    assert o.victim_keys() == {o.ledger(o.victim)["key"]}, o.describe()
    assert o.reported("replies")[o.victim_order]["replayed"] is True, o.describe()
    [refund] = [r for r in o.refunds() if r["order_id"] == o.victim_order]
    assert refund["idempotency_key"] == o.ledger(o.victim)["key"]
    assert o.never_quarantined(), o.describe()


def test_kill_after_the_receipt_before_the_step_commit_refunds_exactly_once(
    tmp_path: Path, honoring: PaymentsService
) -> None:
    # A retry tool's receipt commits in the same transaction as the step (it rides with the
    # actor's next commit), so "receipt committed, step not" cannot happen: the kill lands
    # before both, and the redelivery calls again with the same key, which the service answers
    # from its record. (The quarantine tool's receipt commits on its own: see below.)
    o = run(tmp_path, honoring, "retry", "before-step")
    assert o.at_kill[o.victim_order] == 1, o.describe()
    assert_every_order_refunded_once(o)
    assert_the_others_were_untouched(o)
    assert len(o.victim_pids()) == 2, o.describe()
    assert len(o.victim_keys()) == 1, o.describe()
    assert o.ledger(o.victim)["attempts"] == 2, o.describe()
    assert o.reported("replies")[o.victim_order]["replayed"] is True


# -- 2. recovery="quarantine" (the default) against a service that ignores keys -----------------


def test_kill_after_the_intent_quarantines_and_an_approved_retry_refunds_exactly_once(
    tmp_path: Path, ignoring: PaymentsService
) -> None:
    o = run(tmp_path, ignoring, "quarantine", "after-intent", resolve="retry")
    assert o.at_kill[o.victim_order] == 0, o.describe()
    [held] = o.reported("quarantined")
    assert (held["actor_id"], held["tool"]) == (o.victim, "refund_quarantine"), o.describe()
    assert held["args"] == {"order_id": o.victim_order, "amount_cents": amount(VICTIM)}
    assert "did not report back" in held["reason"]
    assert o.reported("count_when_quarantined") == 0, o.describe()  # nothing refunded
    assert_every_order_refunded_once(o)
    assert_the_others_were_untouched(o)
    assert len(o.victim_pids()) == 1, o.describe()  # the approved retry, and only it
    assert o.victim_keys() == {held["key"]}
    assert "retry ordered by chaos-test" in o.ledger(o.victim)["history"]


@pytest.mark.parametrize(
    "kill", ["during-call", "before-receipt"], ids=["during-the-call", "before-the-receipt"]
)
def test_kill_after_the_service_refunded_quarantines_and_marking_it_done_never_refunds_twice(
    tmp_path: Path, ignoring: PaymentsService, kill: str
) -> None:
    o = run(tmp_path, ignoring, "quarantine", kill, resolve="mark-done")
    assert o.at_kill[o.victim_order] == 1, o.describe()
    [held] = o.reported("quarantined")
    assert (held["actor_id"], held["tool"]) == (o.victim, "refund_quarantine"), o.describe()
    assert o.reported("count_when_quarantined") == 1, o.describe()
    # mark_done recorded the service's refund as the receipt; the session finished with it.
    assert_every_order_refunded_once(o)
    assert_the_others_were_untouched(o)
    assert len(o.victim_pids()) == 1, o.describe()  # the dead agent's call only
    assert "marked done by chaos-test" in o.ledger(o.victim)["history"]


def test_kill_after_the_receipt_replays_it_without_quarantine_or_a_second_refund(
    tmp_path: Path, ignoring: PaymentsService
) -> None:
    o = run(tmp_path, ignoring, "quarantine", "before-step")
    assert o.at_kill[o.victim_order] == 1, o.describe()
    assert o.never_quarantined(), o.describe()
    assert_every_order_refunded_once(o)
    assert_the_others_were_untouched(o)
    assert len(o.victim_pids()) == 1, o.describe()
    assert o.ledger(o.victim)["attempts"] == 1, o.describe()


def test_a_quarantined_refund_outlives_its_agent_and_is_resolved_from_another_process(
    tmp_path: Path, ignoring: PaymentsService
) -> None:
    """Killed before the receipt; the restarted agent quarantines the refund and is killed in
    turn while the step is parked; a third agent finds it still held, and a person resolving it
    from another process (a runtime in the test) lets that agent finish, with one refund."""
    s = Scenario(tmp_path, ignoring, "quarantine")
    try:
        s.kill_at("before-receipt")
        parked = s.start("die")
        assert parked.wait(RUN_TIMEOUT) == -signal.SIGKILL, s.describe()
        assert parked.value("dying") == "parked", s.describe()
        [held] = s.reported("quarantined", parked)
        waiting = s.start("wait")
        # Reported right after its quarantined= line: wait for the second of the two.
        waiting.wait_report("count_when_quarantined", RUN_TIMEOUT)
        [still] = s.reported("quarantined", waiting)
        assert still["key"] == held["key"], s.describe()
        assert s.reported("count_when_quarantined", waiting) == 1, s.describe()
        [refund] = [r for r in s.refunds() if r["order_id"] == s.victim_order]
        anyio.run(mark_done_elsewhere, s.db, held["key"], refund)
        assert waiting.wait(RUN_TIMEOUT) == 0, s.describe()
        assert waiting.has("finished"), s.describe()
    finally:
        s.children.close()
    assert_every_order_refunded_once(s)
    assert_the_others_were_untouched(s)
    assert len(s.victim_pids()) == 1, s.describe()  # the first agent's call only
    assert "marked done by ops-elsewhere" in s.ledger(s.victim)["history"], s.describe()


async def mark_done_elsewhere(db: Path, key: str, refund: dict[str, Any]) -> None:
    """What a person does from another process: look at the quarantine, record the refund."""
    async with tether.Runtime(db, lease_ttl=LEASE_TTL, poll_interval=POLL) as rt:
        [held] = await rt.quarantine.list()
        assert held.key == key
        result = Refund(refund["refund_id"], refund["order_id"], refund["amount_cents"])
        await rt.quarantine.mark_done(key, result, by="ops-elsewhere")


# -- 3. recovery="reconcile": the hook asks the service (which ignores keys) ------------------


def test_reconcile_after_a_kill_before_the_call_finds_nothing_and_refunds_exactly_once(
    tmp_path: Path, ignoring: PaymentsService
) -> None:
    o = run(tmp_path, ignoring, "reconcile", "after-intent")
    assert o.at_kill[o.victim_order] == 0, o.describe()
    assert o.never_quarantined(), o.describe()
    assert_every_order_refunded_once(o)
    assert_the_others_were_untouched(o)
    assert len(o.calls(o.victim_order, "reconcile")) == 1, o.describe()
    assert len(o.victim_pids()) == 1, o.describe()  # called once, after the hook said not done
    row = o.ledger(o.victim)
    assert "reconciled: not done" in row["history"], o.describe()
    assert o.victim_keys() == {row["key"]}


@pytest.mark.parametrize(
    "kill", ["during-call", "before-receipt"], ids=["during-the-call", "before-the-receipt"]
)
def test_reconcile_after_a_kill_once_the_service_refunded_finds_it_and_never_calls_again(
    tmp_path: Path, ignoring: PaymentsService, kill: str
) -> None:
    o = run(tmp_path, ignoring, "reconcile", kill)
    assert o.at_kill[o.victim_order] == 1, o.describe()
    assert o.never_quarantined(), o.describe()
    assert_every_order_refunded_once(o)
    assert_the_others_were_untouched(o)
    assert len(o.calls(o.victim_order, "reconcile")) == 1, o.describe()
    assert len(o.victim_pids()) == 1, o.describe()  # the dead agent's call only
    assert "reconciled: done" in o.ledger(o.victim)["history"], o.describe()
    assert o.reported("replies")[o.victim_order]["replayed"] is True  # the hook's answer


# -- 4. transient failures are retried with the same key ---------------------------------------


@pytest.mark.parametrize(
    ("service_name", "policy"),
    [("honoring", "retry"), ("ignoring", "quarantine")],
    ids=["retry-tool", "quarantine-tool"],
)
def test_a_503_is_retried_with_the_same_key_and_refunds_once(
    tmp_path: Path, request: pytest.FixtureRequest, service_name: str, policy: str
) -> None:
    """A 503 says the call was not carried out: any tool retries it, with the same key."""
    service: PaymentsService = request.getfixturevalue(service_name)
    # Orders are refunded one after the other: the first call of the run is the first order's.
    service.set_faults(fail_calls=[service.calls() + 1], status=503)
    try:
        o = run(tmp_path, service, policy, None)
    finally:
        service.set_faults()
    assert_every_order_refunded_once(o)
    first = ORDER[0]
    for i in range(SESSIONS):
        order_id = order(o.prefix, i)
        row = o.ledger(session(o.prefix, i))
        retried = i == first
        sent = [c["key"] for c in o.calls(order_id)]
        assert sent == [row["key"]] * (2 if retried else 1), o.describe()
        [refund] = [r for r in o.refunds() if r["order_id"] == order_id]
        assert refund["idempotency_key"] == row["key"], o.describe()
        assert row["attempts"] == (2 if retried else 1), o.describe()
    history = o.ledger(session(o.prefix, first))["history"]
    assert "503" in history[0], o.describe()
