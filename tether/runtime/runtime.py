"""``Runtime``: the process-level system that owns the store, the cells and the scheduler.

One Runtime per process and store file. On open it registers itself, then its scheduler finds
every actor with queued or in-flight messages and activates it, so work continues where the
last process stopped. Several Runtimes (processes) may share one SQLite file: each actor is
active in at most one of them at a time, under a lease with a fencing token (I8).
"""

from __future__ import annotations

import asyncio
import collections
import os
import secrets
import socket
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

import anyio
import msgspec

from tether import telemetry
from tether.actors.actor import Actor, ActorSpec, actor_spec, check_init, current_path, import_class
from tether.actors.guards.gate import ApprovalPolicy
from tether.actors.messages import (
    UNENCODABLE,
    Message,
    Terminated,
)
from tether.actors.ref import ActorRef
from tether.errors import (
    ActorIdTaken,
    ActorNotFound,
    ActorStopped,
    AlreadyStarted,
    AskTimeout,
    ChildStartFailed,
    ConfigError,
    CorruptRecordError,
    RuntimeClosed,
    StoreError,
)
from tether.runtime.activations import ActivationQueue
from tether.runtime.approval_desk import Approvals
from tether.runtime.cell import Cell
from tether.runtime.clock import Clock, SystemClock
from tether.runtime.collector import GcPolicy, governor
from tether.runtime.committer import GroupCommitter
from tether.runtime.dead_letters import DeadLetters
from tether.runtime.guards import Guards
from tether.runtime.journal import folded
from tether.runtime.kernel import ActiveCell
from tether.runtime.mail import Mail, check_type, due_now
from tether.runtime.quarantine import Quarantine
from tether.runtime.reads import Reader
from tether.runtime.replies import Replies
from tether.runtime.scheduler import Scheduler
from tether.runtime.spawn_args import decode_init
from tether.runtime.step import Step, current_step
from tether.runtime.supervision import Supervision
from tether.runtime.tree import TreeNode, supervision_tree
from tether.store.hosts import process_start, this_host
from tether.store.integrity import SelfChecking
from tether.store.open import open_store, shown
from tether.store.protocol import Store
from tether.store.records import (
    ActorRecord,
    BatchResult,
    LeaseAcquire,
    LeaseRelease,
    NewMessage,
    Spawn,
    StepCommit,
    StopActor,
    StoredMessage,
    Watch,
)
from tether.supervisor.guards import check_id_use
from tether.supervisor.spec import ChildSpec

if TYPE_CHECKING:
    from tether.actors.session import SessionInfo

A = TypeVar("A", bound=Actor[Any])

