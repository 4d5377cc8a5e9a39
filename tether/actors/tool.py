"""Tools: the side-effecting calls an actor makes through the effects ledger (I4, I5).

``@tether.tool(...)`` turns an async function into a :class:`Tool`. The tool's input schema is
derived from the function's type hints (a msgspec Struct), so arguments are validated, and
canonically hashed, before anything is recorded. Its recovery policy says what to do with an
*ambiguous* call — one whose intent is recorded but whose outcome is not (the process died
during the call, or the call timed out):

* ``"retry"``: call again with the same idempotency key (for tools whose receiver honors keys);
* ``"reconcile"``: ask the world through the tool's ``reconcile`` hook: done, not done, unknown;
* ``"quarantine"`` (the default): hold it for a person. The safe choice for an unknown side effect.

Errors a tool raises are sorted by what they say about the call (``docs/recovery.md``):

* *not carried out* (``TransientToolError``, HTTP 429 or 503, a refused connection): retried
  under the tool's :class:`RetryPolicy`, each attempt with the same key;
* *maybe carried out* (a timeout, HTTP 408/500/502/504, a reset connection): retried with the
  same key only by ``recovery="retry"`` tools; the others go to their recovery policy;
* anything else: a failure, recorded as the receipt and never retried.
"""

from __future__ import annotations

import hashlib
import inspect
import random
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Literal, overload

import msgspec

from tether.actors.guards.breaker import BreakerPolicy
from tether.errors import ConfigError, ToolInputError, TransientToolError

Recovery = Literal["retry", "reconcile", "quarantine"]
Outcome = Literal["not_done", "maybe_done", "failed"]

_RECOVERIES = ("retry", "reconcile", "quarantine")
_NOT_DONE_STATUS = frozenset({429, 503})
_MAYBE_DONE_STATUS = frozenset({408, 500, 502, 504})
KEY_PARAMETER = "idempotency_key"

# Reused encoders (the same bytes as msgspec.json.encode(..., order="sorted") and
# msgspec.msgpack.encode, without building an encoder per call).
_canonical_json = msgspec.json.Encoder(order="sorted")
_msgpack = msgspec.msgpack.Encoder()


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class RetryPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Retries of transient failures: exponential backoff with full jitter, capped.

    ``max_attempts`` counts every call, the first one included (1 = never retry).
    """

    max_attempts: int = 3
    initial_delay: float = 0.5
    multiplier: float = 2.0
    max_delay: float = 30.0

    def __post_init__(self) -> None:
        if not (_whole(self.max_attempts) and self.max_attempts >= 1):
            raise ConfigError(
                f"RetryPolicy.max_attempts must be an int >= 1, not {self.max_attempts!r}"
            )
        for name in ("initial_delay", "max_delay"):
            value = getattr(self, name)
            if not (_number(value) and value >= 0):
                raise ConfigError(f"RetryPolicy.{name} must be a number >= 0, not {value!r}")
        if not (_number(self.multiplier) and self.multiplier >= 1):
            raise ConfigError(f"RetryPolicy.multiplier must be >= 1, not {self.multiplier!r}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based): full jitter."""
        ceiling = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1))
        return (rng or random).uniform(0.0, ceiling)


class Done(msgspec.Struct, frozen=True):
    """A reconcile hook's verdict: the call did happen; ``result`` is what it returned."""

    result: Any = None


class NotDone(msgspec.Struct, frozen=True):
    """A reconcile hook's verdict: the call did not happen; it is made again (same key)."""


class Unknown(msgspec.Struct, frozen=True):
    """A reconcile hook's verdict: cannot tell. The effect is quarantined for a person."""

    reason: str = "the reconcile hook could not tell"


Verdict = Done | NotDone | Unknown
ReconcileHook = Callable[..., Awaitable[Verdict]]


class PreparedCall(msgspec.Struct, frozen=True):
    """Validated arguments: how to call the tool, and how the call is recorded."""

    kwargs: dict[str, Any]
    args_blob: bytes  # msgpack of the arguments as builtins, for the ledger
    input_hash: str  # sha256 of the canonical JSON of the arguments


