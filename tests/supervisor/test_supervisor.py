"""OTP supervisor behaviours, ported: strategies, restart types, intensity, shutdown, backoff."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

import tether
from tests import supervision_actors as a
from tests.supervisor.helpers import forget_events, node, runtime, since, until
from tether.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _clear_events() -> None:
    forget_events()


async def test_children_start_in_order_when_the_supervisor_is_spawned() -> None:
    """start order = the order of ``children``."""
    async with runtime() as rt:
        await rt.spawn(a.OneForOneSup, "sup")
        assert a.events == [("start", "w1"), ("start", "w2"), ("start", "w3")]


async def test_one_for_one_restarts_only_the_failed_child_with_its_state_refolded() -> None:
    """The new instance's state is the fold of the committed journal (I3)."""
    async with runtime() as rt:
        await rt.spawn(a.OneForOneSup, "sup")
        w2 = rt.ref("w2")
        await w2.tell(a.Work())
        await w2.tell(a.Work())
        mark = len(a.events)
        await w2.tell(a.Crash())
        await until(lambda: ("start", "w2") in since(mark))
        assert await w2.ask(a.Count(), timeout=5) == 2
        assert since(mark) == [("stop", "w2"), ("start", "w2")]
        assert (await node(rt, "w2")).restart_count == 1


async def test_one_for_all_stops_all_in_reverse_and_restarts_all_in_start_order() -> None:
    """OTP one_for_all."""
    async with runtime() as rt:
        await rt.spawn(a.OneForAllSup, "sup")
        mark = len(a.events)
        await rt.ref("a2").tell(a.Crash())
        await until(lambda: len(since(mark)) == 6)
        assert since(mark) == [
            ("stop", "a3"), ("stop", "a2"), ("stop", "a1"),
            ("start", "a1"), ("start", "a2"), ("start", "a3"),
        ]  # fmt: skip


async def test_rest_for_one_restarts_the_failed_child_and_those_started_after_it() -> None:
    """OTP rest_for_one."""
    async with runtime() as rt:
        await rt.spawn(a.RestForOneSup, "sup")
        mark = len(a.events)
        await rt.ref("r2").tell(a.Crash())
        await until(lambda: len(since(mark)) == 4)
        assert since(mark) == [("stop", "r3"), ("stop", "r2"), ("start", "r2"), ("start", "r3")]


async def test_exceeding_restart_intensity_stops_children_in_reverse_order_and_fails_upwards() -> (
    None
):
    """More than max_restarts within the window: the supervisor fails; at the root its subtree is
    stopped and recorded as failed, and the runtime keeps serving everything else."""
    async with runtime() as rt:
        await rt.spawn(a.OneForOneSup, "sup")
        other = await rt.spawn(a.Worker, "independent")
        mark = len(a.events)
        await rt.ref("w1").tell(a.Crash(times=100))  # redelivered: it crashes on every restart
        await until(lambda: ("stop", "w2") in since(mark))
        await until(lambda: "sup" not in rt.cells)
        stops = [e for e in since(mark) if e[0] == "stop"]
        assert stops[-2:] == [("stop", "w3"), ("stop", "w2")]  # reverse start order
        sup = await node(rt, "sup")
        assert sup.status == "failed"
        assert [c.status for c in sup.children] == ["failed", "failed", "failed"]
        await other.tell(a.Work())
        assert await other.ask(a.Count(), timeout=5) == 1
        with pytest.raises(tether.ActorStopped):
            await rt.ref("w2").tell(a.Work())


async def test_restart_intensity_multiplies_across_two_levels() -> None:
    """Inner allows 1 restart, Outer allows 1 restart of Inner: the leaf fails 2 x 2 times."""
    async with runtime() as rt:
        await rt.spawn(a.Outer, "outer")
        await rt.ref("leaf").tell(a.Crash(times=100))
        await until(lambda: "outer" not in rt.cells)
        leaf_starts = [e for e in a.events if e == ("start", "leaf")]
        assert len(leaf_starts) == 4  # first start + 1 restart, twice (Inner restarted once)
        outer = await node(rt, "outer")
        assert outer.status == "failed"
        assert outer.find("inner") is not None
        assert outer.find("leaf").status == "failed"  # type: ignore[union-attr]


