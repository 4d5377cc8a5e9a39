"""Interrupting the tool call a step waits on, when a message that ends its work arrives.

A step is one message and commits as one transaction (I2), so a ``tether.CancelTask`` cannot
commit inside the step it cancels: it waits in the mailbox behind it. What the runtime can do
is stop the wait. A message class that sets ``interrupts = True`` (``CancelTask``) makes its
actor's running step's tool call end now: the call's coroutine is cancelled, its outcome is
"maybe carried out" (as after a timeout) and the tool's recovery policy records it without
calling again (``recovery.interrupted``). The handler gets ``tether.EffectInterrupted``, the
step commits, and the interrupting message is delivered next. A call the step makes after the
interrupt arrived is not made at all. See ``docs/recovery.md``, "Interrupted calls".
"""

from __future__ import annotations

import math
from types import TracebackType
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from tether.runtime.kernel import ActiveCell


class CallInterrupted(Exception):
    """A tool call was cut short by an interrupt (``made``: it was under way) or not made."""

    def __init__(self, why: str, *, made: bool) -> None:
        self.why = why
        self.made = made
        super().__init__(why)


class Interruptible:
    """The scope of one tool call: its timeout (None: none) and the cell's interrupts.

    One cancel scope for both, the call's deadline its own: a tool call is the hot path, and a
    second scope per call costs as much as the rest of the wait's bookkeeping."""

    __slots__ = ("_scope", "cell", "timeout")

    def __init__(self, cell: ActiveCell, timeout: float | None) -> None:
        self.cell = cell
        self.timeout = timeout

    def __enter__(self) -> Interruptible:
        cell = self.cell
        if cell.interrupt is not None:  # arrived while the step ran, before this call
            raise CallInterrupted(cell.interrupt, made=False)
        deadline = math.inf if self.timeout is None else anyio.current_time() + self.timeout
        self._scope = anyio.CancelScope(deadline=deadline)
        self._scope.__enter__()
        cell.call_scope = self._scope
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self.cell.call_scope = None
        return self._scope.__exit__(exc_type, exc, tb)

    def cut_short(self) -> Exception:
        """Why the call ended without an outcome: the interrupt, or else its timeout."""
        if self.cell.interrupt is not None:
            return CallInterrupted(self.cell.interrupt, made=True)
        return TimeoutError(f"the call did not return within its timeout of {self.timeout} s")
