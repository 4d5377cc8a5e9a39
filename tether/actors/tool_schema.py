"""What a tool takes and returns: the seam that typed tools and schema tools share.

A :class:`~tether.Tool` asks its :class:`ToolSchema` four things, and nothing else about its
input and result:

* ``json_schema()``: the input as a JSON Schema object, which is what a model sees;
* ``validate(args)``: the arguments checked, before anything is recorded (I4), as the keyword
  arguments of the call and as their JSON form, which the ledger stores and hashes (I5);
* ``encode_result`` / ``decode_result``: the recorded form of a result, and the value a replay
  returns instead of calling again.

Two kinds exist. :class:`FunctionSchema` is derived from an ``async def``'s signature
(``@tether.tool``): msgspec validates it, or pydantic when a parameter is a pydantic model or
carries pydantic constraints; ``typing.Annotated`` metadata and the docstring's parameter
sections describe the fields. :class:`JsonSchema` is given: a JSON Schema from elsewhere (an
MCP server's tool list) and a validator for it, for tools whose input no Python type declares.
"""

from __future__ import annotations

import abc
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import msgspec

from tether.actors.docstrings import parse as parse_docstring
from tether.actors.tool_params import Parameter, inline_object_schema, strip_annotated
from tether.errors import ConfigError

KEY_PARAMETER = "idempotency_key"

_msgpack = msgspec.msgpack.Encoder()
_any_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder()
# Annotated metadata that only pydantic enforces: a tool that uses it is validated by pydantic.
_PYDANTIC_METADATA = ("pydantic", "annotated_types")