async def test_a_transient_child_that_exits_normally_is_not_restarted() -> None:
    """transient: restarted only after a failure."""
    async with runtime() as rt:
        await rt.spawn(a.MixedSup, "sup")
        mark = len(a.events)
        await rt.ref("trans").ask(a.Exit(reason="done"), timeout=5)
        await until(lambda: ("stop", "trans") in since(mark))
        await anyio.sleep(0.1)
        assert ("start", "trans") not in since(mark)
        assert (await node(rt, "trans")).status == "stopped"
        mark = len(a.events)
        await rt.ref("perm").tell(a.Crash())  # while a failure of a transient one would restart
        await until(lambda: ("start", "perm") in since(mark))


async def test_a_permanent_child_that_exits_normally_is_restarted() -> None:
    """permanent: always restarted, even after a normal exit."""
    async with runtime() as rt:
        await rt.spawn(a.MixedSup, "sup")
        mark = len(a.events)
        await rt.ref("perm").ask(a.Exit(reason="done"), timeout=5)
        await until(lambda: ("start", "perm") in since(mark))
        await until(lambda: rt.cells.get("perm") is not None)
        assert await rt.ref("perm").ask(a.Count(), timeout=5) == 0


async def test_a_temporary_child_is_never_restarted() -> None:
    """temporary: a failure stops it for good; its messages go to dead letters."""
    async with runtime() as rt:
        await rt.spawn(a.MixedSup, "sup")
        mark = len(a.events)
        await rt.ref("temp").tell(a.Crash())
        await until(lambda: ("stop", "temp") in since(mark))
        await anyio.sleep(0.1)
        assert ("start", "temp") not in since(mark)
        assert (await node(rt, "temp")).status == "stopped"
        [letter] = await rt.dead_letters.list()
        assert letter.type == "Crash"


async def test_a_decider_maps_exception_types_to_directives_per_supervisor_and_per_child() -> None:
    """resume keeps the instance; restart replaces it; a child's own decider wins."""
    async with runtime() as rt:
        await rt.spawn(a.DeciderSup, "sup")
        d1 = rt.ref("d1")
        await d1.tell(a.Work())
        mark = len(a.events)
        await d1.tell(a.Crash(kind="value", key="v"))  # ValueCrash -> resume: no stop, no start
        assert await d1.ask(a.Count(), timeout=5) == 1
        assert since(mark) == []
        await d1.tell(a.Crash(kind="runtime", key="r"))  # RuntimeError -> restart
        await until(lambda: ("start", "d1") in since(mark))
        mark = len(a.events)
        await rt.ref("d2").tell(a.Crash(kind="runtime"))  # per-child decider: RuntimeError -> stop
        await until(lambda: ("stop", "d2") in since(mark))
        await until(lambda: "d2" not in rt.cells)
        assert (await node(rt, "d2")).status == "stopped"


async def test_a_child_that_ignores_cancellation_is_abandoned_after_its_shutdown_timeout() -> None:
    """shutdown=0.2: cancelled after 0.2 s, abandoned when it shields itself; the restart goes on."""
    async with runtime() as rt:
        await rt.spawn(a.ShutdownSup, "sup")
        hanger = rt.ref("hanger")
        await hanger.tell(a.Hang())
        await until(lambda: rt.cells["hanger"].current is not None)
        mark = len(a.events)
        await rt.ref("crasher").tell(a.Crash())
        await until(lambda: ("start", "crasher") in since(mark), timeout=10)
        assert ("start", "hanger") in since(mark)
        assert ("stop", "hanger") not in since(mark)  # it never got to stop: it was abandoned
        await until(lambda: rt.cells.get("hanger") is not None)
        assert rt.cells["hanger"].current is None or rt.cells["hanger"].current.type == "Hang"


