"""Tools whose arguments or result are pydantic models: validated and described by pydantic.

Imported only when a tool's signature needs it, so pydantic stays an optional dependency. The
ledger still stores JSON values (``model_dump(mode="json")``), so a recorded call reads the same
whichever library validated it; a replayed result is validated back into the declared type.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import msgspec

from tether.actors.tool_params import Parameter, inline_object_schema, strip_annotated
from tether.errors import ConfigError

try:
    import pydantic
    from pydantic_core import PydanticSerializationError
except ImportError as exc:  # pragma: no cover - exercised only without pydantic installed
    raise ConfigError(
        "this tool's types need pydantic (a pydantic model or pydantic constraints): "
        "pip install pydantic"
    ) from exc

_msgpack = msgspec.msgpack.Encoder()
_config = pydantic.ConfigDict(
    extra="forbid",  # an argument the tool does not take is an error, as with msgspec
    protected_namespaces=(),  # parameters named model_... are the tool's business
)


class PydanticInput:
    """The arguments as one pydantic model made from the signature."""

    def __init__(self, name: str, params: list[Parameter], where: str) -> None:
        fields: dict[str, Any] = {}
        for p in params:
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (_as_pydantic(p.annotation), default)
        try:
            self.model: type[pydantic.BaseModel] = pydantic.create_model(
                f"{name}_input", __config__=_config, **fields
            )
            schema = self.model.model_json_schema()
        except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
            # e.g. a msgspec Struct beside a pydantic model: one library validates a tool
            raise ConfigError(f"{where}: its types cannot be validated by pydantic: {exc}") from exc
        self._schema = inline_object_schema(schema)
        self._schema.pop("title", None)

    def json_schema(self) -> dict[str, Any]:
        return dict(self._schema)

    def validate(self, args: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        try:
            validated = self.model.model_validate(args)
        except pydantic.ValidationError as exc:
            raise ValueError(problems(exc)) from None
        kwargs = {name: getattr(validated, name) for name in type(validated).model_fields}
        return kwargs, validated.model_dump(mode="json")


class PydanticResult:
    """A result recorded as its JSON form and validated back into the declared type."""

    def __init__(self, result_type: Any, where: str) -> None:
        try:
            self._adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(result_type)
        except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
            raise ConfigError(f"{where}: its result type cannot be validated: {exc}") from exc

    def encode(self, value: Any) -> bytes:
        # Validated first, as the msgspec side decodes what it recorded: a dict returned for a
        # model is recorded as that model, and a wrong value is refused before it is stored.
        try:
            dumped = self._adapter.dump_python(self._adapter.validate_python(value), mode="json")
        except (pydantic.ValidationError, PydanticSerializationError) as exc:
            why = problems(exc) if isinstance(exc, pydantic.ValidationError) else str(exc)
            raise TypeError(why) from None
        return _msgpack.encode(dumped)

    def decode(self, blob: bytes) -> Any:
        value = msgspec.msgpack.decode(blob)
        try:
            return self._adapter.validate_python(value)
        except pydantic.ValidationError as exc:
            # the ledger's callers know msgspec's decode errors: a recorded result that does
            # not fit the tool's type (a person's --result, a changed return type) is one
            raise msgspec.ValidationError(problems(exc)) from None


def problems(exc: pydantic.ValidationError) -> str:
    """pydantic's errors in msgspec's words: ``<what> - at `$.field```, one per problem."""
    parts = []
    for error in exc.errors(include_url=False):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        parts.append(f"{error['msg']} - at `${path}`")
    return "; ".join(parts) or str(exc)


def _as_pydantic(annotation: Any) -> Any:
    """msgspec's ``Meta`` constraints and descriptions as pydantic ``Field`` s, in place."""
    base, metadata = strip_annotated(annotation)
    if not metadata:
        return annotation
    converted = [_field(m) if isinstance(m, msgspec.Meta) else m for m in metadata]
    return Annotated[(base, *converted)]


_META_TO_FIELD = (
    "gt",
    "ge",
    "lt",
    "le",
    "multiple_of",
    "pattern",
    "min_length",
    "max_length",
    "title",
    "description",
    "examples",
)


def _field(meta: msgspec.Meta) -> Any:
    kwargs = {k: getattr(meta, k) for k in _META_TO_FIELD if getattr(meta, k) is not None}
    return pydantic.Field(**kwargs)