class ToolSchema(abc.ABC):
    """The input and result contract of one tool, whatever declared it.

    Subclass it to give a :class:`~tether.Tool` an input that neither a Python signature nor a
    ready JSON Schema describes; most code uses :meth:`Tool.from_schema` or ``@tether.tool``.
    """

    #: Whether the function receives the runtime's idempotency key as ``idempotency_key``.
    takes_key: bool = False
    #: The parameters in declaration order, for arguments passed by position (typed tools).
    parameter_names: tuple[str, ...] = ()
    #: The declared result type, named in errors (``Any``: whatever msgpack can hold).
    result_type: Any = Any
    #: What the tool's own source says it does (a docstring): ``Tool.description`` by default.
    description: str = ""

    @abc.abstractmethod
    def json_schema(self) -> dict[str, Any]:
        """The input as a JSON Schema of ``"type": "object"``, one property per argument."""

    @abc.abstractmethod
    def validate(self, args: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """``(keyword arguments for the call, their JSON-compatible form)``.

        Raises ``ValueError`` (or ``tether.ToolInputError``) whose message names the field and
        the problem, e.g. ``Expected `int` >= 1 - at `$.amount_cents```."""

    def encode_result(self, value: Any) -> bytes:
        """The recorded form of a result. Raises ``TypeError`` for one that cannot be stored."""
        return _msgpack.encode(value)

    def decode_result(self, blob: bytes) -> Any:
        """A recorded result as the call returned it. Raises ``msgspec.DecodeError``."""
        return _any_decoder.decode(blob)


class JsonSchema(ToolSchema):
    """An input described by a JSON Schema that came from elsewhere, and checked by
    ``validator``: a callable that raises (any ``Exception``, its message naming the problem)
    when the arguments do not fit. It may return a dict (the arguments with defaults filled
    in, values converted) to call the tool with instead; anything else keeps them as given.

    For example ``validator=jsonschema.Draft202012Validator(schema).validate``.
    """

    def __init__(
        self,
        schema: Mapping[str, Any],
        validator: Callable[[dict[str, Any]], object],
        *,
        takes_key: bool = False,
        where: str = "tool",
    ) -> None:
        if not isinstance(schema, Mapping) or schema.get("type") != "object":
            raise ConfigError(
                f"{where}: input_schema must be a JSON Schema object with "
                f'"type": "object" (a model sends arguments by name), not {schema!r}'
            )
        try:
            self._schema = msgspec.json.decode(msgspec.json.encode(schema))
        except (TypeError, msgspec.EncodeError) as exc:
            raise ConfigError(f"{where}: input_schema is not JSON: {exc}") from exc
        if not callable(validator):
            raise ConfigError(f"{where}: validator must be callable, not {validator!r}")
        self._validator = validator
        self.takes_key = bool(takes_key)

    def json_schema(self) -> dict[str, Any]:
        return dict(self._schema)

    def validate(self, args: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        try:
            checked = self._validator(dict(args))
        except Exception as exc:  # noqa: BLE001 - whatever it raises, the arguments do not fit
            raise ValueError(str(exc) or type(exc).__name__) from None
        kwargs = dict(checked) if isinstance(checked, Mapping) else dict(args)
        try:
            return kwargs, msgspec.to_builtins(kwargs, str_keys=True)
        except (TypeError, msgspec.EncodeError) as exc:
            raise ValueError(f"arguments are not JSON values: {exc}") from None


class FunctionSchema(ToolSchema):
    """The input and result of an ``async def``, from its type hints and docstring.

    A parameter's description comes from ``Annotated`` metadata (``msgspec.Meta(description=)``,
    ``pydantic.Field(description=)`` or a plain string) or else from the docstring's parameter
    section; an explicit one wins. Constraints in ``Annotated`` (``msgspec.Meta(ge=1)``,
    ``pydantic.Field(ge=1)``, ``annotated_types.Ge(1)``) are enforced.
    """

    def __init__(self, fn: Callable[..., Any], where: str) -> None:
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except (NameError, TypeError) as exc:
            raise ConfigError(f"{where}: cannot resolve its type annotations: {exc}") from exc
        doc = parse_docstring(inspect.getdoc(fn))
        #: The docstring's text before its sections: the tool's description by default.
        self.description = doc.description
        params: list[Parameter] = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ConfigError(
                    f"{where}: *args and **kwargs cannot be validated; name each argument"
                )
            if p.kind is p.POSITIONAL_ONLY:
                raise ConfigError(
                    f"{where}: positional-only parameter {p.name!r}; tools take keywords"
                )
            if p.name == KEY_PARAMETER:
                self.takes_key = True
                continue
            if p.name not in hints:
                raise ConfigError(f"{where}: parameter {p.name!r} has no type annotation")
            annotation = _described(hints[p.name], doc.params.get(p.name))
            params.append(Parameter(p.name, annotation, p.default))
        self.parameter_names = tuple(p.name for p in params)
        self.result_type = hints.get("return", Any)
        name = getattr(fn, "__name__", "tool")
        if any(_needs_pydantic(p.annotation) for p in params):
            from tether.actors.tool_pydantic import PydanticInput

            self._input: _Input = PydanticInput(name, params, where)
        else:
            self._input = _MsgspecInput(name, params, where)
        if _needs_pydantic(self.result_type):
            from tether.actors.tool_pydantic import PydanticResult

            self._result: _Result = PydanticResult(self.result_type, where)
        else:
            self._result = _MsgspecResult(self.result_type, where)

    def json_schema(self) -> dict[str, Any]:
        return self._input.json_schema()

    def validate(self, args: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        return self._input.validate(args)

    def encode_result(self, value: Any) -> bytes:
        return self._result.encode(value)

    def decode_result(self, blob: bytes) -> Any:
        return self._result.decode(blob)


class _Input(typing.Protocol):
    def json_schema(self) -> dict[str, Any]: ...

    def validate(self, args: dict[str, Any]) -> tuple[dict[str, Any], Any]: ...


class _Result(typing.Protocol):
    def encode(self, value: Any) -> bytes: ...

    def decode(self, blob: bytes) -> Any: ...


class _MsgspecInput:
    """Arguments validated by msgspec, as one frozen Struct that forbids unknown fields."""

    def __init__(self, name: str, params: list[Parameter], where: str) -> None:
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
            (p.name, p.annotation) if p.default is inspect.Parameter.empty else p for p in params
        ]
        self.struct = msgspec.defstruct(
            f"{name}_input", fields, kw_only=True, forbid_unknown_fields=True, frozen=True
        )
        try:
            self._schema = inline_object_schema(msgspec.json.schema(self.struct))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: its types cannot be recorded by msgspec: {exc}") from exc

    def json_schema(self) -> dict[str, Any]:
        return dict(self._schema)

    def validate(self, args: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        try:
            validated = msgspec.convert(args, self.struct)
        except msgspec.ValidationError as exc:
            raise ValueError(str(exc)) from None
        # every field by name, unconverted (Structs stay Structs), and their JSON form
        return msgspec.structs.asdict(validated), msgspec.to_builtins(validated)


class _MsgspecResult:
    def __init__(self, result_type: Any, where: str) -> None:
        try:
            self._decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(result_type)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: its types cannot be recorded by msgspec: {exc}") from exc

    def encode(self, value: Any) -> bytes:
        return _msgpack.encode(value)

    def decode(self, blob: bytes) -> Any:
        return self._decoder.decode(blob)


def _described(annotation: Any, doc: str | None) -> Any:
    """``annotation`` with the docstring's description first and its own metadata after it, so
    that an explicit description (``Meta``, ``Field`` or a string) wins. A plain string becomes
    ``msgspec.Meta(description=...)`` (pydantic's side reads it as a description too)."""
    base, metadata = strip_annotated(annotation)
    extra: list[Any] = [msgspec.Meta(description=doc)] if doc else []
    extra += [msgspec.Meta(description=m) if isinstance(m, str) else m for m in metadata]
    if not extra:
        return base
    return Annotated[(base, *extra)]


def _needs_pydantic(annotation: Any) -> bool:
    """Whether validating ``annotation`` takes pydantic: a pydantic model or dataclass anywhere
    in it, or constraints only pydantic enforces (``Field``, ``annotated_types``)."""
    base, metadata = strip_annotated(annotation)
    for m in metadata:
        if type(m).__module__.partition(".")[0] in _PYDANTIC_METADATA:
            return True
    if isinstance(base, type) and hasattr(base, "__pydantic_validator__"):
        return True
    return any(_needs_pydantic(arg) for arg in typing.get_args(base) if not isinstance(arg, str))
