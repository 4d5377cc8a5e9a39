"""``Actor[S]``: private state, one message at a time, state as a fold of the journal.

An actor class declares three things and the runtime derives everything else from them:

* ``initial_state``: the state before the first event (a msgspec-encodable value);
* ``apply(state, event) -> state``: pure; the journal is folded through it (I3);
* ``async handle(msg)``: its parameter annotation (a type or a union) is the set of message
  types the actor accepts, and its return value answers an ``ask``.

The runtime binds each live instance to a cell (:class:`ActorCell`), which owns delivery,
journaling and commits. Actors only talk to their cell, never to the store.
"""

from __future__ import annotations

import inspect
import types
import typing
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import msgspec
from typing_extensions import ParamSpec

from tether.actors.messages import UNENCODABLE, Event, Message, nesting_problem
from tether.actors.ref import ActorRef
from tether.actors.tool import Tool
from tether.errors import ConfigError, MainModuleWarning

S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")


class ActorCell(Protocol):
    """What the runtime gives a live actor instance. Implemented by the runtime's cell."""

    @property
    def actor_id(self) -> str: ...

    @property
    def state(self) -> Any: ...

    def persist(self, event: Event) -> None: ...

    def ref(self, actor_id: str) -> ActorRef: ...

    def self_ref(self) -> ActorRef: ...

    def stop_self(self, reason: str) -> None: ...

    def defer_reply(self) -> str: ...

    def reply_to(self, msg_id: str, value: Any) -> None: ...

    def escalate(self, reason: str) -> None: ...

    async def watch(self, actor_id: str) -> None: ...

    async def effect(self, tool: Any, args: dict[str, Any]) -> Any: ...

    @property
    def last_effect_key(self) -> str | None: ...

    @property
    def last_effect_modified_args(self) -> dict[str, Any] | None: ...

    def append_events(self, events: Sequence[Event]) -> Awaitable[Any]: ...

    def apply_in_memory(self, events: Sequence[Event]) -> None: ...

    @property
    def runtime(self) -> Any: ...


