"""Deterministic context bundles: typed fragments assembled into lanes under a token budget.

An agent's prompt context is built from typed fragments, not from one undifferentiated list of
messages, so that assembly can decide what to keep::

    Goal            the session's objective                  pinned: never trimmed
    Constraint      a guardrail set by a human or supervisor pinned: never trimmed
    Checkpoint      the note written at the last save point  pinned: never trimmed
    Summary         a compressed account of earlier work     never trimmed
    ChatMessage     a recent turn of the conversation        trimmed first, oldest first
    ToolCallRecord  a tool call and its result or error      trimmed second, oldest first

:func:`assemble` puts every fragment in its lane and, while the total is over the budget,
trims in this fixed order: the oldest message, until none is left; then the oldest tool
result, until none is left. The summary is never trimmed: it stands for everything that
happened before the recent messages, which were dropped because it covers them, so a bundle
without it would silently lose the thread. If the pinned fragments alone exceed the budget,
or the summary does not fit in what they leave, it raises :class:`tether.errors.ConfigError`
naming the lane, rather than silently dropping a directive or the thread.

There is no ML and no hidden state: the same fragments in the same order with the same budget
and counter always give an equal :class:`ContextBundle`, so the exact context a model saw can
be rebuilt later. Fragments and bundles are msgspec Structs, so both can be journaled.

The order of the input matters only within the conversation: messages and tool calls are taken
to be chronological. A session has at most one goal; when several checkpoints or summaries are
given, the last of each wins (each new one supersedes the one before).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from tether.errors import ConfigError

__all__ = (
    "Goal",
    "Constraint",
    "Checkpoint",
    "Summary",
    "ChatMessage",
    "ToolCallRecord",
    "Fragment",
    "Trimmed",
    "ContextBundle",
    "TokenCounter",
    "default_counter",
    "FRAGMENT_OVERHEAD",
    "fragment_text",
    "modified_note",
    "assemble",
)


# -- fragments ------------------------------------------------------------------------------


class Goal(msgspec.Struct, frozen=True, tag=True):
    """The concrete objective of this session. Pinned."""

    text: str


class Constraint(msgspec.Struct, frozen=True, tag=True):
    """A guardrail that must stay in force for the whole session. Pinned."""

    text: str


class Checkpoint(msgspec.Struct, frozen=True, tag=True):
    """The note written at the last save point: where to resume from. Pinned."""

    text: str


class Summary(msgspec.Struct, frozen=True, tag=True):
    """A compressed account of what happened before the recent messages. Never trimmed: one
    that does not fit the budget is refused by name."""

    text: str


class ChatMessage(msgspec.Struct, frozen=True, tag=True):
    """One turn of the conversation (``role`` is e.g. ``"user"`` or ``"assistant"``)."""

    role: str
    text: str


class ToolCallRecord(msgspec.Struct, frozen=True, tag=True):
    """A tool call with its JSON-encodable ``args`` and its ``result`` or ``error``.

    ``call_id`` is the provider's id for the call (empty when the model gave none), so an
    adapter sends the result back under the id the provider issued. ``turn`` numbers the model
    answer that asked for the call (the session's decision count; 0 in records made before it
    was kept): the calls of one answer share it, and an adapter sends them back as one
    assistant message with several tool calls. Neither is part of the rendered text.

    ``args`` are the arguments the call ran with. When a person modified the call on approving
    it, ``asked`` holds the ones the model asked for: the call goes back to the model as it
    asked for it, and its outcome says plainly that a person changed it, and to what
    (``modified_note``). Unset otherwise, and then not encoded at all: a model call's recorded
    input (its context, these records included) encodes and hashes (I5) as it did before the
    field existed, so a step recorded then replays as recorded.
    """

    tool: str
    args: dict[str, Any] = {}
    result: str | None = None
    error: str | None = None
    call_id: str = ""
    turn: int = 0
    asked: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET

    @property
    def asked_args(self) -> dict[str, Any]:
        """The arguments the model asked for: ``asked`` if a person modified the call, else
        ``args``."""
        return self.args if isinstance(self.asked, msgspec.UnsetType) else self.asked


def modified_note(record: ToolCallRecord) -> str:
    """What the model is told of a call a person modified before it ran ("" for one that ran
    as it asked): the arguments it ran with."""
    if isinstance(record.asked, msgspec.UnsetType):
        return ""
    ran = msgspec.json.encode(record.args, order="sorted").decode()
    return f"A person modified this call before it ran: it ran with {ran}."


Fragment = Goal | Constraint | Checkpoint | Summary | ChatMessage | ToolCallRecord
"""Any typed context fragment; a tagged union, so a ``list[Fragment]`` encodes and decodes."""

_FRAGMENT_TYPES = (Goal, Constraint, Checkpoint, Summary, ChatMessage, ToolCallRecord)


# The texts of tool calls, by the record: a session's history is the same records from one
# model call to the next (its state carries them over), and each call counts and renders every
# one of them. Keyed by id, with the record itself kept beside its text, so an id reused by a
# newer object never hits; cleared whole past its bound. Records are frozen: their text never
# changes (their ``args`` and ``result`` are values read from the journal, not mutated).
_CALL_TEXTS: dict[int, tuple[ToolCallRecord, str]] = {}
_CALL_TEXTS_MAX = 1 << 16


def fragment_text(fragment: Fragment) -> str:
    """The text a fragment contributes to the rendered context: exactly what is counted."""
    kind = type(fragment)
    if kind is ChatMessage:  # most of a history: its text as it is
        return fragment.text  # type: ignore[union-attr]
    if kind is ToolCallRecord:
        hit = _CALL_TEXTS.get(id(fragment))
        if hit is not None and hit[0] is fragment:
            return hit[1]
        text = _call_text(fragment)  # type: ignore[arg-type]
        if len(_CALL_TEXTS) >= _CALL_TEXTS_MAX:
            _CALL_TEXTS.clear()
        _CALL_TEXTS[id(fragment)] = (fragment, text)  # type: ignore[assignment]
        return text
    match fragment:
        case Goal(text=text):
            return f"Goal: {text}"
        case Constraint(text=text):
            return f"Constraint: {text}"
        case Checkpoint(text=text):
            return f"Checkpoint: {text}"
        case Summary(text=text):
            return f"Summary of earlier work: {text}"
        case ChatMessage(text=text):
            return text
        case ToolCallRecord():
            return _call_text(fragment)
    raise ConfigError(f"not a context fragment: {fragment!r}")  # pragma: no cover


def _call_text(record: ToolCallRecord) -> str:
    call = f"{record.tool}({msgspec.json.encode(record.asked_args, order='sorted').decode()})"
    note = modified_note(record)
    if note:  # the call as the model asked for it, then what a person made of it
        call = f"{call} ({note.removesuffix('.')})"
    if record.error is not None:
        return f"{call} failed: {record.error}"
    return f"{call} returned: {'(nothing)' if record.result is None else record.result}"


# -- token counting -------------------------------------------------------------------------


class TokenCounter(Protocol):
    """Counts the tokens of one fragment's text (see :func:`fragment_text`); called once per
    fragment, so a counter may add a per-fragment overhead. Must return an int >= 0."""

    def __call__(self, text: str, /) -> int: ...


FRAGMENT_OVERHEAD = 4
"""Tokens :func:`default_counter` adds per fragment, for the role and separators around it."""


def default_counter(text: str, /) -> int:
    """A model-free estimate: one token per 4 characters, rounded up, plus
    :data:`FRAGMENT_OVERHEAD`. Pass a real tokenizer's counter for exact budgets."""
    return FRAGMENT_OVERHEAD + (len(text) + 3) // 4


