"""Tools: the side-effecting calls an actor makes through the effects ledger (I4, I5).

``@tether.tool(...)`` turns an async function into a :class:`Tool`. The tool's input schema is
derived from the function's type hints and docstring (``tether/actors/tool_schema.py``), so
arguments are validated, and canonically hashed, before anything is recorded; a tool whose
input is described by a JSON Schema from elsewhere is made with :meth:`Tool.from_schema`.

Its recovery policy says what to do with an *ambiguous* call — one whose intent is recorded but whose outcome is not (the process died
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
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Generic, Literal, overload

import msgspec
from typing_extensions import ParamSpec, TypeVar

from tether.actors.guards.breaker import BreakerPolicy
from tether.actors.messages import TOO_DEEP, nesting_problem
from tether.actors.tool_schema import KEY_PARAMETER, FunctionSchema, JsonSchema, ToolSchema
from tether.errors import ConfigError, ToolInputError, TransientToolError

# A tool's parameters and result. The defaults make a bare ``Tool`` mean ``Tool[..., Any]``.
P = ParamSpec("P", default=...)
R = TypeVar("R", covariant=True, default=Any)

Recovery = Literal["retry", "reconcile", "quarantine"]
Outcome = Literal["not_done", "maybe_done", "failed"]

_RECOVERIES = ("retry", "reconcile", "quarantine")
_NOT_DONE_STATUS = frozenset({429, 503})
_MAYBE_DONE_STATUS = frozenset({408, 500, 502, 504})
#: Seconds a tool call may take unless its tool says otherwise: a hung tool fails its call
#: ("maybe carried out", like any timeout) instead of holding its session for ever.
DEFAULT_TIMEOUT = 300.0

# Reused encoders (the same bytes as msgspec.json.encode(..., order="sorted") and
# msgspec.msgpack.encode, without building an encoder per call).
_canonical_json = msgspec.json.Encoder(order="sorted")
_msgpack = msgspec.msgpack.Encoder()


class _RuntimeKey(str):
    __slots__ = ()

    def __repr__(self) -> str:
        return "tether.RUNTIME_KEY"


#: The default to give a tool's ``idempotency_key`` parameter
#: (``idempotency_key: str = tether.RUNTIME_KEY``) so that type checkers let callers leave it
#: out: the runtime always passes its own key, and a direct call (``await tool(...)``) a fresh
#: one. The value itself is an empty string, which no receiver should accept as a key.
RUNTIME_KEY: Final[str] = _RuntimeKey("")


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


class Tool(Generic[P, R]):
    """A declared tool. Call it through ``await self.effect(tool, **args)`` inside an actor;
    calling it directly (``await tool(**args)``) bypasses the ledger, for tests.

    ``Tool[P, R]`` carries the function's parameters and result, so a type checker checks the
    arguments given to ``effect`` and types its result. ``schema`` is what the tool takes and
    returns (:class:`~tether.actors.tool_schema.ToolSchema`); by default it is derived from
    ``fn``'s signature and docstring.
    """

    def __init__(
        self,
        fn: Callable[P, Awaitable[R]],
        *,
        name: str | None = None,
        recovery: Recovery = "quarantine",
        requires_approval: bool = False,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        reconcile: ReconcileHook | None = None,
        breaker: Any = "external_api",
        description: str | None = None,
        loop_guard: bool = True,
        defer_receipt: bool = True,
        bound_nesting: bool = True,
        schema: ToolSchema | None = None,
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise ConfigError(f"@tether.tool needs an async def, not {fn!r}")
        self.fn: Callable[..., Awaitable[R]] = fn
        if name is not None and not (isinstance(name, str) and name):
            raise ConfigError(f"@tether.tool: name must be a non-empty string, not {name!r}")
        self.name: str = name or fn.__name__
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
        if schema is not None and not isinstance(schema, ToolSchema):
            raise ConfigError(f"{where}: schema must be a ToolSchema, not {schema!r}")
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
        # False for the model: its arguments are the session's own request, built from parts
        # already bounded where they came in (messages, tool calls and results), and nested a
        # few levels deeper than those parts; refusing it would stop the session for good.
        self.bound_nesting = bound_nesting
        self.schema: ToolSchema = schema if schema is not None else FunctionSchema(fn, where)
        self.description: str = description if description is not None else self.schema.description
        self.takes_key = self.schema.takes_key
        self.result_type: Any = self.schema.result_type

    @classmethod
    def from_schema(
        cls,
        fn: Callable[..., Awaitable[Any]],
        *,
        name: str,
        input_schema: Mapping[str, Any],
        validator: Callable[[dict[str, Any]], object],
        description: str = "",
        takes_key: bool = False,
        **options: Any,
    ) -> Tool[..., Any]:
        """A tool whose input is described by a JSON Schema from elsewhere (an MCP server's
        ``inputSchema``, an OpenAPI operation), not by ``fn``'s signature.

        ``fn`` is called with the validated arguments as keywords (plus ``idempotency_key``
        when ``takes_key``). ``validator`` raises, naming the problem, when the arguments do
        not fit the schema, e.g. ``jsonschema.Draft202012Validator(schema).validate``; a dict
        it returns replaces the arguments. ``options`` are those of ``@tether.tool``
        (``recovery``, ``requires_approval``, ``timeout``, ``retry``, ``breaker``...).
        """
        schema = JsonSchema(input_schema, validator, takes_key=takes_key, where=f"tool {name!r}")
        return cls(fn, name=name, description=description, schema=schema, **options)

    def __repr__(self) -> str:
        return f"<tether.Tool {self.name} recovery={self.recovery}>"

    async def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function directly, outside the ledger (tests). A tool that takes the
        idempotency key and is not given one gets a fresh key of its own."""
        if self.takes_key and KEY_PARAMETER not in kwargs:
            kwargs[KEY_PARAMETER] = f"direct-{uuid.uuid4().hex}"
        return await self.fn(*args, **kwargs)

    def reconciler(self, hook: ReconcileHook) -> ReconcileHook:
        """Decorator form of ``reconcile=``: ``@refund.reconciler`` over an async function that
        takes the tool's arguments (and ``idempotency_key``) and returns Done/NotDone/Unknown."""
        if not inspect.iscoroutinefunction(hook):
            raise ConfigError(f"tool {self.name!r}: the reconcile hook must be an async def")
        self.reconcile_hook = hook
        return hook

    def arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by name: positional ones take the parameters' order."""
        names = self.schema.parameter_names
        if len(args) > len(names):
            raise ToolInputError(
                self.name,
                f"{len(args)} positional arguments given, but it takes "
                + (f"at most {len(names)} ({', '.join(names)})" if names else "keywords only"),
            )
        named = dict(zip(names, args, strict=False))
        twice = sorted(set(named) & set(kwargs))
        if twice:
            raise ToolInputError(self.name, f"{', '.join(twice)} given by position and by name")
        return {**named, **kwargs}

    def prepare(self, args: dict[str, Any]) -> PreparedCall:
        """Validate ``args`` against the input schema; ``ToolInputError`` names the field."""
        if KEY_PARAMETER in args:
            raise ToolInputError(
                self.name, f"{KEY_PARAMETER!r} is supplied by the runtime, never by the caller"
            )
        try:
            kwargs, builtins = self.schema.validate(args)
        except ToolInputError:
            raise
        except ValueError as exc:
            raise ToolInputError(self.name, str(exc)) from None
        except RecursionError:
            # Nested deeper than the stack allows while validating: far beyond the limit.
            raise ToolInputError(self.name, f"arguments cannot be stored: {TOO_DEEP}") from None
        try:
            args_blob = _msgpack.encode(builtins)
            too_deep = nesting_problem(builtins, args_blob) if self.bound_nesting else None
        except OverflowError as exc:
            # An int the schema accepts but msgpack cannot hold (beyond 64 bits), e.g. from a
            # model's JSON: bad arguments like any other, not an error of the step.
            raise ToolInputError(self.name, f"arguments cannot be stored: {exc}") from None
        except RecursionError:
            # Deeper than the stack allows here, so far beyond the limit: named by it.
            too_deep = TOO_DEEP
        if too_deep is not None:
            raise ToolInputError(self.name, f"arguments cannot be stored: {too_deep}")
        return PreparedCall(
            kwargs=kwargs,
            args_blob=args_blob,
            input_hash=hashlib.sha256(_canonical_json.encode(builtins)).hexdigest(),
        )

    def encode_result(self, value: Any) -> bytes:
        return self.schema.encode_result(value)

    def decode_result(self, blob: bytes) -> Any:
        return self.schema.decode_result(blob)

    def spec(self) -> dict[str, Any]:
        """What a model needs to call this tool: name, description, and the JSON schema of the
        input (an object schema, one property per argument, described)."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.schema.json_schema(),
            "requires_approval": self.requires_approval,
        }

    def with_fn(self, fn: Callable[..., Awaitable[Any]]) -> Tool[P, R]:
        """The same tool (name, policies, schema) calling ``fn`` instead: for fault injection."""
        twin: Tool[P, R] = object.__new__(Tool)
        twin.__dict__.update(self.__dict__)
        twin.fn = fn
        return twin


@overload
def tool(fn: Callable[P, Awaitable[R]], /) -> Tool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    recovery: Recovery = "quarantine",
    requires_approval: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
    reconcile: ReconcileHook | None = None,
    breaker: Any = "external_api",
    description: str | None = None,
) -> Callable[[Callable[P, Awaitable[R]]], Tool[P, R]]: ...


def tool(
    fn: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    recovery: Recovery = "quarantine",
    requires_approval: bool = False,
    timeout: float | None = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
    reconcile: ReconcileHook | None = None,
    breaker: Any = "external_api",
    description: str | None = None,
) -> Tool[..., Any] | Callable[[Callable[..., Awaitable[Any]]], Tool[..., Any]]:
    """Declare a tool: ``@tether.tool`` or ``@tether.tool(recovery="retry", timeout=10)``.

    See the module docstring for ``recovery``. ``timeout`` is the seconds one call may take
    (default 300): a call still running then is cut short, and its outcome is "maybe carried
    out" (a ``TimeoutError``: retried with the same key by ``recovery="retry"`` tools, handed
    to the recovery policy by the others). ``timeout=None`` means no limit, explicitly: a call
    that hangs then holds its session until it returns or a ``tether.CancelTask`` interrupts
    it. ``breaker`` is a tool kind from the defaults
    table (``"external_api"``, ``"database"``, ``"file_system"``, ``"model"``,
    ``"memory_store"``), a ``tether.BreakerPolicy``, or None for no breaker. ``description``
    defaults to the docstring's text before its sections; the parameters' descriptions come
    from ``Annotated`` metadata or the docstring's ``Args:`` (Google), ``Parameters`` (NumPy)
    or ``:param x:`` (Sphinx) entries, an explicit ``Annotated`` one first.

    A tool that takes the runtime's idempotency key declares
    ``idempotency_key: str = tether.RUNTIME_KEY``: the default lets type checkers accept
    ``effect(tool, ...)`` calls that leave it out (the runtime supplies it; a caller may not).
    """

    def wrap(f: Callable[..., Awaitable[Any]]) -> Tool[..., Any]:
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
