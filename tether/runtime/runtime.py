"""``Runtime``: the process-level system that owns the store, the cells and the scheduler.

One Runtime per process and store file. On open it registers itself, then its scheduler finds
every actor with queued or in-flight messages and activates it, so work continues where the
last process stopped. Several Runtimes (processes) may share one SQLite file: each actor is
active in at most one of them at a time, under a lease with a fencing token (I8).

``Runtime`` is the facade users hold: the settings, the lifecycle and the public methods. The
work is done by its services, one concept each (``docs/architecture.md``, "The runtime's
modules"): a message's trip is ``mail.py``'s, activation and leases ``activation.py``'s, the
registry of cells ``registry.py``'s, spawns and stops ``spawning.py``'s and ``stopping.py``'s.
The runtime hands each service the narrow ``Kernel`` (``kernel.py``) and, to its cells, the
``CellHost`` (``cell.py``): what they call of it is bound, once, to the service that does it.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

import anyio
import msgspec

from tether import telemetry
from tether.actors.actor import Actor
from tether.actors.guards.gate import ApprovalPolicy
from tether.actors.messages import Message
from tether.actors.ref import ActorRef
from tether.errors import ConfigError, CorruptRecordError
from tether.runtime.activation import Activation
from tether.runtime.approval_desk import Approvals
from tether.runtime.cell import Cell
from tether.runtime.clock import Clock, SystemClock
from tether.runtime.collector import GcPolicy, governor
from tether.runtime.committer import GroupCommitter
from tether.runtime.dead_letters import DeadLetters
from tether.runtime.guards import Guards
from tether.runtime.journal import session_info
from tether.runtime.lifecycle import Lifecycle
from tether.runtime.live_actor import CellHost, LiveActor
from tether.runtime.mail import Mail, new_prefix
from tether.runtime.quarantine import Quarantine
from tether.runtime.reads import Reader
from tether.runtime.registry import Registry, check_id, report_corrupt_actor
from tether.runtime.replies import Replies
from tether.runtime.scheduler import Scheduler, SchedulerHost
from tether.runtime.settings import positive
from tether.runtime.spawning import Spawning
from tether.runtime.stopping import Stopping
from tether.runtime.supervision import Supervision
from tether.runtime.tree import TreeNode, supervision_tree
from tether.store.hosts import process_start, this_host
from tether.store.integrity import SelfChecking
from tether.store.open import open_store, shown
from tether.store.protocol import Store
from tether.supervisor.spec import ChildSpec

if TYPE_CHECKING:
    from tether.actors.session import SessionInfo

A = TypeVar("A", bound=Actor[Any])

_DEFAULT_GC = GcPolicy()


class Runtime:
    """Runs durable actors on a store.

    Args:
        path: the store's URL, opened with ``tether.open_store``: an SQLite file (a path, or
            ``sqlite:///relative.db`` / ``sqlite:////abs/path.db``; created if missing),
            ``":memory:"`` for a non-durable in-process store for tests, or the URL of an
            installed backend.
        store: a ``Store`` to use instead of ``path`` (it judges leases on the clock it was
            built with, not on ``clock``).
        durability: an option of the SQLite store: ``"full"`` (its default: an acknowledged
            message survives power loss) or ``"normal"`` (survives a process crash; faster).
            A store that takes no such option refuses it (``ConfigError``).
        max_attempts: deliveries of one message before it goes to dead letters (I7).
        snapshot_every: store a snapshot of an actor's state every this many events (I3).
        lease_ttl: seconds an actor's lease lasts without renewal; a runtime that dies holding
            leases is taken over after this long (at once when it died on this host).
        passivate_after: seconds of idleness after which an actor leaves memory; None: never.
        poll_interval: seconds between scans for messages stored by other processes.
        retention: seconds to keep dedup keys and ask replies.
        receipt_retention: seconds to keep finished effects (receipts) in the ledger after
            their step committed; a redelivery within that time replays them.
        max_message_bytes: the largest encoded message ``tell`` accepts.
        approval_policy: the default deadline, default outcome and quorum of approval
            requests (an actor class may set its own ``approval_policy``).
        serve: False opens the store for administration only (the CLI, a web hook that
            decides approvals): no actor ever runs in this process; messages sent from it are
            stored for the runtimes that serve the store.
        gc: what the runtime does to CPython's cyclic garbage collector while it serves
            (process-wide; see ``tether.GcPolicy``): by default it raises the thresholds and
            freezes long-lived objects after activations; ``GcPolicy.unchanged()`` leaves
            the collector alone. Not applied with ``serve=False``.
        clock: the time source for delays, restart windows and backoff
            (``tether.testing.FakeClock`` in tests); also the lease clock of a store opened
            from ``path`` that has no clock of its own (SQLite, memory).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = "tether.db",
        *,
        store: Store | None = None,
        durability: str | None = None,
        max_attempts: int = 5,
        snapshot_every: int = 1000,
        lease_ttl: float = 10.0,
        passivate_after: float | None = 300.0,
        poll_interval: float = 0.1,
        retention: float = 7 * 24 * 3600.0,
        receipt_retention: float = 7 * 24 * 3600.0,
        max_message_bytes: int = 1 << 20,
        clock: Clock | None = None,
        approval_policy: ApprovalPolicy | None = None,
        serve: bool = True,
        gc: GcPolicy = _DEFAULT_GC,
    ) -> None:
        positive("max_attempts", max_attempts, integer=True)
        positive("snapshot_every", snapshot_every, integer=True)
        positive("lease_ttl", lease_ttl)
        positive("poll_interval", poll_interval)
        positive("retention", retention)
        positive("receipt_retention", receipt_retention)
        positive("max_message_bytes", max_message_bytes, integer=True)
        if passivate_after is not None:
            positive("passivate_after", passivate_after)
        if not isinstance(gc, GcPolicy):
            raise ConfigError(f"gc must be a tether.GcPolicy, not {gc!r}")
        if store is not None and durability is not None:
            # Never silently ignored: the store was opened with a durability of its own.
            raise ConfigError(
                "durability= applies to the store the Runtime opens; with store=, give it to "
                "the store (tether.SqliteStore(path, durability=...))"
            )
        self.time: Clock = clock if clock is not None else SystemClock()
        self.clock = self.time.now
        # The URL the store was opened from (None: a store object was given).
        self.path: str | None = None
        if store is None:
            options: dict[str, Any] = {} if durability is None else {"durability": durability}
            store = open_store(path, clock=self.clock, **options)
            self.path = os.fspath(path)
        self.store: Store = store
        self.max_attempts = max_attempts
        self.snapshot_every = snapshot_every
        self.lease_ttl = lease_ttl
        self.passivate_after = passivate_after
        self.poll_interval = poll_interval
        self.retention = retention
        self.receipt_retention = receipt_retention
        self.max_message_bytes = max_message_bytes
        self.serving = serve
        self.gc_policy = gc
        self.approval_policy = approval_policy if approval_policy is not None else ApprovalPolicy()
        self.host = this_host()  # the same-host shortcut's identity (tether.store.hosts)
        self.runtime_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.encode = msgspec.msgpack.Encoder().encode
        self._wire()

    def _wire(self) -> None:
        """Build the services, each given what it may touch (``kernel.py``)."""
        store, host = self.store, _cells_host(self)  # the runtime as its services see it
        self.life = Lifecycle(restart_pause=min(5.0, self.poll_interval * 10))
        self.committer = GroupCommitter(store)
        self.reads = Reader(store)  # activation reads, gathered (tether.runtime.reads)
        self.registry = Registry(store)
        self.cells = self.registry.cells
        self.claimed: set[str] = set()  # msg ids whose next delivery attempt is counted already
        # msg id -> attempt -> why it did not finish (its commit failed), for its error history
        self.unfinished: dict[str, dict[int, str]] = {}
        self.dead_letters = DeadLetters(host)
        self.quarantine = Quarantine(host)
        self.approvals = Approvals(host)
        self.guards = Guards(host)
        self.supervision = Supervision(host, self.guards)
        self.replies = Replies(store, self.registry.spec_only)
        own_prefix = new_prefix()  # of the ids of the messages sent here
        self.scheduler = Scheduler(_scheduler_host(self), own_prefix=own_prefix)
        life, registry, replies, claimed = self.life, self.registry, self.replies, self.claimed
        self.activation = Activation(
            host,
            registry,
            self.reads,
            self.supervision,
            replies,
            self.scheduler,
            functools.partial(Cell, host),
            life=life,
            claimed=claimed,
            runtime_id=self.runtime_id,
            lease_ttl=self.lease_ttl,
            serving=self.serving,
        )
        self.mail = Mail(
            host,
            registry,
            replies,
            self.activation,
            self.scheduler,
            own_prefix=own_prefix,
            life=life,
            encode=self.encode,
            claimed=claimed,
        )
        self.stopping = Stopping(
            host, registry, self.supervision, replies, self.mail, life=life, encode=self.encode
        )
        self.spawning = Spawning(host, registry, self.activation, self.mail, life=life)
        self.committer.on_stored = self.mail.message_stored
        self.committer.local = self.mail.local
        # What the services (Kernel) and the cells (CellHost) call of the runtime, bound once
        # to the service that does it: no hop through the facade on a message's trip.
        self.start_soon = self.life.start_soon
        self.activate = self.activation.activate
        self.leased_elsewhere = self.activation.leased_elsewhere
        self.activate_soon = self.activation.activate_soon
        self.activation_failed = self.activation.failed
        self.wake_actor = self.activation.wake_actor
        activation_exited, guards_leave = self.activation.cell_exited, self.guards.session_left

        def cell_exited(cell: LiveActor) -> None:
            activation_exited(cell)
            guards_leave(cell.actor_id)  # a session's guards here leave with it (guards.py)

        self.cell_exited = cell_exited
        self.forget_actor = self.activation.forget
        self.abandon_cell = self.registry.remove
        self.detach_if_idle = self.registry.detach_if_idle
        self.forget_status = self.registry.forget_status
        self.report_corrupt_actor = report_corrupt_actor
        self.spawn_cell = self.spawning.spawn_cell
        self.stop_record = self.stopping.stop_record
        self.stopped_for_good = self.stopping.stopped_for_good
        self.actor_stopped_itself = self.stopping.actor_stopped_itself
        self.prepare_message = self.mail.prepare_message
        self.route = self.mail.route
        self.step_committed = self.mail.step_committed
        self.reply_failed = self.replies.failed
        self.wake_at = self.scheduler.wake_at

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.store.open()
        if self.serving:
            _log_damage(self.store)
        try:
            now = self.clock()
            if self.serving:
                await self.store.register_runtime(
                    self.runtime_id, self.host, os.getpid(), process_start(os.getpid()) or now
                )
                await self.scheduler.reap_dead_runtimes()
            await self.life.enter()
        except BaseException:
            await self.store.close()
            raise
        self.life.open = True
        if self.serving:
            governor.enter(self.gc_policy)
        feed = self.store.changes
        if feed is not None:  # other processes' writes wake the scans now, not at the next poll
            feed.listen(self._store_changed)
        life, interval = self.life, self.poll_interval
        life.start_soon(self.committer.run)
        life.start_soon(self.reads.run)
        if not self.serving:  # asks from an admin process are answered by the serving ones
            life.keep_running("reply_poll", functools.partial(self.replies.keep_polling, interval))
        else:
            life.keep_running("scheduler", self.scheduler.scan)
            life.keep_running("lease_renewal", self.scheduler.renew_leases)
            life.keep_running("retention_purge", self.scheduler.purge)
        telemetry.log.debug(
            "runtime_opened",
            runtime_id=self.runtime_id,
            store=shown(self.path) if self.path else type(self.store).__name__,  # no password
            serving=self.serving,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Let every active actor finish its current message, release its lease, and close."""
        if not self.life.open or not self.life.started:
            return
        self.life.open = False
        with anyio.CancelScope(shield=True):
            cells = list(self.cells.values())
            for cell in cells:
                cell.leave()
            with anyio.move_on_after(10):
                for cell in cells:
                    await cell.exited.wait()
            await self.committer.close()  # drains, so no transaction is cut short by cancellation
        try:
            await self.life.exit()
        finally:
            # Always close the store: its connection threads are not daemons, and an unclosed
            # connection keeps the interpreter from exiting.
            with anyio.CancelScope(shield=True):
                try:
                    if self.serving:
                        await self.store.remove_runtime(self.runtime_id)
                finally:
                    if self.serving:
                        governor.exit(self.gc_policy)
                    await self.store.close()
        self.replies.close()
        telemetry.log.debug("runtime_closed", runtime_id=self.runtime_id)

    @property
    def is_open(self) -> bool:
        return self.life.open

    def _store_changed(self) -> None:
        """Another process wrote to the store (``Store.changes``): look now."""
        self.scheduler.wake()
        self.replies.wake()

    # -- spawning, addressing and sending -----------------------------------------------------

    async def spawn(self, actor_class: type[A], actor_id: str, /, **init: Any) -> ActorRef:
        """Create the actor ``actor_id`` (or resume it, if it exists) and activate it.

        ``init`` is passed to the class's constructor; it is stored, so it must be
        msgspec-encodable, and the same values are given again on every recovery.
        """
        return await self.spawn_child(actor_class, actor_id, None, init)

    async def spawn_child(
        self, actor_class: type[A], actor_id: str, parent_id: str | None, init: dict[str, Any]
    ) -> ActorRef:
        """``spawn`` with a parent (used by supervisors)."""
        await self.spawning.spawn_cell(actor_class, actor_id, parent_id, init)
        return ActorRef(self.mail, actor_id)

    def ref(self, actor_id: str) -> ActorRef:
        """The ref of an existing actor, active or passivated. Sends through it raise
        ``ActorNotFound`` if no actor with this id exists in the store."""
        # A ref with an id no actor can have (None, "", 5) would only fail at its first send,
        # far from the mistake: refused here, naming it.
        check_id(actor_id)
        return ActorRef(self.mail, actor_id)

    async def lookup(self, actor_id: str) -> ActorRef:
        """Like ``ref``, but checks now that the actor exists."""
        await self.registry.spec_of(actor_id)
        return ActorRef(self.mail, actor_id)

    def tell(
        self, actor_id: str, msg: Message, *, dedup_key: str | None, delay: float | None
    ) -> Coroutine[Any, Any, None]:
        """``self.ref(actor_id).tell(msg, ...)``: returns once ``msg`` is stored (I1)."""
        return self.mail.tell(actor_id, msg, dedup_key=dedup_key, delay=delay)

    def ask(
        self, actor_id: str, msg: Message, *, timeout: float, dedup_key: str | None
    ) -> Coroutine[Any, Any, Any]:
        """``self.ref(actor_id).ask(msg, ...)``: the handler's return value."""
        return self.mail.ask(actor_id, msg, timeout=timeout, dedup_key=dedup_key)

    def stop(self, actor_id: str, reason: str) -> Coroutine[Any, Any, None]:
        """Stop an actor for good: it finishes its current message; the rest go to dead letters."""
        return self.stopping.stop(actor_id, reason)

    # -- supervision and death watch ----------------------------------------------------------

    async def add_child(self, supervisor_id: str, spec: ChildSpec) -> ActorRef:
        """Start a dynamic child under a running supervisor (like OTP's start_child).

        Raises ``AlreadyStarted`` if an actor with that id is running, ``ActorIdTaken`` if the
        id cannot be given to a new child now (the reason says why and what would free it),
        and ``ChildStartFailed`` if the child failed to start (it was not added). An id whose
        actor has stopped (removed, or a temporary child that ended) goes to the new child,
        which starts clean: see ``docs/supervision.md``, "Adding a child under a used id"."""
        await self.spawning.add_child(supervisor_id, spec)
        return ActorRef(self.mail, spec.child_id)

    async def remove_child(
        self, supervisor_id: str, child_id: str, reason: str = "removed"
    ) -> bool:
        """Stop a child for good and remove it from its supervisor. False if it was not a child."""
        return await self.spawning.remove_child(supervisor_id, child_id, reason)

    async def watch(self, watcher: str, watched: str) -> None:
        """``watcher`` receives ``Terminated`` when ``watched`` stops for good."""
        await self.stopping.watch(watcher, watched)

    # -- introspection ------------------------------------------------------------------------

    async def tree(
        self, *, on_corrupt: Callable[[str, CorruptRecordError], None] | None = None
    ) -> list[TreeNode]:
        """The supervision tree: every actor in the store under its supervisor, with its live
        status, restart count and last failure. Top-level actors are the roots.

        An actor whose row is damaged is left out (its children become roots) and reported as
        ``on_corrupt(actor_id, error)``; without ``on_corrupt``, logged once."""
        return await supervision_tree(_cells_host(self), on_corrupt or report_corrupt_actor)

    async def session_info(self, session_id: str) -> SessionInfo:
        """The status, task, belief and frontier of the agent session ``session_id``, from its
        committed journal: read from the store, never through its mailbox, so it answers at
        once while a step runs (``GetSessionInfo`` waits behind that step), and from an
        administration process too. A step under way shows once it commits."""
        self.life.check_open()
        check_id(session_id)
        return await session_info(self, session_id)

    def stats(self) -> dict[str, int]:
        """Counters for tests and benchmarks: active actors, commits and writes so far."""
        return {
            "active": len(self.cells),
            "commits": self.committer.commits,
            "writes": self.committer.writes,
        }


def _log_damage(store: Store) -> None:
    """Name what the store found damaged at open. Served on: an actor whose rows are damaged is
    named, and left unserved, when it is read (its fold checks every event up to its head);
    the others go on. (An administration process says nothing: `tether check` reports it.)"""
    if isinstance(store, SelfChecking) and store.damage_at_open:
        telemetry.log.error(
            "store_damaged",
            problems=list(store.damage_at_open),
            advice="run `tether check` on the store, and restore it from a backup",
        )


def _cells_host(runtime: Runtime) -> CellHost:
    """``runtime`` as its cells and services see it (``CellHost``, which extends ``Kernel``):
    it meets the protocol by its shape, checked here, out of the class, where mypy knows the
    type of every member bound in ``_wire``."""
    return runtime


def _scheduler_host(runtime: Runtime) -> SchedulerHost:
    """``runtime`` as its scheduler sees it (checked as ``_cells_host``)."""
    return runtime
