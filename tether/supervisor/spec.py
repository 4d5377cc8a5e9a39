"""What a supervisor is configured with: strategies, child specs, backoff and deciders.

The semantics copy Erlang/OTP's supervisor (see ``docs/supervision.md``):

* ``OneForOne``: only the failed child is restarted;
* ``OneForAll``: every child is stopped in reverse start order, then all restart in start order;
* ``RestForOne``: the failed child and the children started after it, likewise.

Restart intensity: one sliding window of restart times per supervisor, shared by all its
children. A restart that would make more than ``max_restarts`` within ``within`` seconds makes
the supervisor stop all its children (reverse start order) and fail, escalating to its parent.
"""

from __future__ import annotations

import abc
import math
import random
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

from tether.actors.actor import Actor, check_init
from tether.deprecation import warn_renamed
from tether.errors import ConfigError

RestartType: TypeAlias = Literal["permanent", "transient", "temporary"]
Shutdown: TypeAlias = float | Literal["brutal", "infinity"]
Directive: TypeAlias = Literal["resume", "restart", "stop", "escalate"]
Decider: TypeAlias = Callable[[BaseException], Directive] | Mapping[type[BaseException], Directive]

_DIRECTIVES = ("resume", "restart", "stop", "escalate")


class Backoff:
    """Delay before a restart: exponential with full jitter, capped, reset after a quiet period.

    The n-th consecutive restart of a child waits
    ``uniform(0, min(max_delay, initial_delay * multiplier**n))`` seconds (n from 0): the same
    words as a tool's :class:`~tether.RetryPolicy`. A child that ran ``reset_after`` seconds
    without failing starts again at n = 0. While a child backs off, its messages wait in its
    durable mailbox.

    ``initial=`` and ``max=`` are the deprecated names of ``initial_delay=`` and ``max_delay=``.
    """

    __slots__ = ("initial_delay", "max_delay", "multiplier", "reset_after", "rng")

    def __init__(
        self,
        initial_delay: float = 0.1,
        max_delay: float = 30.0,
        multiplier: float = 2.0,
        reset_after: float = 60.0,
        *,
        rng: random.Random | None = None,
        initial: float | None = None,
        max: float | None = None,  # noqa: A002 - the deprecated name, kept for one release
    ) -> None:
        if initial is not None:
            warn_renamed("Backoff()", "initial=", "initial_delay=")
            initial_delay = initial
        if max is not None:
            warn_renamed("Backoff()", "max=", "max_delay=")
            max_delay = max
        numbers = (initial_delay, max_delay, multiplier, reset_after)
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in numbers) or not (
            initial_delay >= 0
            and max_delay >= initial_delay
            and multiplier >= 1
            and reset_after >= 0
        ):
            raise ConfigError(
                "Backoff needs 0 <= initial_delay <= max_delay, multiplier >= 1 and "
                f"reset_after >= 0, got initial_delay={initial_delay!r} max_delay={max_delay!r} "
                f"multiplier={multiplier!r} reset_after={reset_after!r}"
            )
        self.initial_delay = initial_delay
        self.max_delay = max_delay
        self.multiplier = multiplier
        self.reset_after = reset_after
        self.rng = rng or random.Random()

    @property
    def initial(self) -> float:
        """Deprecated: ``initial_delay``."""
        warn_renamed("Backoff", ".initial", ".initial_delay", stacklevel=2)
        return self.initial_delay

    @property
    def max(self) -> float:
        """Deprecated: ``max_delay``."""
        warn_renamed("Backoff", ".max", ".max_delay", stacklevel=2)
        return self.max_delay

    def cap(self, n: int) -> float:
        """The upper bound of the n-th consecutive delay (n from 0)."""
        return float(min(self.max_delay, self.initial_delay * self.multiplier**n))

    def delay(self, n: int) -> float:
        """The n-th consecutive delay, with full jitter."""
        return self.rng.uniform(0.0, self.cap(n))

    def __repr__(self) -> str:
        return (
            f"Backoff(initial_delay={self.initial_delay}, max_delay={self.max_delay}, "
            f"multiplier={self.multiplier}, reset_after={self.reset_after})"
        )


