"""What an effect's path may touch: of the runtime (``EffectHost``), and of the calling actor's
cell (``EffectCell``). The parts of the path (``effects.py``, ``admission.py``, ``gate.py``,
``recovery.py``) are typed against these, never against the ``Runtime`` or the ``Cell``."""

from __future__ import annotations

from typing import Protocol

from tether.runtime.approval_desk import Approvals
from tether.runtime.guards import Guards
from tether.runtime.kernel import ActiveCell, Kernel


class EffectHost(Kernel, Protocol):
    """What the effect path touches of the runtime: the kernel, and the two services a call
    passes through (its guards, and the approvals desk of a held call)."""

    @property
    def approvals(self) -> Approvals: ...
    @property
    def guards(self) -> Guards: ...


class EffectCell(ActiveCell, Protocol):
    """The cell of the actor making a call, seen from its effect path."""

    @property
    def runtime(self) -> EffectHost: ...
