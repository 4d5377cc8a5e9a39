"""``GcPolicy``: how a serving runtime tunes CPython's cyclic garbage collector.

Every resident actor is a few dozen container objects (its cell, instance, state, buffer, task)
that live as long as it stays in memory, and every message in flight holds a few more until its
group commit settles. At CPython's default thresholds (700, 10, 10) young collections run every
700 allocations, so the objects of messages in flight survive them and are promoted, and the
collector walks them again and again: with 10,000 sessions each with its own sender, a third of
the loop's time went to the collector and durable throughput fell to a third of its figure with
1,000 sessions. Nothing in tether relies on the collector for correctness (every resource is
closed explicitly), so a serving runtime may collect less often.

Two levers, both process-wide because the collector is:

* **thresholds**, raised while a runtime serves and restored when the last one closes: a young
  collection every 50,000 allocations instead of 700; the in-flight objects of a step are
  freed by reference counting long before that, so they are never walked at all;
* **freezing**: shortly after actors are activated, ``gc.freeze()`` moves every object the
  collector tracks into its permanent generation, which no collection walks. Resident actors
  then cost the collector nothing. The price: a reference cycle among frozen objects that
  becomes garbage (a cell that passivated) is only collected once unfrozen. The governor pays
  it periodically: once the activations since its last refresh reach the actors resident at
  that refresh (at least ``_MIN_REFRESH``), the next freeze is preceded by ``gc.unfreeze()``
  and a full ``gc.collect()`` — the cost of a full collection, spread over as many
  activations as there are resident actors, and memory held by frozen garbage stays within
  about one generation of churn.

Several runtimes in one process share the collector: the thresholds in force are those of the
most recently opened runtime still open whose policy sets any; the collector freezes if any
open runtime's policy asks for it; when the last one closes, the thresholds the process had
before the first one opened are restored and the permanent generation is unfrozen (which also
unfreezes what the application froze itself: a process that calls ``gc.freeze()`` for its own
reasons, before forking workers say, should pass ``GcPolicy(freeze=False)``).
"""

from __future__ import annotations

import asyncio
import gc
import threading
from dataclasses import dataclass

from tether.errors import ConfigError

_FREEZE_DELAY = 0.1  # s after an activation: a batch of activations is frozen once, at its end
_MIN_REFRESH = 1_000  # activations between full collections, whatever is resident


@dataclass(frozen=True)
class GcPolicy:
    """What a serving runtime does to CPython's cyclic garbage collector (process-wide).

    Args:
        threshold: ``gc.set_threshold(*threshold)`` while the runtime serves, the thresholds
            of before restored when the last runtime of the process closes; None: left as they
            are. The default collects the young generation every 50,000 allocations (CPython:
            700), the middle one every 20 young collections and the old one every 100 middle
            ones (still only when a quarter of it is new, as CPython always does).
        freeze: move long-lived objects out of the collector's reach with ``gc.freeze()``
            shortly after actors are activated; what became garbage among them is collected by
            a full collection once as many actors were activated since the last one as were
            resident then.

    ``GcPolicy.unchanged()`` leaves the collector entirely as the process set it.
    """

    threshold: tuple[int, int, int] | None = (50_000, 20, 100)
    freeze: bool = True

    def __post_init__(self) -> None:
        t = self.threshold
        if t is not None and not (
            isinstance(t, tuple) and len(t) == 3 and all(type(v) is int and v > 0 for v in t)
        ):
            raise ConfigError(
                f"GcPolicy threshold must be a tuple of 3 positive integers (as "
                f"gc.set_threshold takes them, e.g. (50_000, 20, 100)) or None, not {t!r}"
            )
        if not isinstance(self.freeze, bool):
            raise ConfigError(f"GcPolicy freeze must be True or False, not {self.freeze!r}")

    @classmethod
    def unchanged(cls) -> GcPolicy:
        """Leave the collector as the process set it: no thresholds, no freezing."""
        return cls(threshold=None, freeze=False)


class _Governor:
    """The process's one view of the collector, shared by every open runtime (and by the
    benchmarks' floor, so that its ratios to tether are taken under the same settings)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: list[GcPolicy] = []  # in the order they entered
        self._saved: tuple[int, int, int] | None = None  # the thresholds before the first
        self._froze = False  # whether this governor froze anything since the first entered
        self._pending: asyncio.TimerHandle | None = None
        self._activations = 0  # since the last refresh
        self._resident = 0  # actors in memory, as the latest activation said
        self._resident_at_refresh = 0

    def enter(self, policy: GcPolicy) -> None:
        with self._lock:
            if not self._holders:
                self._saved = gc.get_threshold()
                self._activations = self._resident_at_refresh = 0
            self._holders.append(policy)
            self._apply_threshold()

    def exit(self, policy: GcPolicy) -> None:
        with self._lock:
            for i in range(len(self._holders) - 1, -1, -1):
                if self._holders[i] is policy:
                    del self._holders[i]
                    break
            else:
                return
            if self._pending is not None:
                # It may be on the loop of the runtime closing now, which may never run it:
                # the next activation schedules another.
                self._pending.cancel()
                self._pending = None
            if self._holders:
                self._apply_threshold()
                return
            if self._froze:
                gc.unfreeze()
                self._froze = False
            if self._saved is not None:
                gc.set_threshold(*self._saved)
                self._saved = None

    def _apply_threshold(self) -> None:
        for policy in reversed(self._holders):
            if policy.threshold is not None:
                gc.set_threshold(*policy.threshold)
                return
        if self._saved is not None:
            gc.set_threshold(*self._saved)

    @property
    def freeze_pending(self) -> bool:
        """Whether a freeze is scheduled (a batch of activations is under way or just ended):
        benchmarks wait for it to pass before their clocks start."""
        return self._pending is not None

    def activated(self, resident: int) -> None:
        """An actor was activated (``resident`` actors are in memory now): freeze soon, once
        for the whole batch. Called on the event loop of the runtime that activated it."""
        self._activations += 1
        self._resident = resident
        if self._pending is None and any(p.freeze for p in self._holders):
            loop = asyncio.get_running_loop()
            self._pending = loop.call_later(_FREEZE_DELAY, self._freeze)

    def _freeze(self) -> None:
        with self._lock:
            self._pending = None
            if not any(p.freeze for p in self._holders):
                return
            if self._froze and self._activations >= max(_MIN_REFRESH, self._resident_at_refresh):
                # Garbage among the frozen (cells that left) is collected now, all of it.
                gc.unfreeze()
                gc.collect()
                self._activations = 0
                self._resident_at_refresh = self._resident
            gc.freeze()
            self._froze = True


governor = _Governor()
