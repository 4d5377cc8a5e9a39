"""The pieces both validators of a function tool use (msgspec's in ``tool_schema.py``, pydantic's
in ``tool_pydantic.py``): a parameter as the signature and docstring declare it, and the two
small type and schema helpers. Kept apart so that the pydantic side, imported only when a tool
needs it, depends on these and not on the module that imports it.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any


class Parameter(typing.NamedTuple):
    name: str
    annotation: Any  # with its Annotated metadata, and the docstring's text as a description
    default: Any  # inspect.Parameter.empty when required


def inline_object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """msgspec's schema of a Struct is a ``$ref`` into ``$defs``; a tool's input schema is the
    object itself (what model APIs and MCP expect), with the other definitions beside it."""
    ref = schema.get("$ref")
    if not (isinstance(ref, str) and ref.startswith("#/$defs/")):
        return schema
    defs = dict(schema.get("$defs", {}))
    inner = dict(defs.pop(ref.removeprefix("#/$defs/")))
    inner.pop("title", None)  # the generated Struct's name says nothing to a model
    if defs:
        inner["$defs"] = defs
    return inner


def strip_annotated(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """``(type, metadata)`` of an ``Annotated`` type (nested ones are flattened by Python)."""
    if typing.get_origin(annotation) is Annotated:
        base, *metadata = typing.get_args(annotation)
        return base, tuple(metadata)
    return annotation, ()
