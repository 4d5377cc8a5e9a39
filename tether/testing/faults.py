"""``FaultInjector``: make a tool fail, slow down or hang on chosen call numbers.

For testing how an agent (and tether's ledger, retries, breakers and quarantine) behaves when
the outside world misbehaves, without touching the tool's code::

    faults = FaultInjector()
    faults.fail(refund, calls=[1, 2], error=tether.TransientToolError("refund", "503"))
    faults.hang(refund, calls=[3])          # never returns: the tool's timeout fires
    faults.delay(refund, calls=[4], seconds=0.5)
    flaky_refund = faults.wrap(refund)      # same name, schema and policies

Calls are counted per tool name from 1, across every wrapped copy, so a plan survives the
actor being restarted in the same process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import anyio

from tether.actors.tool import Tool
from tether.errors import ConfigError


class FaultInjector:
    """A plan of faults per tool and call number (see the module docstring)."""

    def __init__(self, *, sleep: Callable[[float], Any] | None = None) -> None:
        self._sleep = sleep if sleep is not None else anyio.sleep
        self._counts: dict[str, int] = {}
        self._plans: dict[str, dict[int, tuple[str, Any]]] = {}

    def fail(
        self, tool: Tool, *, calls: Iterable[int], error: BaseException | type[BaseException]
    ) -> FaultInjector:
        """Raise ``error`` instead of calling the tool on these call numbers."""
        # checked now: a non-exception would only fail at the planned call, as a TypeError
        if not (
            isinstance(error, BaseException)
            or (isinstance(error, type) and issubclass(error, BaseException))
        ):
            raise ConfigError(f"error must be an exception to raise, not {error!r}")
        return self._plan(tool, calls, ("fail", error))

    def delay(self, tool: Tool, *, calls: Iterable[int], seconds: float) -> FaultInjector:
        """Wait ``seconds`` before calling the tool on these call numbers."""
        if not (
            isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0
        ):
            raise ConfigError(f"delay must be >= 0 seconds, not {seconds!r}")
        return self._plan(tool, calls, ("delay", seconds))

    def hang(self, tool: Tool, *, calls: Iterable[int]) -> FaultInjector:
        """Never return on these call numbers (until cancelled, e.g. by the tool's timeout)."""
        return self._plan(tool, calls, ("hang", None))

    def calls(self, tool: Tool | str) -> int:
        """How many calls of this tool went through any wrapped copy so far."""
        return self._counts.get(tool if isinstance(tool, str) else tool.name, 0)

    def wrap(self, tool: Tool) -> Tool:
        """The same tool, with this injector's faults applied to its calls."""
        name = tool.name
        fn = tool.fn

        async def faulty(**kwargs: Any) -> Any:
            number = self._counts[name] = self._counts.get(name, 0) + 1
            kind, arg = self._plans.get(name, {}).get(number, ("none", None))
            if kind == "fail":
                raise arg
            if kind == "hang":
                await anyio.sleep_forever()
            if kind == "delay":
                await self._sleep(arg)
            return await fn(**kwargs)

        return tool.with_fn(faulty)

    def _plan(self, tool: Tool, calls: Iterable[int], fault: tuple[str, Any]) -> FaultInjector:
        if not isinstance(tool, Tool):
            raise ConfigError(f"faults apply to tools declared with @tether.tool, not {tool!r}")
        if isinstance(calls, int | str | bytes):  # one number, or digits: not a list of calls
            raise ConfigError(f"calls must be a list of call numbers, not {calls!r}")
        try:
            numbers = list(calls)
        except TypeError:
            raise ConfigError(f"calls must be a list of call numbers, not {calls!r}") from None
        # every number is checked before any is planned: a bad one leaves the plan as it was
        for n in numbers:
            if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
                raise ConfigError(f"call numbers start at 1, got {n!r}")
        plan = self._plans.setdefault(tool.name, {})
        for n in numbers:
            plan[n] = fault
        return self
