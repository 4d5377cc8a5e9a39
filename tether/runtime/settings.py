"""The checks of the runtime's settings: each names the setting it refuses."""

from __future__ import annotations

from typing import Any

from tether.errors import ConfigError


def positive(name: str, value: Any, *, integer: bool = False) -> None:
    """Raise ``ConfigError`` unless ``value`` is a positive number (an integer if ``integer``)."""
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0:
        raise ConfigError(
            f"{name} must be a positive {'integer' if integer else 'number'}, not {value!r}"
        )