async def test_a_crash_while_restarting_counts_toward_intensity() -> None:
    """A child whose restarts fail in on_start is restarted until the window is exceeded.
    (A declared child failing its first start fails its supervisor's start instead: see
    test_otp_suite.py::test_faulty_application_shutdown.)"""
    async with runtime() as rt:
        await rt.spawn(a.BadStartSup, "sup")
        await rt.ref("bad").tell(a.Crash())
        await until(lambda: "sup" not in rt.cells)
        assert a.events.count(("start", "bad")) == 3  # the start and 2 restarts (max_restarts=2)
        assert (await node(rt, "sup")).status == "failed"


async def test_backoff_is_driven_by_the_injected_clock_and_messages_wait_meanwhile() -> None:
    """While a child backs off, its messages wait in the mailbox; none is dropped."""
    clock = FakeClock()
    async with runtime(clock=clock) as rt:
        await rt.spawn(a.BackoffSup, "sup")
        b1 = rt.ref("b1")
        await b1.tell(a.Work())
        await b1.tell(a.Crash(times=2))
        await until(lambda: clock.sleepers == 1)
        assert (await node(rt, "b1")).status == "backing off"
        for _ in range(3):
            await b1.tell(a.Work())
        await anyio.sleep(0.05)
        assert ("start", "b1") not in a.events[1:]
        clock.advance(10)  # the first delay is at most initial_delay=10
        await until(lambda: a.events.count(("start", "b1")) == 2)
        # The redelivered Crash fails again: the second delay is at most 20.
        await until(lambda: clock.sleepers == 1)
        clock.advance(20)
        await until(lambda: a.events.count(("start", "b1")) == 3)
        assert (await node(rt, "b1")).restart_count == 2


async def test_dynamic_children_are_added_and_removed_at_run_time(store_url: str) -> None:
    """Like OTP's simple_one_for_one: sessions come and go under one supervisor."""
    async with runtime(store_url) as rt:
        await rt.spawn(a.Sessions, "sessions")
        s1 = await rt.add_child("sessions", tether.ChildSpec(a.Worker, "s1"))
        await rt.add_child("sessions", tether.ChildSpec(a.Worker, "s2"))
        await s1.tell(a.Work())
        assert await s1.ask(a.Count(), timeout=5) == 1
        tree = await node(rt, "sessions")
        assert [c.id for c in tree.children] == ["s1", "s2"]
        assert await rt.remove_child("sessions", "s1") is True
        assert await rt.remove_child("sessions", "nope") is False
        with pytest.raises(tether.ActorStopped):
            await s1.tell(a.Work())
    async with runtime(store_url) as rt:
        await rt.spawn(a.Sessions, "sessions")
        assert rt.cells.get("s2") is not None  # the dynamic child came back with its supervisor
        assert "s1" not in rt.cells


async def test_a_child_started_on_first_use_starts_when_its_supervisor_is_not_up_yet(
    store_url: str,
) -> None:
    """A message to a lazily started child of a supervisor that is not active here brings up
    the supervisor, then the child under it, at once: not when a later scan finds the mail."""
    db = store_url
    async with runtime(db) as rt:
        await rt.spawn(a.LazySessions, "sessions")
        s1 = await rt.add_child("sessions", tether.ChildSpec(a.Worker, "s1"))
        await s1.tell(a.Work())
        assert await s1.ask(a.Count(), timeout=5) == 1
    # A long lease: the orphan scan (every min(lease_ttl / 2, 5) s) would come too late.
    async with runtime(db, lease_ttl=60.0) as rt:
        cell = await rt.activate("s1")  # usually before the scheduler brought the tree back
        assert cell is not None
        assert rt.cells.get("sessions") is not None
        assert await rt.ref("s1").ask(a.Count(), timeout=2) == 1