# -- the bundle -----------------------------------------------------------------------------


class Trimmed(msgspec.Struct, frozen=True):
    """How many fragments of each trimmable lane were left out to fit the budget."""

    messages: int = 0
    tool_results: int = 0
    # Always 0: the summary is never trimmed. Kept because a session's model requests carry
    # their bundle, and the recorded request of a step that replays after an upgrade must
    # encode (and hash, I5) as it did when it was recorded.
    summary: int = 0

    @property
    def total(self) -> int:
        return self.messages + self.tool_results + self.summary


class ContextBundle(msgspec.Struct, frozen=True):
    """What a model sees before one call, lane by lane.

    ``history`` holds the kept messages and tool calls in their original (chronological)
    order; ``messages`` and ``tool_results`` are its two lanes. ``tokens_used`` is the sum of
    the counter over every kept fragment and never exceeds ``budget``.
    """

    goal: Goal | None
    constraints: tuple[Constraint, ...]
    checkpoint: Checkpoint | None
    summary: Summary | None
    history: tuple[ChatMessage | ToolCallRecord, ...]
    tokens_used: int
    budget: int
    trimmed: Trimmed

    @property
    def messages(self) -> tuple[ChatMessage, ...]:
        """The kept conversation messages, oldest first."""
        return tuple(f for f in self.history if isinstance(f, ChatMessage))

    @property
    def tool_results(self) -> tuple[ToolCallRecord, ...]:
        """The kept tool calls, oldest first."""
        return tuple(f for f in self.history if isinstance(f, ToolCallRecord))

    def render(self, *, tool_role: str = "tool") -> list[dict[str, str]]:
        """The bundle as ``{"role", "content"}`` dicts for a chat model.

        One ``system`` message carries the goal, the constraints, the summary and the
        checkpoint (one line each, in that order); then the history follows in order, a tool
        call as a message with role ``tool_role``. Provider adapters map these further.
        """
        head: list[Fragment] = []
        if self.goal is not None:
            head.append(self.goal)
        head.extend(self.constraints)
        if self.summary is not None:
            head.append(self.summary)
        if self.checkpoint is not None:
            head.append(self.checkpoint)
        out: list[dict[str, str]] = []
        if head:
            out.append({"role": "system", "content": "\n".join(map(fragment_text, head))})
        for item in self.history:
            role = item.role if isinstance(item, ChatMessage) else tool_role
            out.append({"role": role, "content": fragment_text(item)})
        return out