_MAX_ID_LEN = 256
_DEFAULT_GC = GcPolicy()
_ACTIVATING_AT_ONCE = 128  # activations under way at a time (tether.runtime.activations)


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
        _positive("max_attempts", max_attempts, integer=True)
        _positive("snapshot_every", snapshot_every, integer=True)
        _positive("lease_ttl", lease_ttl)
        _positive("poll_interval", poll_interval)
        _positive("retention", retention)
        _positive("receipt_retention", receipt_retention)
        _positive("max_message_bytes", max_message_bytes, integer=True)
        if passivate_after is not None:
            _positive("passivate_after", passivate_after)
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
        self.host = this_host()  # the same-host shortcut's identity (tether.store.hosts)
        self.runtime_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.committer = GroupCommitter(store, on_stored=self._message_stored)
        self.reads = Reader(store)  # activation reads, gathered (tether.runtime.reads)
        self.cells: dict[str, Cell] = {}
        self.claimed: set[str] = set()  # msg ids whose next delivery attempt is counted already
        # msg id -> attempt -> why it did not finish (its commit failed), for its error history
        self.unfinished: dict[str, dict[int, str]] = {}
        self.dead_letters = DeadLetters(self)
        self.quarantine = Quarantine(self)
        self.approvals = Approvals(self)
        self.serving = serve
        self.gc_policy = gc
        self.guards = Guards(self)
        self.supervision = Supervision(self, self.guards)
        self.approval_policy = approval_policy if approval_policy is not None else ApprovalPolicy()

        self._encoder = msgspec.msgpack.Encoder()
        self.encode = self._encoder.encode
        self.mail = Mail(self.encode, self.clock, max_message_bytes)
        self._known: dict[str, tuple[ActorSpec, str]] = {}  # actor id -> (spec, status)
        self.replies = Replies(store, self._spec_only)
        self._activating: dict[str, asyncio.Event] = {}  # in progress; set when done
        self._to_activate = ActivationQueue(
            self._activate_quietly, self.start_soon, _ACTIVATING_AT_ONCE
        )
        self._not_before: dict[str, float] = {}  # actor id -> earliest next activation attempt
        self._failures: dict[str, int] = {}
        self._stopping: set[str] = set()
        self.scheduler = Scheduler(self, own_prefix=self.mail.own_prefix)
        self._replies_wake = asyncio.Event()  # an admin process's: a reply may be stored
        self._tg: anyio.abc.TaskGroup | None = None
        # Tasks asked for where none can be started (a loop callback): started by _starter.
        self._pending_starts: collections.deque[
            tuple[Callable[..., Coroutine[Any, Any, Any]], tuple[Any, ...]]
        ] = collections.deque()
        self._starts_wake = asyncio.Event()
        self._open = False

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.store.open()
        if self.serving and isinstance(self.store, SelfChecking) and self.store.damage_at_open:
            # Served on: an actor whose rows are damaged is named, and left unserved, when it
            # is read (its fold checks every event up to its head); the others go on. (An
            # administration process says nothing: `tether check` reports it, in full.)
            telemetry.log.error(
                "store_damaged",
                problems=list(self.store.damage_at_open),
                advice="run `tether check` on the store, and restore it from a backup",
            )
        try:
            now = self.clock()
            if self.serving:
                await self.store.register_runtime(
                    self.runtime_id, self.host, os.getpid(), process_start(os.getpid()) or now
                )
                await self.scheduler.reap_dead_runtimes()
            self._tg = anyio.create_task_group()
            await self._tg.__aenter__()
        except BaseException:
            await self.store.close()
            raise
        self._open = True
        if self.serving:
            governor.enter(self.gc_policy)
        feed = self.store.changes
        if feed is not None:  # other processes' writes wake the scans now, not at the next poll
            feed.listen(self._store_changed)
        self._tg.start_soon(self._starter)
        self._tg.start_soon(self.committer.run)
        self._tg.start_soon(self.reads.run)
        if not self.serving:  # asks from an admin process are answered by the serving ones
            self._tg.start_soon(self._keep_running, "reply_poll", self._reply_poller)
        if self.serving:
            self._tg.start_soon(self._keep_running, "scheduler", self.scheduler.scan)
            self._tg.start_soon(self._keep_running, "lease_renewal", self.scheduler.renew_leases)
            self._tg.start_soon(self._keep_running, "retention_purge", self.scheduler.purge)
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
        if not self._open or self._tg is None:
            return
        self._open = False
        tg = self._tg
        with anyio.CancelScope(shield=True):
            cells = list(self.cells.values())
            for cell in cells:
                cell.leave()
            with anyio.move_on_after(10):
                for cell in cells:
                    await cell.exited.wait()
            await self.committer.close()  # drains, so no transaction is cut short by cancellation
        tg.cancel_scope.cancel()
        try:
            await tg.__aexit__(None, None, None)
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

    def _check_open(self) -> None:
        if not self._open:
            raise RuntimeClosed(
                "the Runtime is not open; use `async with tether.Runtime(...) as rt:`"
            )

    # -- spawning and addressing --------------------------------------------------------------

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
        await self.spawn_cell(actor_class, actor_id, parent_id, init)
        return ActorRef(self, actor_id)

    async def spawn_cell(
        self, actor_class: type[A], actor_id: str, parent_id: str | None, init: dict[str, Any]
    ) -> Cell | None:
        """``spawn_child``; the cell it started (or found) here, even if it has left since,
        or None if the actor is active in another runtime."""
        self._check_open()
        _check_id(actor_id)
        check_id_use(actor_id, actor_class, parent_id)
        spec = actor_spec(actor_class)
        init_bytes = self._encode_init(spec, actor_id, init)
        record = ActorRecord(
            actor_id=actor_id,
            class_path=spec.class_path,
            init=init_bytes,
            parent_id=parent_id,
            status="active",
            stop_reason=None,
            fence=0,
            lease_owner=None,
            lease_expires=0.0,
            created_at=self.clock(),
        )
        result = await self.committer.submit(Spawn(record))
        stored = result.spawned.get(actor_id)
        if stored is None:  # the id is taken by a damaged row: this read names the damage
            stored = await self.store.get_actor(actor_id)
            if stored is None:
                raise StoreError(f"spawning {actor_id!r} stored no record")
        if current_path(stored.class_path) != spec.class_path:
            taken = f"it is taken by a {stored.class_path}, not a {spec.class_path}"
            if parent_id is not None:  # a supervisor starting a child (see Supervision.start_child)
                raise ActorIdTaken(actor_id, taken)
            raise ConfigError(f"actor id {actor_id!r}: {taken}")
        if parent_id is not None and stored.parent_id != parent_id:
            # Two supervisors cannot share a child: the one that stored it first keeps it.
            raise ActorIdTaken(actor_id, f"it is a child of {stored.parent_id!r}")
        if stored.status != "active":
            raise ActorStopped(actor_id, stored.stop_reason)
        self._known[actor_id] = (spec, stored.status)
        cell = await self._activate(actor_id, by_parent=parent_id is not None)
        if cell is not None:
            if parent_id is None:
                cell.start_awaited = True
            await cell.ready.wait()  # like OTP's start_link: on_start has run when spawn returns
            if parent_id is None and isinstance(cell.start_error, ChildStartFailed):
                raise cell.start_error  # a supervisor whose declared child did not start
        return cell

    def _encode_init(self, spec: ActorSpec, actor_id: str, init: dict[str, Any]) -> bytes:
        """Spawn arguments as stored; checked now against what recovery will decode."""
        encoded = check_init(spec.cls, init, f"cannot spawn {actor_id!r}")
        decoded = decode_init(spec, encoded)
        # Construct it once, as recovery will: a constructor that refuses these arguments (an
        # agent session with an empty goal or no model) is refused now, before anything is
        # stored. Otherwise the actor was stored, spawn returned, and every activation failed.
        try:
            spec.cls(**decoded)
        except ConfigError as exc:
            raise ConfigError(f"cannot spawn {actor_id!r}: {exc}") from exc
        except Exception as exc:
            raise ConfigError(
                f"cannot spawn {actor_id!r}: {spec.cls.__qualname__}(...) raised {exc!r}"
            ) from exc
        return encoded

    def ref(self, actor_id: str) -> ActorRef:
        """The ref of an existing actor, active or passivated. Sends through it raise
        ``ActorNotFound`` if no actor with this id exists in the store."""
        # A ref with an id no actor can have (None, "", 5) would only fail at its first send,
        # far from the mistake: refused here, naming it.
        _check_id(actor_id)
        return ActorRef(self, actor_id)

    async def lookup(self, actor_id: str) -> ActorRef:
        """Like ``ref``, but checks now that the actor exists."""
        await self._spec_of(actor_id)
        return ActorRef(self, actor_id)

    async def _spec_only(self, actor_id: str) -> ActorSpec:
        return (await self._spec_of(actor_id))[0]

    async def _spec_of(self, actor_id: str) -> tuple[ActorSpec, str]:
        known = self._known.get(actor_id)
        if known is not None:
            return known
        rec = await self.store.get_actor(actor_id)
        if rec is None:
            raise ActorNotFound(actor_id)
        known = (actor_spec(import_class(rec.class_path)), rec.status)
        self._known[actor_id] = known
        return known

    # -- sending ------------------------------------------------------------------------------

    async def tell(
        self, actor_id: str, msg: Message, *, dedup_key: str | None, delay: float | None
    ) -> None:
        if not self._open:
            self._check_open()  # raises
        spec = self._active_spec(actor_id) or await self._spec_for_send(actor_id, msg)
        new = self.mail.prepare(actor_id, spec, msg, dedup_key, delay, wants_reply=False)
        step = current_step.get()
        if step is not None and not step.closed and step.cell.runtime is self:
            step.add_outbox(new)  # committed with the sender's step (I2)
            return
        self._claim_on_insert(new)
        if self.committer.apply_now(new) is None:  # routed by _message_stored once stored
            await self.committer.submit(new)

    async def ask(
        self, actor_id: str, msg: Message, *, timeout: float, dedup_key: str | None
    ) -> Any:
        if not self._open:
            self._check_open()  # raises
        if not (type(timeout) in (float, int) and timeout > 0):  # the usual case, checked cheaply
            _positive("ask timeout", timeout)
        spec = self._active_spec(actor_id) or await self._spec_for_send(actor_id, msg)
        new = self.mail.prepare(actor_id, spec, msg, dedup_key, None, wants_reply=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        fut: asyncio.Future[Any] = loop.create_future()
        waiting_on = new.msg_id
        self.replies.wait(waiting_on, actor_id, fut)
        try:
            self._claim_on_insert(new)
            result = self.committer.apply_now(new)  # a store that never waits (MemoryStore)
            if result is None:
                submitted = self.committer.submit(new)
                if submitted.done():
                    result = submitted.result()
                else:
                    try:
                        with anyio.fail_at(deadline):
                            result = await submitted
                    except TimeoutError:
                        raise AskTimeout(actor_id, type(msg).__name__, timeout) from None
            original = result.duplicates.get(new.msg_id)  # else routed by _message_stored
            if original is not None:
                # Asked before with this dedup key: wait for (or fetch) the first reply.
                self.replies.unwait(waiting_on, fut)
                waiting_on = original
                self.replies.wait(waiting_on, actor_id, fut)
                self.scheduler.wake()
            # A deadline fails the reply future: cheaper than a cancel scope around the wait.
            self.replies.deadline(loop, deadline, fut, (actor_id, type(msg).__name__, timeout))
            return await fut
        finally:
            if waiting_on in self.replies:  # else answered (resolve removed it) or never waited
                self.replies.unwait(waiting_on, fut)

    async def stop(self, actor_id: str, reason: str) -> None:
        """Stop an actor for good: it finishes its current message; the rest go to dead letters."""
        self._check_open()
        # A ref or a non-string reason failed deep in the store (SQLite: a binding error; the
        # memory store: ActorNotFound, or a list stored as the reason): refused here, by name.
        _check_id(actor_id)
        if not isinstance(reason, str):
            raise ConfigError(f"stop reason must be a string, not {reason!r}")
        spec, status = await self._spec_of(actor_id)
        if status != "active":
            return
        self._stopping.add(actor_id)
        self.supervision.cancel_restart(actor_id)
        try:
            cell = self.cells.get(actor_id)
            if cell is not None:
                cell.stop_reason = reason
                cell.wake.set()
                await cell.exited.wait()
            # A supervisor's children go down next, in reverse start order, each within its own
            # shutdown budget (OTP shutdown), and are then stopped for good, likewise.
            await self.supervision.shutdown_children(actor_id, cell, "stopped")
            children = await self.store.list_actors(
                parent_id=actor_id, on_corrupt=self.report_corrupt_actor
            )
            for child in reversed(children):
                if child.status == "active":
                    await self.stop(child.actor_id, f"supervisor {actor_id} stopped: {reason}")
            await self.committer.submit(self.stop_record(actor_id, reason))
            self._known[actor_id] = (spec, "stopped")
            self.stopped_for_good(actor_id, reason)
        finally:
            self._stopping.discard(actor_id)
        telemetry.supervision_event("actor_stopped", actor_id, reason=reason)

    def _active_spec(self, actor_id: str) -> ActorSpec | None:
        """The spec of an actor this runtime knows to be active, or None: the fast path of a
        send (no store read, no coroutine). ``_known`` is updated by every stop and status
        change made here; another process's stop is caught when the actor is activated."""
        known = self._known.get(actor_id)
        return known[0] if known is not None and known[1] == "active" else None

    async def _spec_for_send(self, actor_id: str, msg: Message) -> ActorSpec:
        """The slow path of ``_active_spec``: read the registry; refuse a send to an actor
        that is not active (after the type check: a wrong type is reported first)."""
        spec, status = await self._spec_of(actor_id)
        if status != "active":
            check_type(actor_id, spec, msg)
            rec = await self.store.get_actor(actor_id)
            raise ActorStopped(actor_id, rec.stop_reason if rec else None)
        return spec

    def prepare_message(
        self, actor_id: str, spec: ActorSpec, msg: Message, dedup_key: str | None
    ) -> NewMessage:
        """A message the runtime itself sends ``actor_id`` (whose spec is ``spec``), checked as
        every send is; stored by the caller's own write, then handed to ``route``."""
        return self.mail.prepare(actor_id, spec, msg, dedup_key, None, wants_reply=False)

    def _claim_on_insert(self, new: NewMessage) -> None:
        """Count the first delivery attempt in the insert itself when the receiver is idle and
        active here, so it will run this message next: one commit fewer per message. If the
        process dies first, the message has one attempt too many, never one too few (I7).

        The claim is registered before the commit: a rescan may hand the cell the stored row
        before the message is routed, and that copy's attempt is counted already too."""
        cell = self.cells.get(new.actor_id)
        if (
            cell is not None
            and cell.instance is not None
            and cell.current is None
            and not cell.buffer
            and due_now(new, self.clock)
        ):
            new.attempts = 1
            self.claimed.add(new.msg_id)

    def _message_stored(self, new: NewMessage, result: BatchResult | None) -> None:
        """The committer's report on a sent message (``result`` None: not stored, or not known
        to be), whether or not its sender still waits: cancelled, or its ask timed out, the
        message was stored all the same and must reach its cell."""
        if result is None or new.msg_id in result.duplicates:
            if new.attempts:
                self.claimed.discard(new.msg_id)  # no row of ours carries that attempt
            return
        self.route(new)

    def route(self, new: NewMessage) -> None:
        """After ``new`` committed (on its own, or with the write of a step or of a dead
        letter): hand it to its cell here, or wake whoever must run it."""
        if not due_now(new, self.clock):
            self.scheduler.wake_at(new.deliver_at)
            return
        cell = self.cells.get(new.actor_id)
        if cell is not None:
            cell.offer(
                StoredMessage(
                    msg_id=new.msg_id,
                    actor_id=new.actor_id,
                    type=new.type,
                    payload=new.payload,
                    deliver_at=new.deliver_at,
                    attempts=new.attempts,
                    wants_reply=new.wants_reply,
                    decoded=new.decoded,
                    traceparent=new.traceparent,
                )
            )
        else:
            self.activate_soon(new.actor_id)

    # -- replies ------------------------------------------------------------------------------

    def encode_reply(self, spec: ActorSpec, value: Any) -> bytes:
        try:
            return self.encode(value)
        except UNENCODABLE as exc:
            raise TypeError(
                f"{spec.cls.__qualname__}.handle returned a {type(value).__name__}, which cannot be "
                f"stored as a reply: {exc}"
            ) from exc

    def reply_failed(self, msg_id: str, actor_id: str, errors: list[str]) -> None:
        self.replies.failed(msg_id, actor_id, errors)

    def stopped_for_good(self, actor_id: str, reason: str) -> None:
        """``actor_id``'s stop committed: the asks still waiting on it here are answered now,
        not at their timeout nor at the next poll (``Replies.answer_stopped``)."""
        if self.replies.waits_on(actor_id):
            self.start_soon(self.replies.answer_stopped, actor_id, reason)

    def _store_changed(self) -> None:
        """Another process wrote to the store (``Store.changes``): look now."""
        self.scheduler.wake()
        self._replies_wake.set()

    # -- what cells report --------------------------------------------------------------------

    def step_committed(
        self,
        cell: Cell,
        msg: StoredMessage,
        reply: Any,
        commit: StepCommit,
        result: BatchResult,
        step: Step,
    ) -> None:
        self._failures.pop(cell.actor_id, None)
        if msg.wants_reply and msg.msg_id in self.replies and not step.reply_deferred:
            self.replies.resolve(msg.msg_id, reply)
        for msg_id, value in step.late_replies:
            if msg_id in self.replies:
                self.replies.resolve(msg_id, value)
        for new in commit.outbox:
            if new.msg_id not in result.duplicates:
                self.route(new)

    def actor_stopped_itself(self, cell: Cell, reason: str) -> None:
        from tether.supervisor.supervisor import ChildExited

        self._known[cell.actor_id] = (cell.spec, "stopped")
        self.stopped_for_good(cell.actor_id, reason)
        telemetry.log.info("actor_stopped", actor_id=cell.actor_id, reason=reason)
        parent = self.cells.get(cell.parent_id) if cell.parent_id is not None else None
        if parent is not None:
            parent.offer_local(ChildExited(child_id=cell.actor_id, reason=reason))

    def stop_record(self, actor_id: str, reason: str, *, status: str = "stopped") -> StopActor:
        """The write that stops ``actor_id`` for good and notifies its watchers."""
        notice = self.encode(Terminated(actor_id=actor_id, reason=reason, status=status))
        return StopActor(actor_id, reason, self.clock(), notice, status)

    def forget_actor(self, actor_id: str) -> None:
        """Drop what this runtime remembers of ``actor_id`` (its id went to a new actor)."""
        self._known.pop(actor_id, None)
        self._not_before.pop(actor_id, None)
        self._failures.pop(actor_id, None)
        self.supervision.root_restarts.pop(actor_id, None)
        self.supervision.root_last_failure.pop(actor_id, None)

    def forget_status(self, actor_id: str, status: str) -> None:
        known = self._known.get(actor_id)
        if known is not None:
            self._known[actor_id] = (known[0], status)

    @property
    def is_open(self) -> bool:
        return self._open

    def wake_at(self, when: float) -> None:
        """Make the scheduler look at the mailboxes again at ``when`` (a parked step's deadline)."""
        self.scheduler.wake_at(when)

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``fn(*args)`` in the runtime's task group (it ends with the runtime), whether
        called from a task or from a callback of the event loop.

        The group committer settles writes, and so routes the messages it stored, from loop
        callbacks too (the later slices of a large batch, every 32nd write of a store that
        never waits). No task runs there, and anyio cannot start one: it finds the running
        async library through the current task (with sniffio installed, as it is beside most
        HTTP clients), and raises ``NoEventLoopError``. Such starts go to ``_starter``, a task,
        which makes them on its next turn."""
        tg = self._tg
        if tg is None:
            raise RuntimeClosed("the Runtime is not open")
        if asyncio.current_task() is not None:
            tg.start_soon(fn, *args)
        else:
            self._pending_starts.append((fn, args))
            self._starts_wake.set()

    async def _starter(self) -> None:
        """Start the tasks asked for from loop callbacks (see ``start_soon``), in order."""
        pending, wake = self._pending_starts, self._starts_wake
        while True:
            await wake.wait()
            wake.clear()
            while pending and self._tg is not None:
                fn, args = pending.popleft()
                self._tg.start_soon(fn, *args)

    def activation_failed(self, actor_id: str, exc: Exception) -> None:
        n = self._failures.get(actor_id, 0) + 1
        self._failures[actor_id] = n
        delay = min(60.0, 0.5 * 2**n)
        self._not_before[actor_id] = self.clock() + delay
        # Try again once the backoff is over: the actor may hold queued mail that no new send
        # and no orphan scan will bring up (its lease is still ours, and renewed).
        if self._open and self.serving and self._tg is not None:
            self.start_soon(self._activate_later, actor_id, delay)

    async def _activate_later(self, actor_id: str, delay: float) -> None:
        await self.time.sleep(delay)
        if actor_id not in self.cells:
            self.activate_soon(actor_id)

    def cell_exited(self, cell: Cell) -> None:
        if self.cells.get(cell.actor_id) is cell:
            del self.cells[cell.actor_id]
        known = self._known.get(cell.actor_id)
        if known is not None and known[1] != "active":  # stopped for good: its messages are gone
            self.claimed.difference_update(cell.known)
        children = getattr(cell.instance, "child_entries", None)
        if children is not None and self.supervision.failures:
            self.supervision.supervisor_left(cell.actor_id, {e.child_id for e in children()})
        for msg_id in cell.known:  # asks still waiting on a cell that left: poll the store
            if msg_id in self.replies:
                self.scheduler.wake()

    def abandon_cell(self, cell: ActiveCell) -> None:
        """Forget ``cell``, which ignores its cancellation: the next activation takes a new
        fencing token, so whatever it still tries to commit is rejected (I8)."""
        if self.cells.get(cell.actor_id) is cell:
            del self.cells[cell.actor_id]

    def detach_if_idle(self, cell: Cell) -> bool:
        """Remove an idle cell from the registry (passivation); False if work arrived."""
        if cell.buffer or cell.rescan_requested or not cell.spec.cls.passivates:
            return False
        if self.cells.get(cell.actor_id) is cell:
            del self.cells[cell.actor_id]
        known = self._known.get(cell.actor_id)
        if known is not None and known[1] == "active":  # the store has it: read it again later
            del self._known[cell.actor_id]
        return True

    # -- activation ---------------------------------------------------------------------------

    def wake_actor(self, actor_id: str) -> None:
        """Messages for ``actor_id`` were stored outside the send path: make sure they run."""
        cell = self.cells.get(actor_id)
        if cell is not None:
            cell.rescan_requested = True
            cell.wake.set()
        else:
            self._not_before.pop(actor_id, None)
            self.activate_soon(actor_id)

    def activate_soon(self, actor_id: str) -> None:
        if (
            self.serving
            and self._tg is not None
            and actor_id not in self._activating
            and actor_id not in self.cells
        ):
            self._to_activate.add(actor_id)  # in the order found, a bounded number at a time

    async def _activate_quietly(self, actor_id: str) -> Cell | None:
        try:
            return await self._activate(actor_id)
        except CorruptRecordError as exc:
            # Its row (or its parent's) is damaged: it is not served, its mail waits in the
            # mailbox until the row is repaired. Logged once; retried after the backoff.
            self.report_corrupt_actor(actor_id, exc)
            self.activation_failed(actor_id, exc)
        except Exception as exc:  # noqa: BLE001 - recorded; retried after a backoff
            telemetry.log.error("activation_failed", actor_id=actor_id, error=repr(exc))
            self.activation_failed(actor_id, exc)
        return None

    @staticmethod
    def report_corrupt_actor(actor_id: str, exc: CorruptRecordError) -> None:
        telemetry.report_corrupt("actor_record_corrupt", actor_id, exc, actor_id=actor_id)

    async def activate(self, actor_id: str) -> Cell | None:
        """Activate ``actor_id`` here if nobody else owns it; its cell, or None."""
        return await self._activate(actor_id)

    async def _activate(self, actor_id: str, *, by_parent: bool = False) -> Cell | None:
        """Take the actor's lease and start its cell here; None if someone else holds it.

        ``by_parent``: the actor's supervisor is starting it. Anyone else defers a child to its
        supervisor while that one is starting: it starts its children itself, in order."""
        cell = self.cells.get(actor_id)
        if cell is not None or actor_id in self._stopping or not self._open or not self.serving:
            return cell
        for _ in range(2):
            in_progress = self._activating.get(actor_id)
            if in_progress is None:
                break
            # Someone else is activating it: share the outcome. An activation that ended
            # without a cell may only have deferred to the parent (which may be the caller,
            # starting its children): then try once more here.
            await in_progress.wait()
            cell = self.cells.get(actor_id)
            if cell is not None or actor_id in self._stopping or not self._open:
                return cell
        else:
            return self.cells.get(actor_id)
        now = self.clock()
        if self._not_before.get(actor_id, 0.0) > now:
            return None
        done = self._activating[actor_id] = asyncio.Event()
        try:
            rec = await self.reads.get_actor(actor_id)
            if rec is None:
                # Every send checks the registry, so only a damaged store holds mail for an
                # actor it does not know: dead-letter that mail, with the reason, at once.
                telemetry.log.error("mail_for_unknown_actor", actor_id=actor_id)
                await self.committer.submit(
                    self.stop_record(actor_id, f"no actor {actor_id!r} in this store")
                )
                return None
            spec = actor_spec(import_class(rec.class_path))
            if rec.status != "active":
                self._known[actor_id] = (spec, rec.status)
                # Messages stored by another process after the stop: record them, drop nothing.
                why = rec.stop_reason or rec.status
                await self.committer.submit(self.stop_record(actor_id, why, status=rec.status))
                self.stopped_for_good(actor_id, why)
                return None
            parent = self.cells.get(rec.parent_id) if rec.parent_id is not None else None
            if rec.parent_id is not None and (
                parent is None or not (by_parent or parent.ready.is_set())
            ):
                # A subtree lives in one runtime: start the supervisor, which starts its children.
                del self._activating[actor_id]
                done.set()
                if parent is None:
                    parent = await self._activate(rec.parent_id)
                    if parent is None:
                        return None
                await parent.ready.wait()  # its on_start starts the children it starts itself
                cell = self.cells.get(actor_id)
                if cell is not None or self.cells.get(rec.parent_id) is not parent:
                    return cell
                # Not one its supervisor starts itself (a child started on first use, like a
                # guard): the supervisor is up now, so this one starts under it, at once.
                return await self._activate(actor_id)
            result = await self.committer.submit(
                LeaseAcquire(actor_id, self.runtime_id, self.lease_ttl)
            )
            fence = result.leases.get(actor_id)
            if fence is None:
                self._not_before[actor_id] = now + self.lease_ttl / 2
                return None
            self._not_before.pop(actor_id, None)
            if actor_id in self.supervision.held or actor_id in self._stopping:
                # Held by its supervisor while we were acquiring: it is not ours to start.
                await self.committer.submit(LeaseRelease(actor_id, fence))
                return None
            self._known.setdefault(actor_id, (spec, "active"))
            cell = Cell(self, spec, actor_id, decode_init(spec, rec.init), fence, rec.parent_id)
            self.cells[actor_id] = cell
            self.start_soon(cell.run)
            telemetry.activations.add(1)
            governor.activated(len(self.cells))
            return cell
        finally:
            if self._activating.get(actor_id) is done:
                del self._activating[actor_id]
            done.set()

    # -- background tasks ---------------------------------------------------------------------

    async def _keep_running(self, name: str, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run a background loop; a store error is logged and the loop starts again after a
        pause, so one bad read never stops the runtime from serving."""
        while True:
            try:
                await fn()
            except Exception as exc:  # noqa: BLE001 - logged; the loop restarts
                telemetry.log.error("background_task_failed", task=name, error=repr(exc))
                await anyio.sleep(min(5.0, self.poll_interval * 10))

    async def _reply_poller(self) -> None:
        while True:
            self._replies_wake.clear()
            await self.replies.poll()
            with anyio.move_on_after(self.poll_interval):
                await self._replies_wake.wait()

    # -- supervision and death watch ----------------------------------------------------------

    async def add_child(self, supervisor_id: str, spec: ChildSpec) -> ActorRef:
        """Start a dynamic child under a running supervisor (like OTP's start_child).

        Raises ``AlreadyStarted`` if an actor with that id is running, ``ActorIdTaken`` if the
        id cannot be given to a new child now (the reason says why and what would free it),
        and ``ChildStartFailed`` if the child failed to start (it was not added). An id whose
        actor has stopped (removed, or a temporary child that ended) goes to the new child,
        which starts clean: see ``docs/supervision.md``, "Adding a child under a used id"."""
        from tether.supervisor.supervisor import AddChild

        cls_spec = actor_spec(spec.actor_class)
        _check_id(spec.child_id)
        check_id_use(spec.child_id, spec.actor_class, supervisor_id)
        init = self._encode_init(cls_spec, spec.child_id, spec.init)
        msg = AddChild(
            child_id=spec.child_id,
            class_path=cls_spec.class_path,
            restart=spec.restart,
            shutdown=spec.shutdown,
            init=init,
        )
        refused = await self.ask(supervisor_id, msg, timeout=60.0, dedup_key=None)
        if refused is not None:
            kind, detail = refused
            child_id = spec.child_id
            if kind == "AlreadyStarted":
                raise AlreadyStarted(child_id, detail or None)
            if kind == "ChildStartFailed":
                raise ChildStartFailed(supervisor_id, child_id, detail)
            raise ActorIdTaken(child_id, detail)
        return ActorRef(self, spec.child_id)

    async def remove_child(
        self, supervisor_id: str, child_id: str, reason: str = "removed"
    ) -> bool:
        """Stop a child for good and remove it from its supervisor. False if it was not a child."""
        from tether.supervisor.supervisor import RemoveChild

        removed: bool = await self.ask(
            supervisor_id,
            RemoveChild(child_id=child_id, reason=reason),
            timeout=60.0,
            dedup_key=None,
        )
        return removed

    async def watch(self, watcher: str, watched: str) -> None:
        """``watcher`` receives ``Terminated`` when ``watched`` stops for good."""
        spec, _ = await self._spec_of(watcher)
        if Terminated not in spec.message_types:
            raise ConfigError(
                f"{watcher!r} watches {watched!r} but its handle() does not accept tether.Terminated"
            )
        rec = await self.store.get_actor(watched)
        if rec is None:
            raise ActorNotFound(watched)
        await self.committer.submit(Watch(watcher=watcher, watched=watched))
        if rec.status != "active":  # already gone: the notice comes at once
            await self.tell(
                watcher,
                Terminated(
                    actor_id=watched, reason=rec.stop_reason or rec.status, status=rec.status
                ),
                dedup_key=f"terminated:{watched}",
                delay=None,
            )

    # -- introspection ------------------------------------------------------------------------

    async def tree(
        self, *, on_corrupt: Callable[[str, CorruptRecordError], None] | None = None
    ) -> list[TreeNode]:
        """The supervision tree: every actor in the store under its supervisor, with its live
        status, restart count and last failure. Top-level actors are the roots.

        An actor whose row is damaged is left out (its children become roots) and reported as
        ``on_corrupt(actor_id, error)``; without ``on_corrupt``, logged once."""
        return await supervision_tree(self, on_corrupt or self.report_corrupt_actor)

    async def session_info(self, session_id: str) -> SessionInfo:
        """The status, task, belief and frontier of the agent session ``session_id``, from its
        committed journal: read from the store, never through its mailbox, so it answers at
        once while a step runs (``GetSessionInfo`` waits behind that step), and from an
        administration process too. A step under way shows once it commits."""
        self._check_open()
        _check_id(session_id)
        rec = await self.store.get_actor(session_id)
        if rec is None:
            raise ActorNotFound(session_id)
        cls = import_class(rec.class_path)
        if not getattr(cls, "is_session", False):
            raise ConfigError(f"{session_id!r} is a {rec.class_path}, not an agent session")
        info: SessionInfo = (await folded(self, rec, cls)).info()
        return info

    def stats(self) -> dict[str, int]:
        """Counters for tests and benchmarks: active actors, commits and writes so far."""
        return {
            "active": len(self.cells),
            "commits": self.committer.commits,
            "writes": self.committer.writes,
        }


def _positive(name: str, value: Any, *, integer: bool = False) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
        raise ConfigError(
            f"{name} must be a positive {'integer' if integer else 'number'}, not {value!r}"
        )


def _check_id(actor_id: Any) -> None:
    if not isinstance(actor_id, str) or not actor_id or len(actor_id) > _MAX_ID_LEN:
        raise ConfigError(
            f"actor id must be a non-empty string of at most {_MAX_ID_LEN} characters, not {actor_id!r}"
        )