class Tool:
    """A declared tool. Call it through ``await self.effect(tool, **args)`` inside an actor;
    calling it directly (``await tool(**args)``) bypasses the ledger, for tests."""

    def __init__(
        self,
        fn: Callable[..., Awaitable[Any]],
        *,
        name: str | None = None,
        recovery: Recovery = "quarantine",
        requires_approval: bool = False,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        reconcile: ReconcileHook | None = None,
        breaker: Any = "external_api",
        description: str | None = None,
        loop_guard: bool = True,
        defer_receipt: bool = True,
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise ConfigError(f"@tether.tool needs an async def, not {fn!r}")
        self.fn: Callable[..., Awaitable[Any]] = fn
        if name is not None and not (isinstance(name, str) and name):
            raise ConfigError(f"@tether.tool: name must be a non-empty string, not {name!r}")
        self.name = name or fn.__name__
        # Where another process finds this tool (to validate modified arguments): the module
        # attribute that @tether.tool replaced the function with. None inside a function.
        qualname = getattr(fn, "__qualname__", "")
        self.path: str | None = None if "<locals>" in qualname else f"{fn.__module__}:{qualname}"
        where = f"tool {self.name!r}"
        if recovery not in _RECOVERIES:
            raise ConfigError(f"{where}: recovery must be one of {_RECOVERIES}, not {recovery!r}")
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise ConfigError(
                f"{where}: timeout must be a positive number of seconds, not {timeout!r}"
            )
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigError(f"{where}: retry must be a tether.RetryPolicy, not {retry!r}")
        # Checked here, not at the first call: a bad breaker failed every call of the tool, and
        # a reconcile hook that is not an async def failed only when a call was ambiguous.
        if breaker is not None and not isinstance(breaker, str | BreakerPolicy):
            raise ConfigError(
                f"{where}: breaker must be a kind name, a tether.BreakerPolicy or None, "
                f"not {breaker!r}"
            )
        if isinstance(breaker, str):
            try:
                BreakerPolicy.for_kind(breaker)
            except ConfigError as exc:
                raise ConfigError(f"{where}: breaker: {exc}") from None
        if reconcile is not None and not inspect.iscoroutinefunction(reconcile):
            raise ConfigError(
                f"{where}: the reconcile hook must be an async def, not {reconcile!r}"
            )
        if isinstance(timeout, bool):
            raise ConfigError(f"{where}: timeout must be a number of seconds, not {timeout!r}")
        self.recovery: Recovery = recovery
        self.requires_approval = bool(requires_approval)
        self.timeout = float(timeout) if timeout is not None else None
        self.retry = retry if retry is not None else RetryPolicy()
        self.reconcile_hook = reconcile
        self.breaker = breaker
        self.loop_guard = loop_guard  # False for the model itself: only actions can loop
        # A retry tool's receipt may ride with the actor's next commit; False commits it at
        # once (the model: I6 promises a recorded decision is never asked for again).
        self.defer_receipt = defer_receipt
        self.description = description if description is not None else inspect.getdoc(fn) or ""
        self.takes_key, self.args_type, self.result_type = _schema(fn, where)
        self._result_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
            self.result_type
        )

    def __repr__(self) -> str:
        return f"<tether.Tool {self.name} recovery={self.recovery}>"

    async def __call__(self, **kwargs: Any) -> Any:
        return await self.fn(**kwargs)

    def reconciler(self, hook: ReconcileHook) -> ReconcileHook:
        """Decorator form of ``reconcile=``: ``@refund.reconciler`` over an async function that
        takes the tool's arguments (and ``idempotency_key``) and returns Done/NotDone/Unknown."""
        if not inspect.iscoroutinefunction(hook):
            raise ConfigError(f"tool {self.name!r}: the reconcile hook must be an async def")
        self.reconcile_hook = hook
        return hook

    def prepare(self, args: dict[str, Any]) -> PreparedCall:
        """Validate ``args`` against the input schema; ``ToolInputError`` names the field."""
        if KEY_PARAMETER in args:
            raise ToolInputError(
                self.name, f"{KEY_PARAMETER!r} is supplied by the runtime, never by the caller"
            )
        try:
            validated = msgspec.convert(args, self.args_type)
        except msgspec.ValidationError as exc:
            raise ToolInputError(self.name, str(exc)) from None
        builtins = msgspec.to_builtins(validated)
        try:
            args_blob = _msgpack.encode(builtins)
        except OverflowError as exc:
            # An int the schema accepts but msgpack cannot hold (beyond 64 bits), e.g. from a
            # model's JSON: bad arguments like any other, not an error of the step.
            raise ToolInputError(self.name, f"arguments cannot be stored: {exc}") from None
        return PreparedCall(
            kwargs=msgspec.structs.asdict(validated),  # every field, by name, unconverted
            args_blob=args_blob,
            input_hash=hashlib.sha256(_canonical_json.encode(builtins)).hexdigest(),
        )

    def encode_result(self, value: Any) -> bytes:
        return msgspec.msgpack.encode(value)

    def decode_result(self, blob: bytes) -> Any:
        return self._result_decoder.decode(blob)

    def spec(self) -> dict[str, Any]:
        """What a model needs to call this tool: name, description, JSON schema of the input."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": msgspec.json.schema(self.args_type),
            "requires_approval": self.requires_approval,
        }

    def with_fn(self, fn: Callable[..., Awaitable[Any]]) -> Tool:
        """The same tool (name, policies, schema) calling ``fn`` instead: for fault injection."""
        twin = object.__new__(Tool)
        twin.__dict__.update(self.__dict__)
        twin.fn = fn
        return twin


@overload
def tool(fn: Callable[..., Awaitable[Any]], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    recovery: Recovery = "quarantine",
    requires_approval: bool = False,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    reconcile: ReconcileHook | None = None,
    breaker: Any = "external_api",
    description: str | None = None,
) -> Callable[[Callable[..., Awaitable[Any]]], Tool]: ...


def tool(
    fn: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    recovery: Recovery = "quarantine",
    requires_approval: bool = False,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
    reconcile: ReconcileHook | None = None,
    breaker: Any = "external_api",
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Awaitable[Any]]], Tool]:
    """Declare a tool: ``@tether.tool`` or ``@tether.tool(recovery="retry", timeout=10)``.

    See the module docstring for ``recovery``. ``breaker`` is a tool kind from the defaults
    table (``"external_api"``, ``"database"``, ``"file_system"``, ``"model"``,
    ``"memory_store"``), a ``tether.BreakerPolicy``, or None for no breaker.
    """

    def wrap(f: Callable[..., Awaitable[Any]]) -> Tool:
        return Tool(
            f,
            name=name,
            recovery=recovery,
            requires_approval=requires_approval,
            timeout=timeout,
            retry=retry,
            reconcile=reconcile,
            breaker=breaker,
            description=description,
        )

    return wrap(fn) if fn is not None else wrap


def classify(exc: BaseException) -> Outcome:
    """What an exception raised by a tool says about the call (see the module docstring)."""
    if isinstance(exc, TransientToolError):
        return "not_done"
    if isinstance(exc, ConnectionRefusedError):
        return "not_done"
    if isinstance(exc, TimeoutError | ConnectionError):
        return "maybe_done"
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        if status in _NOT_DONE_STATUS:
            return "not_done"
        if status in _MAYBE_DONE_STATUS:
            return "maybe_done"
    return "failed"


def _schema(fn: Callable[..., Any], where: str) -> tuple[bool, type[msgspec.Struct], Any]:
    """(takes the key?, input Struct type, result type) from the function's signature."""
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError) as exc:
        raise ConfigError(f"{where}: cannot resolve its type annotations: {exc}") from exc
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    takes_key = False
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ConfigError(
                f"{where}: *args and **kwargs cannot be validated; name each argument"
            )
        if p.kind is p.POSITIONAL_ONLY:
            raise ConfigError(f"{where}: positional-only parameter {p.name!r}; tools take keywords")
        if p.name == KEY_PARAMETER:
            takes_key = True
            continue
        if p.name not in hints:
            raise ConfigError(f"{where}: parameter {p.name!r} has no type annotation")
        if p.default is p.empty:
            fields.append((p.name, hints[p.name]))
        else:
            fields.append((p.name, hints[p.name], p.default))
    args_type = msgspec.defstruct(
        f"{where}-input", fields, kw_only=True, forbid_unknown_fields=True, frozen=True
    )
    result_type = hints.get("return", Any)
    try:
        msgspec.msgpack.Decoder(result_type)
        msgspec.json.schema(args_type)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: its types cannot be recorded by msgspec: {exc}") from exc
    return takes_key, args_type, result_type