# -- assembly -------------------------------------------------------------------------------


def assemble(
    fragments: Iterable[Fragment],
    *,
    budget: int,
    count_tokens: TokenCounter = default_counter,
) -> ContextBundle:
    """Assemble ``fragments`` into a :class:`ContextBundle` of at most ``budget`` tokens.

    Goal, constraints, checkpoint and summary are never trimmed. While over budget the oldest
    message is dropped; when no message is left, the oldest tool result.
    Raises :class:`ConfigError` if the pinned fragments alone exceed ``budget``, if the summary
    does not fit in what they leave, if ``budget`` is negative, if more than one :class:`Goal`
    is given, if an item is not a fragment, or if ``count_tokens`` returns something other
    than an int >= 0.
    """
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ConfigError(f"the token budget must be an int >= 0, not {budget!r}")
    lanes = _Lanes.of(fragments)  # every item checked before anything is counted
    cost = _checked(count_tokens)
    pinned_tokens = _pinned_tokens(lanes, cost, budget)
    summary_tokens = _summary_tokens(lanes.summary, cost, budget, pinned_tokens)
    history_costs = [cost(item) for item in lanes.history]
    total = pinned_tokens + summary_tokens + sum(history_costs)
    history, total, trimmed = _trim(lanes.history, history_costs, total, budget)
    return ContextBundle(
        goal=lanes.goal,
        constraints=tuple(lanes.constraints),
        checkpoint=lanes.checkpoint,
        summary=lanes.summary,
        history=history,
        tokens_used=total,
        budget=budget,
        trimmed=trimmed,
    )


