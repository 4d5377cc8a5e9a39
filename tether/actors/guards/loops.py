"""The pure core of a loop detector: deterministic checks over a bounded history of tool calls.

Mainstream agent frameworks only cap steps; the one content check in use (CrewAI) compares a
call with the one before it (``resilience-hitl-anchors.md`` §4). This detector looks for four
patterns over ``(tool, args_hash, result_hash)`` entries:

* ``repeat``: the same call (tool + canonical arguments) N times in a row;
* ``cycle``: a block of 2..k different calls repeated R full times (A-B-A-B, A-B-C-A-B-C);
* ``window``: the same call N times within the last W calls, where repeats that keep
  returning new results are progress (each distinct result after the first forgives one
  occurrence: a test-fix loop re-running the same test command does not count);
* ``no_progress``: the same call returned the same result N times in a row within the last
  W calls (a file re-read once is fine; the third identical answer is not).

Each pattern answers with a response for the wrapper to act on: ``feedback`` (tell the model,
e.g. as the tool's result), ``reset`` (clear the agent's context; the detector clears its
history in the same step), ``stop`` or ``escalate`` (ask a human). Feedback the model ignores
climbs a ladder: after ``max_feedback`` feedback answers within the last ``history`` calls,
further detections answer ``after_feedback`` (``escalate`` by default).

Like the breaker, it is event-sourced: :meth:`LoopDetector.observe_call`,
:meth:`LoopDetector.observe_result` and :meth:`LoopDetector.reset` return the events to
journal, and :meth:`LoopDetector.apply` folds them into a :class:`LoopState`. No I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final, Literal, NoReturn, TypeAlias, assert_never

import msgspec

from tether.actors.messages import Event
from tether.errors import ConfigError

Pattern: TypeAlias = Literal["repeat", "cycle", "window", "no_progress"]
Response: TypeAlias = Literal["feedback", "reset", "stop", "escalate"]

_RESPONSES: Final = ("feedback", "reset", "stop", "escalate")


def canonical_hash(value: object) -> str:
    """A short stable hash of a JSON-like value (tool arguments or a tool's result).

    Mapping keys are sorted, so ``{"a": 1, "b": 2}`` and ``{"b": 2, "a": 1}`` hash alike.
    Values msgspec cannot encode fall back to ``repr``; a repr that embeds an address makes
    every result look new, which errs towards fewer detections.
    """
    encoded = msgspec.json.encode(value, order="sorted", enc_hook=repr)
    return hashlib.sha256(encoded).hexdigest()[:16]


# -- policy ------------------------------------------------------------------------------------


class LoopPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Which patterns count as a loop and what each one answers. ``None`` disables a pattern.

    Attributes:
        repeat: the same call this many times in a row (>= 2).
        cycle_period: the longest block a cycle may have (>= 2; blocks of 2..k calls).
        cycle_repeats: full repetitions of the block that make a cycle (>= 2).
        window: the same call this many times within the last ``window_size`` calls (>= 2).
        window_size: calls the ``window`` and ``no_progress`` rules look back over.
        no_progress: the same call returning the same result this many times in a row within
            the last ``window_size`` calls (>= 2).
        on_repeat: the response to ``repeat``.
        on_cycle: the response to a cycle.
        on_window: the response to ``window``.
        on_no_progress: the response to ``no_progress``.
        max_feedback: feedback answers within the last ``history`` calls after which a
            ``feedback`` response turns into ``after_feedback`` (``None``: never).
        after_feedback: the response once the model ignored ``max_feedback`` feedbacks.
        exempt_tools: tools that are expected to repeat (polling, waiting): never flagged by
            ``repeat``, ``window`` or ``no_progress``, nor by a cycle made only of them.
        history: calls kept (bounds the state; must cover every enabled pattern).
    """

    repeat: int | None = 3
    cycle_period: int | None = 4
    cycle_repeats: int = 2
    window: int | None = 4
    window_size: int = 20
    no_progress: int | None = 3
    # Defaults. Everything starts at "feedback" because a detection is evidence, not proof:
    # A-B-A-B with identical arguments is a loop, but the model often breaks it once told
    # ("you already ran X with these arguments twice"), and an escalation costs a human's
    # attention and parks the session. A cycle is the pattern the model is least likely to
    # notice by itself (each call differs from the one before it), which argued for escalating
    # at once; the ladder below gives the same end result when the feedback does not work
    # (three ignored feedbacks within `history` calls escalate) without paging a human for a
    # loop that one sentence would have broken.
    on_repeat: Response = "feedback"
    on_cycle: Response = "feedback"
    on_window: Response = "feedback"
    on_no_progress: Response = "feedback"
    max_feedback: int | None = 3
    after_feedback: Response = "escalate"
    exempt_tools: frozenset[str] = frozenset()
    history: int = 24  # covers window_size and cycle_period * cycle_repeats; small: per-call cost

    def __post_init__(self) -> None:
        for name in ("repeat", "cycle_period", "window", "no_progress"):
            value = getattr(self, name)
            if value is not None and not _whole(value, 2):
                _bad(name, value, "an integer >= 2 or None")
        if not _whole(self.cycle_repeats, 2):
            _bad("cycle_repeats", self.cycle_repeats, "an integer >= 2")
        if not _whole(self.window_size, 2):
            _bad("window_size", self.window_size, "an integer >= 2")
        for name in ("window", "no_progress"):
            value = getattr(self, name)
            if value is not None and value > self.window_size:
                _bad(name, value, f"at most window_size ({self.window_size})")
        if self.max_feedback is not None and not _whole(self.max_feedback, 1):
            _bad("max_feedback", self.max_feedback, "an integer >= 1 or None")
        for name in ("on_repeat", "on_cycle", "on_window", "on_no_progress", "after_feedback"):
            if getattr(self, name) not in _RESPONSES:
                _bad(name, getattr(self, name), f"one of {', '.join(_RESPONSES)}")
        if not isinstance(self.exempt_tools, frozenset) or not all(
            isinstance(t, str) for t in self.exempt_tools
        ):
            _bad("exempt_tools", self.exempt_tools, "a frozenset of tool names")
        if not _whole(self.history, 2):
            _bad("history", self.history, "an integer >= 2")
        needs = {
            "repeat": self.repeat or 0,
            "window_size": self.window_size if self.window or self.no_progress else 0,
            "cycle_period * cycle_repeats": (self.cycle_period or 0) * self.cycle_repeats,
        }
        for name, need in needs.items():
            if need > self.history:
                _bad("history", self.history, f"at least {name} ({need})")

    def response(self, pattern: Pattern) -> Response:
        """The configured response for ``pattern`` (before the feedback ladder)."""
        responses: dict[Pattern, Response] = {
            "repeat": self.on_repeat,
            "cycle": self.on_cycle,
            "window": self.on_window,
            "no_progress": self.on_no_progress,
        }
        return responses[pattern]


def _whole(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _bad(field: str, value: object, expected: str) -> NoReturn:
    raise ConfigError(f"LoopPolicy.{field} must be {expected}, got {value!r}")


# -- state and events --------------------------------------------------------------------------


class LoopCall(msgspec.Struct, frozen=True, array_like=True):
    """One observed call; ``result_hash`` is ``None`` until its result is observed."""

    tool: str
    args_hash: str
    result_hash: str | None = None
    slot: str = ""  # where the call was made (actor, message, effect index): replays skip it


class LoopState(msgspec.Struct, frozen=True, kw_only=True):
    """A detector's state: the fold of its events.

    Attributes:
        history: the last ``policy.history`` calls, oldest first.
        calls: calls observed since the last reset (numbers the calls for the ladder).
        feedbacks: the call numbers at which a ``feedback`` was answered, within ``history``.
        reset_at: when the history was last cleared (calls before it never count again).
    """

    history: tuple[LoopCall, ...] = ()
    calls: int = 0
    feedbacks: tuple[int, ...] = ()
    reset_at: float = 0.0


class LoopCallObserved(Event):
    """The agent is about to call ``tool`` with arguments hashing to ``args_hash``."""

    at: float
    tool: str
    args_hash: str
    slot: str = ""


class LoopResultObserved(Event):
    """A call's result: fills the oldest call with this signature still waiting for one."""

    at: float
    tool: str
    args_hash: str
    result_hash: str


class LoopFlagged(Event):
    """A pattern was detected and answered with ``response`` (audit, and the feedback ladder)."""

    at: float
    pattern: str
    response: str
    tool: str
    detail: str


class LoopReset(Event):
    """The history was cleared (after a context reset, or a human's go-ahead)."""

    at: float
    reason: str


LoopEvent: TypeAlias = LoopCallObserved | LoopResultObserved | LoopFlagged | LoopReset


class Detection(msgspec.Struct, frozen=True, kw_only=True):
    """A detected loop.

    Attributes:
        pattern: which rule fired.
        response: what the wrapper should do (after the feedback ladder).
        detail: a sentence for the model or a human saying what repeated how often.
        tool: the tool of the call that completed the pattern.
        count: how often it repeated (calls, cycles or identical results).
    """

    pattern: Pattern
    response: Response
    detail: str
    tool: str
    count: int


# -- the detector ------------------------------------------------------------------------------


class LoopDetector:
    """A loop detector's decisions over its current state.

    As with :class:`~tether.actors.guards.breaker.BreakerCore`, ``state`` is the fold of every
    event the detector returned: the decisions apply their events before returning them.
    """

    __slots__ = ("policy", "state")

    def __init__(self, policy: LoopPolicy | None = None, state: LoopState | None = None):
        self.policy = policy if policy is not None else LoopPolicy()
        self.state = state if state is not None else LoopState()

    @classmethod
    def fold(
        cls, policy: LoopPolicy, events: Iterable[LoopEvent], state: LoopState | None = None
    ) -> LoopDetector:
        """A detector whose state is ``events`` folded over ``state``."""
        detector = cls(policy, state)
        for event in events:
            detector.state = detector.apply(detector.state, event)
        return detector

    # -- the fold ------------------------------------------------------------------------------

    def apply(self, state: LoopState, event: LoopEvent) -> LoopState:
        """The state after ``event``. Pure: reads only the policy's history bound."""
        keep = self.policy.history
        if isinstance(event, LoopCallObserved):  # once per call: kept cheap
            history = state.history
            if len(history) >= keep:
                history = history[len(history) - keep + 1 :]
            calls = state.calls + 1
            feedbacks = state.feedbacks
            if feedbacks:
                feedbacks = tuple(n for n in feedbacks if n > calls - keep)
            return LoopState(
                history=(*history, LoopCall(event.tool, event.args_hash, None, event.slot)),
                calls=calls,
                feedbacks=feedbacks,
                reset_at=state.reset_at,
            )
        if isinstance(event, LoopResultObserved):
            for i, call in enumerate(state.history):
                if (
                    call.args_hash == event.args_hash
                    and call.result_hash is None
                    and call.tool == event.tool
                ):
                    filled = LoopCall(call.tool, call.args_hash, event.result_hash, call.slot)
                    history = (*state.history[:i], filled, *state.history[i + 1 :])
                    return msgspec.structs.replace(state, history=history)
            return state  # its call left the history (or was reset away): nothing to fill
        if isinstance(event, LoopFlagged):
            if event.response != "feedback":
                return state
            return msgspec.structs.replace(state, feedbacks=(*state.feedbacks, state.calls))
        if isinstance(event, LoopReset):
            return LoopState(reset_at=event.at)
        assert_never(event)

    # -- decisions -----------------------------------------------------------------------------

    def observe_call(
        self, tool: str, args_hash: str, *, now: float, slot: str = ""
    ) -> tuple[Detection | None, list[LoopEvent]]:
        """Observe a call before it runs; returns a detection (or ``None``) and the events.

        ``slot`` names where the call was made; a call whose slot is already in the history is
        a replay of the same step (after a wait or a crash), not a new call: nothing happens.
        """
        if slot and any(c.slot == slot for c in self.state.history):
            return None, []
        events: list[LoopEvent] = [
            LoopCallObserved(at=now, tool=tool, args_hash=args_hash, slot=slot)
        ]
        self._emit(events)
        detection = self._answer(self._check_call(self.state.history), events, now)
        return detection, events

    def observe_result(
        self, tool: str, args_hash: str, result_hash: str, *, now: float
    ) -> tuple[Detection | None, list[LoopEvent]]:
        """Observe a call's result (for ``no_progress``); returns a detection and the events."""
        events: list[LoopEvent] = [
            LoopResultObserved(at=now, tool=tool, args_hash=args_hash, result_hash=result_hash)
        ]
        before = self.state
        self._emit(events)
        if self.state is before:  # no call waited for this result
            return None, events
        detection = self._answer(self._check_result(tool, args_hash, result_hash), events, now)
        return detection, events

    def reset(self, *, now: float, reason: str) -> list[LoopEvent]:
        """Clear the history (the agent's context was reset, or a human said to go on)."""
        events: list[LoopEvent] = [LoopReset(at=now, reason=reason)]
        self._emit(events)
        return events

    # -- internals -----------------------------------------------------------------------------

    def _emit(self, events: list[LoopEvent]) -> None:
        for event in events:
            self.state = self.apply(self.state, event)

    def _answer(
        self, found: _Found | None, events: list[LoopEvent], now: float
    ) -> Detection | None:
        """Turn a finding into a detection (ladder applied) and append its events."""
        if found is None:
            return None
        pattern, tool, count, detail = found
        response = self.policy.response(pattern)
        limit = self.policy.max_feedback
        if response == "feedback" and limit is not None and len(self.state.feedbacks) >= limit:
            response = self.policy.after_feedback
            detail += f" The loop went on after {len(self.state.feedbacks)} warnings."
        more: list[LoopEvent] = [
            LoopFlagged(at=now, pattern=pattern, response=response, tool=tool, detail=detail)
        ]
        if response == "reset":
            more.append(LoopReset(at=now, reason=detail))
        self._emit(more)
        events.extend(more)
        return Detection(pattern=pattern, response=response, detail=detail, tool=tool, count=count)

    def _check_call(self, seq: tuple[LoopCall, ...]) -> _Found | None:
        policy = self.policy
        last = seq[-1]
        sig = (last.tool, last.args_hash)
        exempt = last.tool in policy.exempt_tools

        if policy.repeat is not None and not exempt:
            run = 0
            for call in reversed(seq):
                if call.args_hash != last.args_hash or call.tool != last.tool:
                    break
                run += 1
            if run >= policy.repeat:
                return (
                    "repeat",
                    last.tool,
                    run,
                    f"{last.tool} was called {run} times in a row with the same arguments.",
                )

        if policy.cycle_period is not None:
            found = self._check_cycle(seq, policy.cycle_period, policy.cycle_repeats)
            if found is not None:
                return found

        if policy.window is not None and not exempt:
            recent = seq[-policy.window_size :]
            tool, args_hash = sig
            # args_hash first: it almost never matches, so most calls cost one compare each
            same = [c for c in recent if c.args_hash == args_hash and c.tool == tool]
            distinct = {c.result_hash for c in same if c.result_hash is not None}
            count = len(same) - max(0, len(distinct) - 1)
            if count >= policy.window:
                return (
                    "window",
                    last.tool,
                    len(same),
                    f"{last.tool} was called {len(same)} times with the same arguments in the "
                    f"last {len(recent)} calls, returning {_results(len(distinct))}.",
                )
        return None

    def _check_cycle(self, seq: tuple[LoopCall, ...], longest: int, repeats: int) -> _Found | None:
        last = seq[-1]
        # A cycle ending here repeats the last call within the last `longest` calls before it.
        if not any(
            c.args_hash == last.args_hash and c.tool == last.tool for c in seq[-longest - 1 : -1]
        ):
            return None
        sigs = [(c.tool, c.args_hash) for c in seq]
        for period in range(2, longest + 1):
            span = period * repeats
            if len(sigs) < span:
                break
            block = sigs[-period:]
            if len(set(block)) == 1 or sigs[-span:] != block * repeats:
                continue  # one call repeated is `repeat`'s business
            if all(tool in self.policy.exempt_tools for tool, _ in block):
                continue
            cycles = repeats
            while len(sigs) >= (cycles + 1) * period and sigs[-(cycles + 1) * period :] == block * (
                cycles + 1
            ):
                cycles += 1
            names = " → ".join(tool for tool, _ in block)
            return (
                "cycle",
                seq[-1].tool,
                cycles,
                f"The sequence {names} repeated {cycles} times with the same arguments.",
            )
        return None

    def _check_result(self, tool: str, args_hash: str, result_hash: str) -> _Found | None:
        policy = self.policy
        if policy.no_progress is None or tool in policy.exempt_tools:
            return None
        results = [
            c.result_hash
            for c in self.state.history[-policy.window_size :]
            if c.args_hash == args_hash and c.tool == tool and c.result_hash is not None
        ]
        run = 0
        for result in reversed(results):
            if result != result_hash:
                break
            run += 1
        if run < policy.no_progress:
            return None
        return (
            "no_progress",
            tool,
            run,
            f"{tool} returned the same result {run} times in a row for the same arguments.",
        )


_Found: TypeAlias = tuple[Pattern, str, int, str]  # pattern, tool, count, detail


def _results(distinct: int) -> str:
    if distinct == 0:
        return "no results yet"
    if distinct == 1:
        return "the same result each time"
    return f"only {distinct} different results"
