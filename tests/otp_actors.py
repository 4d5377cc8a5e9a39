"""Supervisors for the port of OTP's ``supervisor_SUITE`` (tests/supervisor/test_otp_suite.py).

Module level, so recovery can import them. Most start with no declared children and get them
from ``add_child``, as the OTP cases do with ``supervisor:start_child/2``; the workers are the
ones of ``tests.supervision_actors``.
"""

from __future__ import annotations

import tether
from tests.supervision_actors import BadStart, StartFails, ValueCrash, Worker
from tether import Backoff, ChildSpec, OneForAll, OneForOne, RestForOne

# {{one_for_one, 2, 3600}, []} and friends: strategy, intensity and period, no children.


class OneForOne2(tether.Supervisor):
    strategy = OneForOne(max_restarts=2, within=3600)


class OneForOne4(tether.Supervisor):
    strategy = OneForOne(max_restarts=4, within=3600)


class OneForAll2(tether.Supervisor):
    strategy = OneForAll(max_restarts=2, within=3600)


class OneForAll4(tether.Supervisor):
    strategy = OneForAll(max_restarts=4, within=3600)


class RestForOne2(tether.Supervisor):
    strategy = RestForOne(max_restarts=2, within=3600)


class RestForOne4(tether.Supervisor):
    strategy = RestForOne(max_restarts=4, within=3600)


class SimpleOneForOne2(tether.Supervisor):
    """{{simple_one_for_one, 2, 3600}, [Child]}: dynamic children only, started on first use."""

    strategy = OneForOne(max_restarts=2, within=3600)
    start_dynamic_children = False


class SimpleOneForOne4(tether.Supervisor):
    strategy = OneForOne(max_restarts=4, within=3600)
    start_dynamic_children = False


class OneForOneOnePerSecond(tether.Supervisor):
    """multiple_restarts: intensity 1, period 1."""

    strategy = OneForOne(max_restarts=1, within=1)


class OneForAllBystander(tether.Supervisor):
    strategy = OneForAll(max_restarts=2, within=300)


class RestForOneBystander(tether.Supervisor):
    strategy = RestForOne(max_restarts=2, within=300)


class ManyOneForOne(tether.Supervisor):
    strategy = OneForOne(max_restarts=100, within=3600)


class ManyOneForAll(tether.Supervisor):
    strategy = OneForAll(max_restarts=100, within=3600)


class ManyRestForOne(tether.Supervisor):
    strategy = RestForOne(max_restarts=100, within=3600)


class ChildAdm(tether.Supervisor):
    """child_adm: {{one_for_one, 2, 3600}, [Child]}."""

    strategy = OneForOne(max_restarts=2, within=3600)
    children = [ChildSpec(Worker, "child1")]


def _two_gated() -> list[ChildSpec]:
    return [ChildSpec(StartFails, "child1"), ChildSpec(StartFails, "child2")]


class OneForAllOtherFails(tether.Supervisor):
    strategy = OneForAll(max_restarts=3, within=3600)
    children = _two_gated()


class RestForOneOtherFails(tether.Supervisor):
    strategy = RestForOne(max_restarts=3, within=3600)
    children = _two_gated()


class Ordered(tether.Supervisor):
    """order_of_children: ids that are not in alphabetical order."""

    strategy = RestForOne(max_restarts=2, within=3600)
    children = [ChildSpec(Worker, cid) for cid in ("ch7", "ch3", "ch10", "ch2", "ch5")]


# tree: a one_for_all top with three child supervisors


class TreeTop(tether.Supervisor):
    strategy = OneForAll(max_restarts=4, within=3600)


class TreeSup1(tether.Supervisor):
    strategy = OneForOne(max_restarts=4, within=3600)
    children = [ChildSpec(Worker, "child1"), ChildSpec(Worker, "child2")]


class TreeSup2(tether.Supervisor):
    strategy = OneForOne(max_restarts=4, within=3600)


# simple_global_supervisor (OTP-9212): top -> middle -> server, one_for_all at both levels


class Middle9212(tether.Supervisor):
    strategy = OneForAll(max_restarts=3, within=60)
    children = [ChildSpec(Worker, "server")]
    decider = {ValueCrash: "escalate"}  # how a tether supervisor dies of a child's failure


class Top9212(tether.Supervisor):
    strategy = OneForAll(max_restarts=3, within=60)
    children = [ChildSpec(Middle9212, "middle")]


# faulty_application_shutdown: an application whose top supervisor cannot start its server


class FaultyApp(tether.Supervisor):
    strategy = OneForOne(max_restarts=1, within=5)
    children = [ChildSpec(BadStart, "app_faulty_server")]


class FaultyAppTop(tether.Supervisor):
    strategy = OneForOne(max_restarts=1, within=5)
    children = [ChildSpec(FaultyApp, "app_faulty")]


# restart loops (supervisor_deadlock's 2 s between failed starts): a backoff on the fake clock

# (tests seed its rng, so that no delay is drawn as 0)
LOOP = Backoff(initial_delay=2.0, max_delay=2.0, multiplier=1.0, reset_after=3600.0)


class SimpleRestarting(tether.Supervisor):
    """count_restarting_children: {{simple_one_for_one, 20, 10}, [Child]}."""

    strategy = OneForOne(max_restarts=20, within=10, backoff=LOOP)
    start_dynamic_children = False


class Hanging(tether.Supervisor):
    """hanging_restart_loop: {{one_for_one, 8, 10}, []}."""

    strategy = OneForOne(max_restarts=8, within=10, backoff=LOOP)


class HangingRestForOne(tether.Supervisor):
    strategy = RestForOne(max_restarts=8, within=10, backoff=LOOP)


class SimpleHanging(tether.Supervisor):
    strategy = OneForOne(max_restarts=8, within=10, backoff=LOOP)
    start_dynamic_children = False