async def test_death_watch_delivers_terminated_with_the_reason(store_url: str) -> None:
    """A watcher is told when the watched actor stops, also if it had stopped already."""
    async with runtime(store_url) as rt:
        watcher = await rt.spawn(a.Watcher, "watcher")
        target = await rt.spawn(a.Worker, "target")
        gone = await rt.spawn(a.Worker, "gone")
        await gone.stop("earlier")
        await watcher.ask(a.WatchIt(target="target"), timeout=5)
        await watcher.ask(a.WatchIt(target="gone"), timeout=5)
        await target.stop("finished")
        await until(lambda: len(rt.cells["watcher"].state) == 2)
        assert sorted(await watcher.ask(a.Seen_q(), timeout=5)) == [
            "gone:earlier",
            "target:finished",
        ]


async def test_watching_requires_accepting_terminated() -> None:
    """A clear error instead of notices that could never be delivered."""
    async with runtime() as rt:
        await rt.spawn(a.Worker, "w")
        await rt.spawn(a.Worker, "x")
        with pytest.raises(tether.ConfigError, match="Terminated"):
            await rt.watch("w", "x")


def test_bad_supervision_settings_are_refused() -> None:
    """Strategies, child specs and backoff validate their arguments."""
    with pytest.raises(tether.ConfigError, match="max_restarts"):
        tether.OneForOne(max_restarts=-1)
    with pytest.raises(tether.ConfigError, match="within"):
        tether.OneForAll(within=0)
    with pytest.raises(tether.ConfigError, match="restart"):
        tether.ChildSpec(a.Worker, "x", restart="sometimes")  # type: ignore[arg-type]
    with pytest.raises(tether.ConfigError, match="shutdown"):
        tether.ChildSpec(a.Worker, "x", shutdown=-1)
    with pytest.raises(tether.ConfigError, match="cannot be stored"):
        tether.ChildSpec(a.Worker, "x", handle=object())
    with pytest.raises(tether.ConfigError, match="takes no spawn arguments"):
        tether.ChildSpec(a.Worker, "x", colour="red")
    with pytest.raises(tether.ConfigError, match="Backoff"):
        tether.Backoff(initial_delay=5, max_delay=1)


