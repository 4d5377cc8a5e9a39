"""Actors for the supervision tests. Module level, so recovery can import them."""

from __future__ import annotations

from typing import ClassVar

import anyio

import tether
from tether import ChildSpec, OneForAll, OneForOne, RestForOne
from tether.supervisor.spec import Directive

# What happened, in order, across all instances: ("start", id), ("stop", id), ...
events: list[tuple[str, str]] = []


class Work(tether.Message):
    n: int = 0


class Crash(tether.Message):
    """Raises (RuntimeError, or ValueCrash for kind="value") on its first ``times`` deliveries."""

    kind: str = "runtime"
    key: str = "crash"
    times: int = 1


# deliveries that crashed, per (actor id, Crash.key), in this process
crashes: dict[tuple[str, str], int] = {}


class Exit(tether.Message):
    reason: str = "normal"


class Count(tether.Message):
    pass


class Hang(tether.Message):
    pass


class Sleep(tether.Message):
    """Sleeps (cancellably); a cancellation is recorded as ("cancelled", id)."""

    seconds: float = 3600.0


class Did(tether.Event):
    n: int


class ValueCrash(Exception):
    pass


class Worker(tether.Actor[int]):
    """Counts Work; Crash raises; Exit stops it normally; Hang ignores cancellation briefly."""

    initial_state = 0

    async def on_start(self) -> None:
        events.append(("start", self.id))

    async def on_stop(self) -> None:
        events.append(("stop", self.id))

    def apply(self, state: int, event: Did) -> int:
        return state + 1

    async def handle(self, msg: Work | Crash | Exit | Count | Hang | Sleep) -> int | None:
        match msg:
            case Work():
                self.persist(Did(n=msg.n))
            case Crash(kind=kind, key=key, times=times):
                done = crashes.get((self.id, key), 0)
                if done < times:
                    crashes[(self.id, key)] = done + 1
                    raise ValueCrash("bad value") if kind == "value" else RuntimeError("crash")
            case Exit(reason=r):
                self.stop(r)
            case Count():
                return self.state
            case Hang():
                with anyio.CancelScope(shield=True):
                    await anyio.sleep(2)
            case Sleep(seconds=seconds):
                try:
                    await anyio.sleep(seconds)
                except anyio.get_cancelled_exc_class():
                    events.append(("cancelled", self.id))
                    raise
        return None


class ExitsWith(Worker):
    """A Worker whose stop ends with ``reason`` (OTP's ``supervisor_4`` child, which exits with
    the reason it was started with when told to shut down): a stop that is not clean (not
    ``normal``, ``shutdown`` or ``shutdown: ...``) raises from ``on_stop``."""

    def __init__(self, reason: str = "shutdown") -> None:
        self.reason = reason

    async def on_stop(self) -> None:
        events.append(("stop", self.id))
        if self.reason != "normal" and not self.reason.startswith("shutdown"):
            raise RuntimeError(f"exited: {self.reason}")


class BadStart(tether.Actor[int]):
    """Fails in on_start."""

    initial_state = 0

    async def on_start(self) -> None:
        events.append(("start", self.id))
        raise RuntimeError("cannot start")

    async def handle(self, msg: Count) -> int:
        return self.state


# ids of RestartFails actors that have started once in this process
started_once: set[str] = set()
# StartFails id -> how many more of its starts fail
fail_starts: dict[str, int] = {}


class StartFails(Worker):
    """A Worker whose next ``fail_starts[id]`` starts fail in on_start."""

    async def on_start(self) -> None:
        events.append(("start", self.id))
        left = fail_starts.get(self.id, 0)
        if left:
            fail_starts[self.id] = left - 1
            raise RuntimeError("cannot start")


class RestartFails(Worker):
    """A Worker that starts the first time and fails in on_start every time after (OTP's
    ``supervisor_1:start_child(error)``): its restarts fail, not its first start."""

    async def on_start(self) -> None:
        events.append(("start", self.id))
        if self.id in started_once:
            raise RuntimeError("cannot restart")
        started_once.add(self.id)


class Watcher(tether.Actor[list[str]]):
    initial_state: ClassVar[list[str]] = []

    def apply(self, state: list[str], event: Seen) -> list[str]:
        return [*state, f"{event.actor_id}:{event.reason}"]

    async def handle(self, msg: WatchIt | tether.Terminated | Seen_q) -> list[str] | None:
        match msg:
            case WatchIt(target=t):
                await self.watch(t)
            case tether.Terminated(actor_id=a, reason=r):
                self.persist(Seen(actor_id=a, reason=r))
            case Seen_q():
                return self.state
        return None


class WatchIt(tether.Message):
    target: str


class Seen_q(tether.Message):
    pass


class Seen(tether.Event):
    actor_id: str
    reason: str


def three(restart: str = "permanent") -> list[ChildSpec]:
    return [ChildSpec(Worker, f"w{i}", restart=restart) for i in (1, 2, 3)]  # type: ignore[arg-type]


class OneForOneSup(tether.Supervisor):
    strategy = OneForOne(max_restarts=3, within=60)
    children = three()


class OneForAllSup(tether.Supervisor):
    strategy = OneForAll(max_restarts=3, within=60)
    children = [ChildSpec(Worker, f"a{i}") for i in (1, 2, 3)]


class RestForOneSup(tether.Supervisor):
    strategy = RestForOne(max_restarts=3, within=60)
    children = [ChildSpec(Worker, f"r{i}") for i in (1, 2, 3)]


