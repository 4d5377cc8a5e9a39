"""Spawn arguments as stored: the keyword arguments an actor's constructor gets at every
activation, decoded to the types the constructor annotates."""

from __future__ import annotations

import weakref
from typing import Any

import msgspec

from tether.actors.actor import ActorSpec
from tether.errors import ConfigError


def decode_init(spec: ActorSpec, init: bytes) -> dict[str, Any]:
    """Decode stored spawn arguments, converted to the types the constructor annotates."""
    try:
        raw = msgspec.msgpack.decode(init)
    except msgspec.DecodeError as exc:
        raise ConfigError(
            f"stored spawn arguments of {spec.class_path} cannot be decoded: {exc}"
        ) from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"stored spawn arguments of {spec.class_path} are not a mapping")
    hints = _init_hints(spec.cls)
    try:
        return {k: msgspec.convert(v, hints[k]) if k in hints else v for k, v in raw.items()}
    except msgspec.ValidationError as exc:
        raise ConfigError(
            f"spawn arguments of {spec.class_path} do not match its constructor: {exc}"
        ) from exc


# The constructor's hints, by class: resolving them (``typing.get_type_hints`` compiles every
# string annotation) cost more than the rest of an activation's decoding, at every activation.
# Weak keys: a class that goes away takes its entry with it.
_HINTS: weakref.WeakKeyDictionary[type[Any], dict[str, Any]] = weakref.WeakKeyDictionary()


def _init_hints(cls: type[Any]) -> dict[str, Any]:
    """The annotated parameters of ``cls``'s constructor (read only: shared by activations)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = _resolve_hints(cls)
    return hints


def _resolve_hints(cls: type[Any]) -> dict[str, Any]:
    import typing

    init = cls.__init__
    if init is object.__init__:
        return {}
    try:
        hints = typing.get_type_hints(init)
    except (NameError, TypeError):
        return {}
    hints.pop("return", None)
    return hints
