"""Keyword arguments that were renamed: the old name keeps working for one release, with a
``DeprecationWarning`` that names the new one.

One name per idea across the public API (``docs/naming.md``): a wait before trying again is a
``*_delay`` (``initial_delay``, ``max_delay``), its growth per step a ``multiplier``, a bound a
``max_*``; the number of people an approval needs is ``approvers_needed``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec


def warn_renamed(where: str, old: str, new: str, *, stacklevel: int = 3) -> None:
    """Say that ``where``'s ``old`` is now called ``new`` (``DeprecationWarning``)."""
    warnings.warn(
        f"{where}: {old} is deprecated and will be removed in the next minor release; use {new}",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def renamed(where: str, renames: Mapping[str, str], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each old name in ``renames`` replaced by its new name, warning once per
    old name used; giving both names is a ``TypeError``, as for any duplicate argument."""
    for old, new in renames.items():
        if old not in kwargs:
            continue
        if new in kwargs:
            raise TypeError(f"{where}() got {old}= and {new}=; {old} is the old name of {new}")
        warn_renamed(f"{where}()", f"{old}=", f"{new}=", stacklevel=4)
        kwargs[new] = kwargs.pop(old)
    return kwargs


class RenamedFields(msgspec.StructMeta):
    """The metaclass of a Struct whose ``_renamed_fields`` (old name -> new name) are still
    accepted as keyword arguments by its constructor (a Struct cannot define ``__init__``)."""

    _renamed_fields: ClassVar[Mapping[str, str]]

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        renames = getattr(cls, "_renamed_fields", None)
        if renames:
            kwargs = renamed(cls.__name__, renames, kwargs)
        return super().__call__(*args, **kwargs)