class Strategy(abc.ABC):
    """Base of the three restart strategies."""

    name: str = ""

    def __init__(
        self, max_restarts: int = 3, within: float = 5.0, backoff: Backoff | None = None
    ) -> None:
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise ConfigError(f"max_restarts must be an integer >= 0, not {max_restarts!r}")
        if (
            isinstance(within, bool)
            or not isinstance(within, int | float)
            or not 0 < within < math.inf  # OTP's period: restarts that never age are a mistake
        ):
            raise ConfigError(
                f"within must be a positive, finite number of seconds, not {within!r}"
            )
        if backoff is not None and not isinstance(backoff, Backoff):
            # unchecked, the supervisor's fold failed on the first restart (AttributeError)
            raise ConfigError(f"backoff must be a tether.Backoff or None, not {backoff!r}")
        self.max_restarts = max_restarts
        self.within = float(within)
        self.backoff = backoff

    @abc.abstractmethod
    def affected(self, order: list[str], failed: str) -> list[str]:
        """The children (in start order) that restart when ``failed`` fails."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_restarts={self.max_restarts}, within={self.within}, backoff={self.backoff!r})"


class OneForOne(Strategy):
    """Restart only the child that failed."""

    name = "one_for_one"

    def affected(self, order: list[str], failed: str) -> list[str]:
        return [failed]


class OneForAll(Strategy):
    """Stop every child (reverse start order) and restart them all (start order)."""

    name = "one_for_all"

    def affected(self, order: list[str], failed: str) -> list[str]:
        return list(order)


class RestForOne(Strategy):
    """Restart the failed child and every child started after it."""

    name = "rest_for_one"

    def affected(self, order: list[str], failed: str) -> list[str]:
        return order[order.index(failed) :] if failed in order else [failed]


class ChildSpec:
    """How a supervisor starts, restarts and stops one child.

    Args:
        actor_class: the child's actor class (module level, so recovery can import it).
        child_id: the child's actor id, unique in the store.
        restart: ``permanent`` (always restarted, even after a normal stop), ``transient``
            (restarted only after a failure) or ``temporary`` (never restarted).
        shutdown: seconds a stopping child may take to finish its message before it is
            cancelled, ``"brutal"`` (cancel at once) or ``"infinity"`` (wait). By default 5
            seconds, and ``"infinity"`` for a supervisor, as in OTP: a supervisor's budget
            covers the shutdown of its whole subtree, and one cut short cancels its children.
        decider: maps the child's exceptions to directives; overrides the supervisor's.
        **init: the child's constructor arguments (stored; must be msgspec-encodable).
    """

    __slots__ = ("actor_class", "child_id", "decider", "init", "restart", "shutdown")

    def __init__(
        self,
        actor_class: type[Any],
        child_id: str,
        *,
        restart: RestartType = "permanent",
        shutdown: Shutdown | None = None,
        decider: Decider | None = None,
        **init: Any,
    ) -> None:
        # Checked here, not when the supervisor starts its children: then, spawn returned
        # and the supervisor failed to start again and again.
        if not isinstance(child_id, str) or not child_id:
            raise ConfigError(f"a child id must be a non-empty string, not {child_id!r}")
        if not (isinstance(actor_class, type) and issubclass(actor_class, Actor)):
            raise ConfigError(
                f"child {child_id!r}: {actor_class!r} is not a subclass of tether.Actor"
            )
        check_decider(decider, f"child {child_id!r}")
        if shutdown is None:  # a supervisor has child_entries (spec.py cannot import it)
            shutdown = "infinity" if hasattr(actor_class, "child_entries") else 5.0
        if restart not in ("permanent", "transient", "temporary"):
            raise ConfigError(
                f"child {child_id!r}: restart must be permanent, transient or temporary, not {restart!r}"
            )
        if not (
            shutdown in ("brutal", "infinity")
            or (
                isinstance(shutdown, int | float)
                and not isinstance(shutdown, bool)
                and shutdown >= 0
            )
        ):
            raise ConfigError(
                f"child {child_id!r}: shutdown must be seconds >= 0, 'brutal' or 'infinity', not {shutdown!r}"
            )
        check_init(actor_class, init, f"child {child_id!r}")
        self.actor_class = actor_class
        self.child_id = child_id
        self.restart: RestartType = restart
        self.shutdown: Shutdown = shutdown
        self.decider = decider
        self.init = init

    def __repr__(self) -> str:
        return f"ChildSpec({self.actor_class.__qualname__}, {self.child_id!r}, restart={self.restart!r})"


def check_decider(decider: object, where: str) -> None:
    """Refuse a decider that ``decide`` could not use: unchecked, it failed (a TypeError, or
    a bad directive) in the supervisor's handler when a child first failed, leaving the
    failure undecided."""
    if decider is None or (callable(decider) and not isinstance(decider, Mapping)):
        return
    if not isinstance(decider, Mapping):
        raise ConfigError(
            f"{where}: a decider is a function of the exception or a mapping of exception "
            f"types to directives, not {decider!r}"
        )
    for key, directive in decider.items():
        if not (isinstance(key, type) and issubclass(key, BaseException)):
            raise ConfigError(f"{where}: decider key {key!r} is not an exception type")
        if directive not in _DIRECTIVES:
            raise ConfigError(
                f"{where}: decider maps {key.__name__} to {directive!r}; expected one of "
                f"{', '.join(_DIRECTIVES)}"
            )


def decide(decider: Decider | None, exc: BaseException) -> Directive:
    """The directive for ``exc``: the most specific mapped type wins; unmapped means restart."""
    if decider is None:
        return "restart"
    if callable(decider) and not isinstance(decider, Mapping):
        directive = decider(exc)
    else:
        directive = next((decider[t] for t in type(exc).__mro__ if t in decider), "restart")
    if directive not in _DIRECTIVES:
        raise ConfigError(
            f"a decider returned {directive!r}; expected one of {', '.join(_DIRECTIVES)}"
        )
    return directive