class Actor(Generic[S]):
    """Base class of every actor. Subclass it as ``class Account(tether.Actor[AccountState])``.

    ``self.state`` is the fold of the committed journal plus the events this handler has
    persisted so far. ``self.persist(event)`` applies the event at once and commits it with the
    message's acknowledgement (I2): if the handler raises, the event is gone and the state is
    rolled back.
    """

    initial_state: ClassVar[Any]
    #: Whether an idle instance may leave memory (supervisors stay resident).
    passivates: ClassVar[bool] = True
    #: A child that its supervisor never starts, started on first use by whoever uses it (a
    #: session's loop guard and gate): it runs in the runtime that needs it, whichever one
    #: runs its supervisor. Away from its supervisor, its failures are decided where it runs,
    #: as its supervisor would: a failed handler restarts it in place; a failed start leaves
    #: memory, and its next use starts it again.
    starts_where_used: ClassVar[bool] = False
    #: Hold a tool's next call for a person after it failed this many times in a row (None:
    #: never). Agent sessions set it; see ``tether.ApprovalPolicy`` for the deadline.
    escalate_after_failures: ClassVar[int | None] = None
    _tether_cell: ActorCell

    def apply(self, state: S, event: Any) -> S:
        """Return the state after ``event``. Must be pure: it is replayed on every recovery."""
        raise ConfigError(
            f"{type(self).__qualname__} persisted an event but does not define apply(state, event)"
        )

    async def handle(self, msg: Any) -> Any:
        """Process one message. The parameter annotation declares the accepted message types."""
        raise ConfigError(f"{type(self).__qualname__} does not define handle(msg)")

    async def on_start(self) -> None:
        """Called after the state is recovered and before the first message is handled."""

    async def on_stop(self) -> None:
        """Called when the actor stops or passivates (not after a crash: there is no after)."""

    def escalation_reason(self, tool: str, args: dict[str, Any]) -> str | None:
        """A policy hook: return why this call must wait for a person, or None to let it run.

        Called before every call that is about to run (never for a replayed one). Tools with
        ``requires_approval=True`` are always held, whatever this returns. Once a person was
        asked about a call, their decision (or the deadline's) settles it on every later run
        of the step, whatever this returns then.
        """
        return None

    def approval_context(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """What a reviewer needs to decide about this call besides the call itself: the
        goal, what the agent will do if it is rejected. Stored with the request."""
        return {}

    # -- what handlers use -------------------------------------------------------------------

    @property
    def id(self) -> str:
        """This actor's id: its address, whether it is active or passivated."""
        return self._tether_cell.actor_id

    @property
    def state(self) -> S:
        """The current state: the committed fold plus this step's persisted events."""
        state: S = self._tether_cell.state
        return state

    @property
    def self_ref(self) -> ActorRef:
        """A ref to this actor."""
        return self._tether_cell.self_ref()

    def persist(self, event: Event) -> None:
        """Apply ``event`` to the state now; it is committed with this message's ack (I2)."""
        self._tether_cell.persist(event)

    def ref(self, actor_id: str) -> ActorRef:
        """The ref of another actor. ``tell`` through it from a handler joins this step's outbox."""
        return self._tether_cell.ref(actor_id)

    def reply_later(self) -> str:
        """Do not answer this message's ``ask`` now: a later step will, with ``reply(...)``.

        Returns the id to reply to; keep it in the state (persist it) so that it survives a
        restart. The asker keeps waiting (until its own timeout; asking again with the same
        ``dedup_key`` waits for the same answer).
        """
        return self._tether_cell.defer_reply()

    def reply(self, msg_id: str, value: Any) -> None:
        """Answer the ask of an earlier message (see ``reply_later``), with this step's commit."""
        self._tether_cell.reply_to(msg_id, value)

    def stop(self, reason: str = "normal") -> None:
        """Stop this actor once the current step has committed."""
        self._tether_cell.stop_self(reason)

    async def effect(self, tool: Tool[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call ``tool`` through the effects ledger and return its result (I4, I5).

        The arguments are the tool function's, checked by type checkers against its signature
        (``Tool[P, R]``), leaving out ``idempotency_key``; positional ones are bound by name.

        The intent is committed before the call and the receipt after it; when this step is
        replayed (after a crash, a failure or a wait), a recorded result is returned without
        calling the tool again. The tool receives the runtime's idempotency key if it declares
        an ``idempotency_key`` parameter. Raises ``ToolInputError`` (bad arguments, nothing
        recorded), ``ToolFailed``, ``ToolUnavailable``, ``LoopDetected``, ``ApprovalRejected``,
        ``EffectAborted`` or ``DeterminismViolation``; a call that must wait for a person
        suspends the step.
        """
        # (not a Tool: effect() refuses it by name below)
        args_by_name = tool.arguments(args, kwargs) if args and isinstance(tool, Tool) else kwargs
        result: R = await self._tether_cell.effect(tool, args_by_name)
        return result

    @property
    def last_effect_key(self) -> str | None:
        """The idempotency key of this handler's latest ``effect`` call: its row in the
        effects ledger (None before the first, or when its arguments were refused)."""
        return self._tether_cell.last_effect_key

    @property
    def last_effect_modified_args(self) -> dict[str, Any] | None:
        """The arguments this handler's latest ``effect`` call ran with, when a person
        modified them on approving it (``tether.Modify``): every parameter by name, as the
        ledger records them. None when it ran with the arguments it was given (or was not
        made at all, or before the first). A replayed call answers as it did when it ran."""
        return self._tether_cell.last_effect_modified_args

    async def watch(self, actor_id: str) -> None:
        """Receive ``tether.Terminated`` when ``actor_id`` stops for good (death watch).

        The watcher's ``handle`` must accept ``Terminated``. Watching an actor that has already
        stopped delivers the notice at once. The watch is durable.
        """
        await self._tether_cell.watch(actor_id)


class ActorSpec(msgspec.Struct, frozen=True):
    """What the runtime derives from an actor class, once per class."""

    cls: type[Actor[Any]]
    class_path: str
    message_types: tuple[type[Message], ...]
    event_types: tuple[type[Event], ...]
    state_type: Any
    reply_type: Any

    @property
    def accepted_names(self) -> tuple[str, ...]:
        return tuple(t.__name__ for t in self.message_types)


_specs: dict[type[Any], ActorSpec] = {}


def actor_spec(cls: type[Any]) -> ActorSpec:
    """Derive (and cache) an actor class's spec; a malformed class raises ``ConfigError``."""
    spec = _specs.get(cls)
    if spec is None:
        spec = _derive_spec(cls)
        _specs[cls] = spec
    return spec


def check_items(value: object, kind: type[Any], where: str, expected: str, hint: str) -> None:
    """Raise ``ConfigError`` unless ``value`` (a class attribute such as ``tools`` or
    ``children``) is a list or tuple of ``kind``: ``where must be <expected>`` for the
    container, ``where holds <item>; <hint>`` for an item. A string is refused as a whole: it
    would otherwise be taken apart into characters."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ConfigError(f"{where} must be {expected}, not {value!r}")
    for item in value:
        if not isinstance(item, kind):
            raise ConfigError(f"{where} holds {item!r}; {hint}")


def check_init(cls: type[Any], init: dict[str, Any], where: str) -> bytes:
    """Encode spawn arguments as they will be stored, after checking that they can be stored
    and that ``cls(**init)`` would accept them. Raises ``ConfigError`` naming ``where``."""
    try:
        encoded = msgspec.msgpack.encode(init)
        too_deep = nesting_problem(init, encoded)
    except UNENCODABLE as exc:
        raise ConfigError(
            f"{where}: spawn arguments cannot be stored: {nesting_problem(init) or exc}"
        ) from exc
    if too_deep is not None:
        raise ConfigError(f"{where}: spawn arguments cannot be stored: {too_deep}")
    if cls.__init__ is object.__init__:
        if init:
            raise ConfigError(
                f"{where}: {cls.__qualname__} takes no spawn arguments, got {sorted(init)}"
            )
    else:
        try:
            inspect.signature(cls.__init__).bind(None, **init)
        except TypeError as exc:
            raise ConfigError(f"{where}: cannot construct {cls.__qualname__}: {exc}") from exc
    return encoded


#: Classes tether moved since a store could have recorded them: the path a record holds ->
#: where the class is now. A record keeps its path; it is read through this table.
MOVED_CLASSES: dict[str, str] = {
    "tether.actors.guards.actors:GuardSupervisor": "tether.supervisor.guards:GuardSupervisor",
}


def current_path(path: str) -> str:
    """Where the class a record names as ``path`` is now (``MOVED_CLASSES``)."""
    return MOVED_CLASSES.get(path, path)


def class_path(cls: type[Any]) -> str:
    """``module:qualname``, the form stored in the actor registry and imported on recovery."""
    if "<locals>" in cls.__qualname__:
        raise ConfigError(
            f"actor class {cls.__qualname__} is defined inside a function; the runtime must be "
            "able to import it by name when it recovers the actor, so define it at module level"
        )
    return f"{cls.__module__}:{cls.__qualname__}"


def warn_if_main(path: str, what: str) -> None:
    """Warn (``MainModuleWarning``) when ``path`` (``module:qualname``) is in ``__main__``:
    it works in this process, and in another only if that one runs the same script."""
    if path.startswith("__main__:"):
        warnings.warn(
            f"{what} {path.partition(':')[2]} is defined in __main__ (the script being run), "
            "so other processes (the tether CLI, a console, a second runtime) cannot import it "
            "by name; move it into a module and import it from the script",
            MainModuleWarning,
            stacklevel=3,
        )


def import_object(path: str, what: str = "object") -> Any:
    """Import ``module:qualname``; raise ``ConfigError`` naming the path, and how to make it
    importable, if that fails."""
    import importlib

    module_name, _, qualname = current_path(path).partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    # ValueError ("Empty module name") and TypeError (a relative name such as ".x") come from
    # importlib for a malformed path, e.g. a damaged class_path row: a ConfigError like any
    # other path that does not import, so callers that skip such an actor keep going.
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        raise ConfigError(f"cannot import {what} {path!r}: {exc}{_import_hint(path, exc)}") from exc
    return obj


def _import_hint(path: str, exc: BaseException) -> str:
    if path.startswith("__main__:"):
        return (
            ". It was defined in __main__, the script that stored it, which no other program "
            "can import: move it into a module (e.g. agents.py) that the script imports, and "
            "start the script again"
        )
    if isinstance(exc, ModuleNotFoundError):
        return (
            ". Run this where the application's modules import (its directory, or on "
            "PYTHONPATH), or give the tether CLI --app-dir DIR"
        )
    return ""


def import_class(path: str) -> type[Any]:
    """Import the class at ``module:qualname``; ``ConfigError`` naming the path if that fails."""
    obj = import_object(path, "actor class")
    if not isinstance(obj, type):
        raise ConfigError(f"{path!r} is not a class")
    return obj


def _derive_spec(cls: type[Any]) -> ActorSpec:
    name = cls.__qualname__
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise ConfigError(f"{name} is not a subclass of tether.Actor")
    if cls.handle is Actor.handle:
        raise ConfigError(f"{name} does not define async handle(self, msg)")
    if not inspect.iscoroutinefunction(cls.handle):
        raise ConfigError(f"{name}.handle must be an async def")
    if not hasattr(cls, "initial_state"):
        raise ConfigError(f"{name} does not set the class attribute initial_state")

    handle_hints = _hints(cls.handle, f"{name}.handle")
    params = [p for p in inspect.signature(cls.handle).parameters if p != "self"]
    if len(params) != 1:
        raise ConfigError(f"{name}.handle must take exactly one parameter (the message)")
    if params[0] not in handle_hints:
        raise ConfigError(
            f"{name}.handle({params[0]}) has no type annotation; annotate it with the message "
            "types the actor accepts, e.g. `msg: Deposit | GetBalance`"
        )
    message_types = _members(handle_hints[params[0]], Message, f"{name}.handle({params[0]})")
    reply_type = handle_hints.get("return", Any)

    event_types: tuple[type[Event], ...]
    if cls.apply is Actor.apply:
        event_types = ()
    else:
        apply_hints = _hints(cls.apply, f"{name}.apply")
        apply_params = [p for p in inspect.signature(cls.apply).parameters if p != "self"]
        if len(apply_params) != 2:
            raise ConfigError(f"{name}.apply must take (state, event)")
        event_annotation = apply_hints.get(apply_params[1], Event)
        event_types = _members(event_annotation, Event, f"{name}.apply({apply_params[1]})")

    path = class_path(cls)
    warn_if_main(path, "actor class")
    state_type = getattr(cls, "state_type", None) or type(cls.initial_state)
    try:
        msgspec.msgpack.encode(cls.initial_state)
    except UNENCODABLE as exc:
        raise ConfigError(f"{name}.initial_state cannot be encoded by msgspec: {exc}") from exc
    return ActorSpec(
        cls=cls,
        class_path=path,
        message_types=message_types,
        event_types=event_types,
        state_type=state_type,
        reply_type=reply_type,
    )


def _hints(fn: Callable[..., Any], where: str) -> Mapping[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except (NameError, TypeError) as exc:
        raise ConfigError(f"cannot resolve the type annotations of {where}: {exc}") from exc


def _members(annotation: Any, base: type[Any], where: str) -> tuple[Any, ...]:
    """The classes named by ``annotation`` (a class or a union), each a subclass of ``base``.

    The base class itself (or ``Any``) stands for every subclass defined so far.
    """
    origin = typing.get_origin(annotation)
    members = (
        typing.get_args(annotation) if origin in (typing.Union, types.UnionType) else (annotation,)
    )
    found: list[type[Any]] = []
    for member in members:
        if member is type(None):
            continue
        if member is Any or member is base:
            found.extend(_all_subclasses(base))
        elif isinstance(member, type) and issubclass(member, base):
            found.append(member)
        else:
            raise ConfigError(f"{where}: {member!r} is not a tether.{base.__name__} subclass")
    if not found:
        raise ConfigError(f"{where} names no tether.{base.__name__} types")
    names: dict[str, type[Any]] = {}
    for t in found:
        if names.setdefault(t.__name__, t) is not t:
            raise ConfigError(
                f"{where}: two types share the tag {t.__name__!r} "
                f"({names[t.__name__].__module__} and {t.__module__}); rename one"
            )
    return tuple(dict.fromkeys(found))


def _all_subclasses(base: type[Any]) -> list[type[Any]]:
    out: list[type[Any]] = []
    stack = list(base.__subclasses__())
    while stack:
        cls = stack.pop()
        out.append(cls)
        stack.extend(cls.__subclasses__())
    return out