class MixedSup(tether.Supervisor):
    strategy = OneForOne(max_restarts=10, within=60)
    children = [
        ChildSpec(Worker, "perm", restart="permanent"),
        ChildSpec(Worker, "trans", restart="transient"),
        ChildSpec(Worker, "temp", restart="temporary"),
    ]


class DeciderSup(tether.Supervisor):
    strategy = OneForOne(max_restarts=10, within=60)
    decider = {ValueCrash: "resume", RuntimeError: "restart"}
    children = [ChildSpec(Worker, "d1"), ChildSpec(Worker, "d2", decider={RuntimeError: "stop"})]


class Inner(tether.Supervisor):
    strategy = OneForOne(max_restarts=1, within=60)
    children = [ChildSpec(Worker, "leaf")]


class Outer(tether.Supervisor):
    strategy = OneForOne(max_restarts=1, within=60)
    children = [ChildSpec(Inner, "inner", shutdown="infinity"), ChildSpec(Worker, "sibling")]


class BackoffSup(tether.Supervisor):
    strategy = OneForOne(
        max_restarts=100,
        within=60,
        backoff=tether.Backoff(initial_delay=10, max_delay=40, reset_after=300),
    )
    children = [ChildSpec(Worker, "b1")]


class ShutdownSup(tether.Supervisor):
    strategy = OneForAll(max_restarts=5, within=60)
    children = [ChildSpec(Worker, "hanger", shutdown=0.2), ChildSpec(Worker, "crasher")]


class BadStartSup(tether.Supervisor):
    strategy = OneForOne(max_restarts=2, within=60)
    children = [ChildSpec(RestartFails, "bad")]


class Sessions(tether.Supervisor):
    strategy = OneForOne(max_restarts=1000, within=60)


class LazySessions(tether.Supervisor):
    """Dynamic children started on first use, not with the supervisor (as the guards are)."""

    strategy = OneForOne(max_restarts=1000, within=60)
    start_dynamic_children = False


class TightSessions(tether.Supervisor):
    """Dynamic children under a tight restart window (the SIGKILL test exceeds it on purpose)."""

    strategy = OneForOne(max_restarts=4, within=120)


class SubSup(tether.Supervisor):
    """A supervisor inside a group: its children must restart when the group does."""

    strategy = OneForOne(max_restarts=3, within=60)
    children = [ChildSpec(Worker, "leaf1"), ChildSpec(Worker, "leaf2")]


class GroupAll(tether.Supervisor):
    strategy = OneForAll(max_restarts=5, within=60)
    children = [ChildSpec(Worker, "g1"), ChildSpec(SubSup, "sub"), ChildSpec(Worker, "g3")]


class GroupRest(tether.Supervisor):
    strategy = RestForOne(max_restarts=5, within=60)
    children = [ChildSpec(Worker, "g1"), ChildSpec(SubSup, "sub"), ChildSpec(Worker, "g3")]


def bystanders() -> list[ChildSpec]:
    return [
        ChildSpec(Worker, "p1"),
        ChildSpec(Worker, "tmp", restart="temporary"),
        ChildSpec(Worker, "tr", restart="transient"),
    ]


class BystandersAll(tether.Supervisor):
    strategy = OneForAll(max_restarts=5, within=60)
    children = bystanders()


class BystandersRest(tether.Supervisor):
    strategy = RestForOne(max_restarts=5, within=60)
    children = bystanders()


class DynamicAll(tether.Supervisor):
    """one_for_all over dynamic children only."""

    strategy = OneForAll(max_restarts=5, within=60)


class StartFailsSup(tether.Supervisor):
    strategy = OneForOne(max_restarts=3, within=60)
    children = [ChildSpec(Worker, "s1"), ChildSpec(StartFails, "s2"), ChildSpec(Worker, "s3")]


class Limited(Worker):
    """A Worker whose constructor refuses a limit below 1, as an agent session refuses an
    empty goal: the runtime refuses it when it is spawned, before anything is stored."""

    def __init__(self, limit: int = 1) -> None:
        if limit < 1:
            raise tether.ConfigError(f"limit must be at least 1, not {limit}")
        self.limit = limit


class RefusedArgumentsSup(tether.Supervisor):
    strategy = OneForOne(max_restarts=3, within=60)
    children = [ChildSpec(Worker, "s1"), ChildSpec(Limited, "s2", limit=0), ChildSpec(Worker, "s3")]


class ReservedIdSup(tether.Supervisor):
    strategy = OneForOne(max_restarts=3, within=60)
    children = [ChildSpec(Worker, "s1"), ChildSpec(Worker, "s2/gate"), ChildSpec(Worker, "s3")]


class BuggyDecider:
    """A decider with a bug: it raises on a ValueCrash, failing its supervisor's handler."""

    def __call__(self, exc: BaseException) -> Directive:
        if isinstance(exc, ValueCrash):
            raise RuntimeError("a bug in the decider")
        return "restart"


class BuggyInner(tether.Supervisor):
    strategy = OneForOne(max_restarts=3, within=60)
    children = [ChildSpec(Worker, "inner-leaf")]
    decider = BuggyDecider()


class OuterOfBuggy(tether.Supervisor):
    strategy = OneForOne(max_restarts=3, within=60)
    children = [ChildSpec(BuggyInner, "buggy")]