def test_backoff_is_exponential_with_full_jitter_and_capped() -> None:
    """delay(n) is uniform in [0, min(max_delay, initial_delay * multiplier**n)]."""
    import random

    b = tether.Backoff(initial_delay=0.1, max_delay=1.0, multiplier=2.0, rng=random.Random(7))
    assert [b.cap(n) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for n in range(6):
        for _ in range(50):
            assert 0.0 <= b.delay(n) <= b.cap(n)


async def test_supervisors_come_back_by_themselves_when_a_runtime_reopens_the_store(
    store_url: str,
) -> None:
    """Supervisors never passivate; a new Runtime restarts their trees without being asked."""
    db = store_url
    async with runtime(db) as rt:
        await rt.spawn(a.Sessions, "sessions")
        await rt.add_child("sessions", tether.ChildSpec(a.Worker, "s1"))
    a.events.clear()
    async with runtime(db) as rt:
        await until(lambda: ("start", "s1") in a.events)
        assert (await node(rt, "sessions")).status == "running"


async def test_restarts_are_span_events_when_tracing_is_configured() -> None:
    """Every restart decision is visible in traces (and in structlog)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tether import telemetry

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    old_tracer, old_enabled = telemetry.tracer, telemetry.tracing_enabled
    telemetry.tracer = provider.get_tracer("tether")
    telemetry.tracing_enabled = lambda: True
    try:
        async with runtime() as rt:
            await rt.spawn(a.OneForOneSup, "sup")
            mark = len(a.events)
            await rt.ref("w1").tell(a.Crash())
            await until(lambda: ("start", "w1") in since(mark))
    finally:
        telemetry.tracer, telemetry.tracing_enabled = old_tracer, old_enabled
    events = [e.name for span in exporter.get_finished_spans() for e in span.events]
    assert "tether.child_failed" in events
    assert "tether.directive_restart" in events
    assert any(s.name == "tether.handle" for s in exporter.get_finished_spans())
    assert trace.get_tracer_provider() is not provider


async def test_a_journal_write_failure_is_never_resumed_the_actor_is_rebuilt_from_the_store() -> (
    None
):
    """The outcome of a failed commit is unknown: the instance is replaced and re-folded, and
    the message is delivered again from the mailbox."""
    from tether.store.records import Batch, BatchResult

    async with runtime() as rt:
        w = await rt.spawn(a.Worker, "w")
        await w.tell(a.Work())
        real_apply = rt.store.apply
        failures = 0

        async def flaky_apply(batch: Batch) -> BatchResult:
            nonlocal failures
            if failures < 2 and any(s.actor_id == "w" and s.events for s in batch.steps):
                failures += 1
                raise OSError("disk I/O error")
            return await real_apply(batch)

        rt.store.apply = flaky_apply  # type: ignore[method-assign]
        mark = len(a.events)
        await w.tell(a.Work())
        assert await w.ask(a.Count(), timeout=5) == 2
        assert failures == 2
        assert since(mark)[:2] == [("stop", "w"), ("start", "w")]  # rebuilt, not resumed


async def test_backoff_starts_over_after_a_quiet_period() -> None:
    """After reset_after seconds without a restart, the next delay is drawn from the first cap."""
    clock = FakeClock()
    async with runtime(clock=clock) as rt:
        await rt.spawn(a.BackoffSup, "sup")
        b1 = rt.ref("b1")
        for key, expected_streak in (("one", 1), ("two", 2)):
            await b1.tell(a.Crash(key=key))
            await until(lambda: clock.sleepers == 1)
            clock.advance(40)
            await until(lambda: rt.cells.get("b1") is not None and rt.cells["b1"].ready.is_set())
            await b1.ask(a.Count(), timeout=5)
            assert rt.cells["sup"].state.streak["b1"] == expected_streak
        clock.advance(301)  # quiet for longer than reset_after=300
        await b1.tell(a.Crash(key="three"))
        await until(lambda: clock.sleepers == 1)
        assert rt.cells["sup"].state.streak["b1"] == 1
        clock.advance(10)
        await b1.ask(a.Count(), timeout=5)


class NotAnActor:
    pass


def bad(value: object) -> Any:
    """A value of the wrong type, passed where the annotations forbid it."""
    return value


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda: tether.ChildSpec(NotAnActor, "x"), "not a subclass of tether.Actor"),
        (lambda: tether.ChildSpec(bad(a.Worker()), "x"), "not a subclass of tether.Actor"),
        (lambda: tether.ChildSpec(a.Worker, ""), "child id must be a non-empty string"),
        (lambda: tether.ChildSpec(a.Worker, bad(None)), "child id must be a non-empty string"),
        (lambda: tether.ChildSpec(a.Worker, "x", decider=bad("restart")), "a decider is a"),
        (
            lambda: tether.ChildSpec(a.Worker, "x", decider=bad({ValueError: "reboot"})),
            "maps ValueError to 'reboot'",
        ),
        (
            lambda: tether.ChildSpec(a.Worker, "x", decider=bad({"ValueError": "stop"})),
            "not an exception type",
        ),
        (
            lambda: tether.OneForOne(backoff=bad("exponential")),
            "backoff must be a tether.Backoff",
        ),
        (
            lambda: type("S", (tether.Supervisor,), {"children": [a.Worker]}),
            "wrap it in tether.ChildSpec",
        ),
        (
            lambda: type("S", (tether.Supervisor,), {"children": None}),
            "children must be a list",
        ),
        (
            lambda: type("S", (tether.Supervisor,), {"decider": {KeyError: "ignore"}}),
            r"S\.decider: decider maps KeyError to 'ignore'",
        ),
    ],
)
def test_a_bad_child_strategy_or_decider_is_refused_when_defined(
    make: Callable[[], object], problem: str
) -> None:
    """Unchecked, these failed later: the supervisor could not start (a class that is not an
    actor), or its fold or decision failed on a child's first failure (a bad backoff or
    decider), leaving the failure undecided; some raised a bare AttributeError at once."""
    with pytest.raises(tether.ConfigError, match=problem):
        make()


# -- issue #15: a group restart, its bystanders, and a supervisor's own start ---------------------


@pytest.mark.parametrize("sup", [a.GroupAll, a.GroupRest])
async def test_a_group_restart_stops_and_starts_a_child_supervisors_whole_subtree(
    sup: type[tether.Supervisor],
) -> None:
    """OTP: restarting a supervisor child means a new supervisor with new children. Its
    subtree stops in reverse start order after the later siblings, and starts again in order."""
    async with runtime() as rt:
        await rt.spawn(sup, "top")
        leaves = {cid: rt.cells[cid] for cid in ("leaf1", "leaf2")}
        await rt.ref("leaf1").tell(a.Work())
        mark = len(a.events)
        await rt.ref("g1").tell(a.Crash())
        await until(lambda: ("start", "g3") in since(mark))
        assert since(mark) == [
            ("stop", "g3"), ("stop", "leaf2"), ("stop", "leaf1"), ("stop", "g1"),
            ("start", "g1"), ("start", "leaf1"), ("start", "leaf2"), ("start", "g3"),
        ]  # fmt: skip
        assert all(rt.cells[cid] is not cell for cid, cell in leaves.items())
        assert await rt.ref("leaf1").ask(a.Count(), timeout=5) == 1  # its journal, re-folded


@pytest.mark.parametrize("sup", [a.BystandersAll, a.BystandersRest])
async def test_a_temporary_bystander_is_stopped_for_good_and_a_transient_one_restarted(
    sup: type[tether.Supervisor],
) -> None:
    """OTP's terminate_children: a temporary child in the restarted group is terminated and
    removed, never restarted; permanent and transient ones start again."""
    async with runtime() as rt:
        await rt.spawn(sup, "sup")
        mark = len(a.events)
        await rt.ref("p1").tell(a.Crash())
        await until(lambda: ("start", "tr") in since(mark))
        assert since(mark) == [
            ("stop", "tr"), ("stop", "tmp"), ("stop", "p1"), ("start", "p1"), ("start", "tr"),
        ]  # fmt: skip
        assert (await node(rt, "tmp")).status == "stopped"
        with pytest.raises(tether.ActorStopped):
            await rt.ref("tmp").tell(a.Work())
        assert await rt.ref("tr").ask(a.Count(), timeout=5) == 0


async def test_a_transient_bystander_that_ended_normally_starts_again_with_its_group() -> None:
    """OTP's restart_multiple_children starts every non-temporary child of the group, also a
    transient one whose normal exit was not restarted."""
    async with runtime() as rt:
        await rt.spawn(a.BystandersAll, "sup")
        await rt.ref("tr").ask(a.Work(), timeout=5)
        await rt.ref("tr").ask(a.Exit(reason="done"), timeout=5)
        await until(lambda: "tr" not in rt.cells)
        assert (await node(rt, "tr")).status == "stopped"
        mark = len(a.events)
        await rt.ref("p1").tell(a.Crash())
        await until(lambda: ("start", "tr") in since(mark))
        assert await rt.ref("tr").ask(a.Count(), timeout=5) == 1
        assert (await node(rt, "tr")).status == "running"


async def test_a_dynamic_temporary_bystander_is_forgotten_and_its_id_can_be_added_again() -> None:
    async with runtime() as rt:
        await rt.spawn(a.DynamicAll, "sup")
        await rt.add_child("sup", tether.ChildSpec(a.Worker, "p"))
        await rt.add_child("sup", tether.ChildSpec(a.Worker, "t", restart="temporary"))
        mark = len(a.events)
        await rt.ref("p").tell(a.Crash())
        await until(lambda: ("start", "p") in since(mark))
        assert [e.child_id for e in rt.cells["sup"].state.dynamic] == ["p"]
        t = await rt.add_child("sup", tether.ChildSpec(a.Worker, "t", restart="temporary"))
        assert await t.ask(a.Count(), timeout=5) == 0


async def test_a_declared_child_that_fails_to_start_fails_the_supervisors_spawn() -> None:
    """OTP's failed_to_start_child: spawn raises naming the child; the children after it are
    not started, those before it are stopped again; nothing is retried behind the caller's
    back. Once the child starts, spawning the supervisor again brings the tree up."""
    a.fail_starts["s2"] = 1
    async with runtime() as rt:
        with pytest.raises(tether.ChildStartFailed, match=r"'s2'.*cannot start") as exc:
            await rt.spawn(a.StartFailsSup, "sup")
        assert (exc.value.supervisor_id, exc.value.child_id) == ("sup", "s2")
        assert a.events == [("start", "s1"), ("start", "s2"), ("stop", "s1")]
        await anyio.sleep(0.2)  # nothing starts meanwhile
        assert a.events == [("start", "s1"), ("start", "s2"), ("stop", "s1")]
        assert not {"sup", "s1", "s2", "s3"} & set(rt.cells)
        await rt.spawn(a.StartFailsSup, "sup")
        assert a.events[3:] == [("start", "s1"), ("start", "s2"), ("start", "s3")]
        assert (await node(rt, "sup")).status == "running"


@pytest.mark.parametrize(
    ("sup", "child", "problem"),
    [
        (a.RefusedArgumentsSup, "s2", r"ConfigError: cannot spawn 's2': limit must be at least 1"),
        (a.ReservedIdSup, "s2/gate", r"ConfigError: actor id 's2/gate' is reserved"),
    ],
    ids=["arguments-refused", "reserved-id"],
)
async def test_a_declared_child_the_runtime_refuses_to_spawn_fails_the_supervisors_spawn(
    sup: type[tether.Supervisor], child: str, problem: str
) -> None:
    """The same when the runtime refuses the child before it starts (its arguments, or an id
    tether keeps for a guard): spawn raised nothing, the supervisor's start failed and was
    retried in the background, and the child before it ran on without its supervisor."""
    async with runtime() as rt:
        with pytest.raises(tether.ChildStartFailed, match=problem) as exc:
            await rt.spawn(sup, "sup")
        assert (exc.value.supervisor_id, exc.value.child_id) == ("sup", child)
        assert a.events == [("start", "s1"), ("stop", "s1")]
        assert not {"sup", "s1", child, "s3"} & set(rt.cells)
        assert await rt.store.get_actor(child) is None  # nothing stored at the refused id
        await anyio.sleep(0.2)  # nothing is retried behind the caller's back
        assert a.events == [("start", "s1"), ("stop", "s1")]


async def test_a_supervisor_restarted_in_place_restarts_its_children() -> None:
    """A supervisor whose own handler fails (here its decider has a bug) is restarted in place
    by its supervisor: its children go down with the old instance and start again under the
    new one; the child whose failure it was deciding is not left waiting."""
    async with runtime() as rt:
        await rt.spawn(a.OuterOfBuggy, "outer")
        leaf, buggy = rt.cells["inner-leaf"].instance, rt.cells["buggy"].instance
        await rt.ref("inner-leaf").tell(a.Work())
        mark = len(a.events)
        await rt.ref("inner-leaf").tell(a.Crash(kind="value"))
        await until(lambda: ("start", "inner-leaf") in since(mark))
        assert since(mark) == [("stop", "inner-leaf"), ("start", "inner-leaf")]
        assert rt.cells["buggy"].instance is not buggy
        assert rt.cells["inner-leaf"].instance is not leaf
        assert await rt.ref("inner-leaf").ask(a.Count(), timeout=5) == 1
        assert (await node(rt, "buggy")).restart_count == 1