@dataclass(slots=True)
class _Lanes:
    """The fragments of one assembly, each in its lane (the history in its given order)."""

    goal: Goal | None = None
    constraints: list[Constraint] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    summary: Summary | None = None
    history: list[ChatMessage | ToolCallRecord] = field(default_factory=list)

    @classmethod
    def of(cls, fragments: Iterable[Fragment]) -> _Lanes:
        """Each fragment in its lane; ``ConfigError`` for an item that is not a fragment or a
        second goal."""
        lanes = cls()
        history = lanes.history
        for fragment in fragments:
            kind = type(fragment)
            if kind is ChatMessage or kind is ToolCallRecord:  # most of them: one test each
                history.append(fragment)  # type: ignore[arg-type]
                continue
            if not isinstance(fragment, _FRAGMENT_TYPES):
                raise ConfigError(
                    f"not a context fragment: {fragment!r} (expected one of "
                    f"{', '.join(t.__name__ for t in _FRAGMENT_TYPES)})"
                )
            if isinstance(fragment, Goal):
                if lanes.goal is not None:
                    raise ConfigError(
                        f"more than one Goal given ({lanes.goal.text!r} and {fragment.text!r}); "
                        "a session has one goal: pass only the current one"
                    )
                lanes.goal = fragment
            elif isinstance(fragment, Constraint):
                lanes.constraints.append(fragment)
            elif isinstance(fragment, Checkpoint):
                lanes.checkpoint = fragment  # the last save point wins
            elif isinstance(fragment, Summary):
                lanes.summary = fragment  # the newest summary supersedes older ones
            else:
                lanes.history.append(fragment)
        return lanes


def _checked(count_tokens: TokenCounter) -> Callable[[Fragment], int]:
    """The cost of a fragment under ``count_tokens``, refused unless an int >= 0."""

    def cost(fragment: Fragment) -> int:
        n = count_tokens(fragment_text(fragment))
        if type(n) is int and n >= 0:  # the usual answer, checked cheaply
            return n
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"token counter returned {n!r} for {fragment!r}; need an int >= 0")
        return n

    return cost


def _pinned_tokens(lanes: _Lanes, cost: Callable[[Fragment], int], budget: int) -> int:
    """What the goal, the constraints and the checkpoint cost; ``ConfigError`` past ``budget``."""
    pinned: list[Fragment] = []
    if lanes.goal is not None:
        pinned.append(lanes.goal)
    pinned.extend(lanes.constraints)
    if lanes.checkpoint is not None:
        pinned.append(lanes.checkpoint)
    pinned_tokens = sum(map(cost, pinned))
    if pinned_tokens > budget:
        raise ConfigError(
            f"the pinned fragments (goal, constraints, checkpoint) need {pinned_tokens} tokens, "
            f"{pinned_tokens - budget} over the budget of {budget}; they are never trimmed, "
            "so raise the budget or shorten them"
        )
    return pinned_tokens


def _summary_tokens(
    summary: Summary | None, cost: Callable[[Fragment], int], budget: int, pinned_tokens: int
) -> int:
    """What the summary costs; ``ConfigError`` if it does not fit beside the pinned lanes."""
    summary_tokens = cost(summary) if summary is not None else 0
    if pinned_tokens + summary_tokens > budget:
        left = budget - pinned_tokens
        raise ConfigError(
            f"the thread summary needs {summary_tokens} tokens, {summary_tokens - left} over "
            f"the {left} the budget of {budget} leaves after the goal, constraints and "
            "checkpoint; it is never trimmed (the history it stands for is gone), so raise "
            "the budget or write a shorter summary"
        )
    return summary_tokens


def _trim(
    history: list[ChatMessage | ToolCallRecord], costs: list[int], total: int, budget: int
) -> tuple[tuple[ChatMessage | ToolCallRecord, ...], int, Trimmed]:
    """The history kept under ``budget`` in the fixed trim order (oldest message, then oldest
    tool result), the total it leaves, and what was trimmed."""
    dropped: set[int] = set()
    trimmed_messages = trimmed_tools = 0
    for lane in (ChatMessage, ToolCallRecord):
        for i, item in enumerate(history):
            if total <= budget:
                break
            if isinstance(item, lane):
                dropped.add(i)
                total -= costs[i]
                if lane is ChatMessage:
                    trimmed_messages += 1
                else:
                    trimmed_tools += 1
    kept = tuple(item for i, item in enumerate(history) if i not in dropped)
    return kept, total, Trimmed(messages=trimmed_messages, tool_results=trimmed_tools)
