"""Spawning: an actor's record stored, checked, and its cell started; a supervisor's children.

``spawn`` stores the actor's record (or finds it: spawning an existing actor resumes it) and
activates it here; it returns once ``on_start`` has run, as OTP's ``start_link`` does. The
spawn arguments are checked before anything is stored: they must encode, decode as recovery
will decode them, and be accepted by the class's constructor.

A dynamic child (``add_child``, OTP's ``start_child``) is checked the same way here, then
stored and started by its supervisor, which journals it among its children.
"""

from __future__ import annotations

from typing import Any, TypeVar

from tether.actors.actor import Actor, ActorSpec, actor_spec, check_init, current_path
from tether.errors import (
    ActorIdTaken,
    ActorStopped,
    AlreadyStarted,
    ChildStartFailed,
    ConfigError,
    StoreError,
)
from tether.runtime.activation import Activation
from tether.runtime.cell import Cell
from tether.runtime.kernel import Kernel
from tether.runtime.lifecycle import Lifecycle
from tether.runtime.mail import Mail
from tether.runtime.registry import Registry, check_id
from tether.runtime.spawn_args import decode_init
from tether.store.records import ActorRecord, Spawn
from tether.supervisor.guards import check_id_use
from tether.supervisor.spec import ChildSpec

A = TypeVar("A", bound=Actor[Any])


class Spawning:
    """The spawns of one runtime."""

    def __init__(
        self,
        kernel: Kernel,
        registry: Registry,
        activation: Activation,
        mail: Mail,
        *,
        life: Lifecycle,
    ) -> None:
        self._kernel = kernel
        self._registry = registry
        self._activation = activation
        self._ask = mail.ask
        self._life = life

    async def spawn_cell(
        self, actor_class: type[A], actor_id: str, parent_id: str | None, init: dict[str, Any]
    ) -> Cell | None:
        """Create the actor (or resume it, if it exists) and activate it; the cell it started
        (or found) here, even if it has left since, or None if the actor is active in another
        runtime. ``parent_id``: its supervisor's id, None for a top-level actor."""
        self._life.check_open()
        check_id(actor_id)
        check_id_use(actor_id, actor_class, parent_id)
        spec = actor_spec(actor_class)
        kernel = self._kernel
        record = ActorRecord(
            actor_id=actor_id,
            class_path=spec.class_path,
            init=encode_init(spec, actor_id, init),
            parent_id=parent_id,
            status="active",
            stop_reason=None,
            fence=0,
            lease_owner=None,
            lease_expires=0.0,
            created_at=kernel.clock(),
        )
        result = await kernel.committer.submit(Spawn(record))
        stored = result.spawned.get(actor_id)
        if stored is None:  # the id is taken by a damaged row: this read names the damage
            stored = await kernel.store.get_actor(actor_id)
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
        self._registry.known[actor_id] = (spec, stored.status)
        cell = await self._activation.activate(actor_id, by_parent=parent_id is not None)
        if cell is not None:
            if parent_id is None:
                cell.start_awaited = True
            await cell.ready.wait()  # like OTP's start_link: on_start has run when spawn returns
            if parent_id is None and isinstance(cell.start_error, ChildStartFailed):
                raise cell.start_error  # a supervisor whose declared child did not start
        return cell

    async def add_child(self, supervisor_id: str, spec: ChildSpec) -> None:
        """Start a dynamic child under a running supervisor (``Runtime.add_child``): checked
        here, then asked of the supervisor, which stores and starts it (``AddChild``)."""
        from tether.supervisor.supervisor import AddChild

        cls_spec = actor_spec(spec.actor_class)
        check_id(spec.child_id)
        check_id_use(spec.child_id, spec.actor_class, supervisor_id)
        init = encode_init(cls_spec, spec.child_id, spec.init)
        msg = AddChild(
            child_id=spec.child_id,
            class_path=cls_spec.class_path,
            restart=spec.restart,
            shutdown=spec.shutdown,
            init=init,
        )
        refused = await self._ask(supervisor_id, msg, timeout=60.0, dedup_key=None)
        if refused is not None:
            kind, detail = refused
            child_id = spec.child_id
            if kind == "AlreadyStarted":
                raise AlreadyStarted(child_id, detail or None)
            if kind == "ChildStartFailed":
                raise ChildStartFailed(supervisor_id, child_id, detail)
            raise ActorIdTaken(child_id, detail)

    async def remove_child(self, supervisor_id: str, child_id: str, reason: str) -> bool:
        """Stop a child for good and remove it from its supervisor (``RemoveChild``)."""
        from tether.supervisor.supervisor import RemoveChild

        removed: bool = await self._ask(
            supervisor_id,
            RemoveChild(child_id=child_id, reason=reason),
            timeout=60.0,
            dedup_key=None,
        )
        return removed


def encode_init(spec: ActorSpec, actor_id: str, init: dict[str, Any]) -> bytes:
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
