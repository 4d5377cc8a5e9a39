"""What an agent session accepts, journals and answers: its messages (``UserMessage``,
``CancelTask``, ...), its events (``SessionEvent``), its state, and the ``TaskResult`` and
``SessionInfo`` it gives back. ``AgentSession`` itself is in ``session.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from tether.actors.context import (
    ChatMessage,
    ToolCallRecord,
)
from tether.actors.messages import Event, FallibleReply, Message
from tether.actors.model import (
    Decision,
    FinalAnswer,
    ToolCall,
    ToolCalls,
    Usage,
    calls_of,
)
from tether.actors.status import SessionStatus, TaskStatus, task_status
from tether.errors import (
    TaskFailed,
)

# -- what a session accepts ---------------------------------------------------------------------


class UserMessage(Message, kw_only=False):
    """A person's message: starts a task, or joins the running one. ``ask`` it to get the
    task's ``TaskResult`` (or ``tether.TaskFailed`` if the task did not finish)."""

    text: str


class CancelTask(Message):
    """End the running task; whoever asked for it gets ``tether.TaskFailed`` with the reason.

    It is delivered after the step under way, and it interrupts the tool call that step waits
    on (the call's outcome goes to the tool's recovery policy: ``docs/recovery.md``)."""

    interrupts: ClassVar[bool] = True

    reason: str = "cancelled by the user"


class Continue(Message):
    """The next step of task ``task`` (sent by the session to itself)."""

    task: int


class GetSessionInfo(Message):
    """Ask for a ``SessionInfo``: the session's status, belief and frontier."""


# Where a task stands (``TaskStatus``) and a session (``SessionStatus``): tether/actors/status.py
# defines and documents the words, as ``tether sessions`` and ``tether tree`` use them.


class TaskCall(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call a task made, as its ``TaskResult`` reports it: ``args``, the arguments it
    ran with; ``asked``, those the model asked for when a person modified the call on
    approving it (None: it ran as asked)."""

    tool: str
    args: dict[str, Any]
    result: str | None = None  # what the model was shown (JSON for structured results)
    error: str | None = None
    # The call's idempotency key in the effects ledger (``tether show``, ``tether quarantine``);
    # None when nothing was recorded: invalid arguments, a detected loop, an open breaker that
    # refused the call's first attempt.
    effect_key: str | None = None
    asked: dict[str, Any] | None = None


class TaskResult(FallibleReply, frozen=True, kw_only=True, tag=True):
    """What ``await session.ask(tether.UserMessage(...))`` returns for a finished task. A task
    that was stopped, cancelled or failed raises ``tether.TaskFailed`` instead, carrying this
    (its ``result``): the session's last word, the reason, the calls made until then."""

    session_id: str
    task: int
    status: TaskStatus  # not "working": the task has ended
    outcome: str  # "finished", or the status and why: "stopped: step limit (50) reached"
    answer: str
    calls: tuple[TaskCall, ...] = ()

    def failure(self) -> TaskFailed | None:
        return None if self.status == "finished" else TaskFailed(self)


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    session_id: str
    goal: str
    status: SessionStatus  # "idle" (no task yet), or the latest task's TaskStatus
    task: int
    task_text: str
    steps: int
    belief: str
    frontier: str
    last_answer: str
    outcome: str
    usage: Usage = msgspec.field(default_factory=Usage)  # the model's tokens, all tasks


# -- what a session journals --------------------------------------------------------------------


class TaskStarted(Event):
    task: int
    text: str
    reply_to: str


class UserSaid(Event):
    text: str
    reply_to: str


class Heard(Event):
    """The user messages that joined the task during a step enter the history, once that step
    has ended (so a replay of the step sees the context its recorded decision was made on)."""


class StepBegun(Event):
    """Journaled before each step: what the session believes and what it is about to do."""

    task: int
    step: int
    belief: str
    frontier: str


class ModelDecided(Event):
    decision: Decision


class ToolResult(Event):
    record: ToolCallRecord
    invalid: bool = False  # the call's arguments did not fit the tool's schema
    key: str | None = None  # the effect's idempotency key, if the call was recorded


class ContextReset(Event):
    summary: str


class TaskEnded(Event):
    task: int
    outcome: str  # "finished" | "cancelled: <why>" | "stopped: <why>" | "failed: <why>"
    answer: str


SessionEvent = (
    TaskStarted
    | UserSaid
    | Heard
    | StepBegun
    | ModelDecided
    | ToolResult
    | ContextReset
    | TaskEnded
)


class SessionState(msgspec.Struct, frozen=True, kw_only=True):
    status: str = "idle"
    task: int = 0
    task_text: str = ""
    reply_to: tuple[str, ...] = ()
    steps: int = 0
    decisions: int = 0
    history: tuple[ChatMessage | ToolCallRecord, ...] = ()  # at most max_history, oldest first
    # Entries the bound (AgentSession.max_history) dropped from the front of history, ever; a
    # ContextReset's clearing is not counted (the summary accounts for it). Defaulted, so a
    # snapshot stored before the bound existed still decodes.
    history_dropped: int = 0
    heard: tuple[ChatMessage, ...] = ()  # joined the task during the current step
    summary: str = ""
    belief: str = ""
    frontier: str = ""
    # Model answers in a row with an invalid tool call. Several invalid calls of one answer
    # count once: the model has had no feedback between them, so no chance to correct.
    corrections: int = 0
    invalid_turn: int = 0  # the answer (turn) of the last invalid call; defaulted for old snapshots
    # The current task's tool calls and the tools they used (first use first): counted, not
    # read off the history, which the bound and a context reset trim. Defaulted, so an older
    # snapshot still decodes (a task under way then counts from there).
    task_calls: int = 0
    task_tools: tuple[str, ...] = ()
    # The current task's calls as its TaskResult reports them (at most one per step, so at
    # most max_steps). Defaulted: an older snapshot's running task reports the calls from here.
    calls: tuple[TaskCall, ...] = ()
    last_answer: str = ""
    outcome: str = ""
    # What the model's answers used, summed over every decision (their Usage, where the model
    # reported one). Defaulted, so an older snapshot still decodes (counting from there).
    usage: Usage = msgspec.field(default_factory=Usage)


def session_status(state: SessionState) -> SessionStatus:
    """``SessionInfo.status``: "working", the latest task's ending, or "idle" before any."""
    if state.status == "working":
        return "working"
    return task_status(state.outcome) if state.task else "idle"


# -- the fold --------------------------------------------------------------------------------------


def fold_event(state: SessionState, event: SessionEvent, max_history: int) -> SessionState:
    """``AgentSession.apply``: ``event`` folded into ``state``, its history bounded to the newest
    ``max_history`` entries."""
    rep = msgspec.structs.replace
    match event:
        case TaskStarted(task=task, text=text, reply_to=reply_to):
            return rep(
                state,
                status="working",
                task=task,
                task_text=text,
                reply_to=(reply_to,) if reply_to else (),
                steps=0,
                corrections=0,
                task_calls=0,
                task_tools=(),
                calls=(),
                outcome="",
                **_keep(state, max_history, ChatMessage(role="user", text=text)),
            )
        case UserSaid(text=text, reply_to=reply_to):
            return rep(
                state,
                reply_to=(*state.reply_to, reply_to) if reply_to else state.reply_to,
                heard=(*state.heard, ChatMessage(role="user", text=text)),
            )
        case Heard():
            return rep(state, **_keep(state, max_history, *state.heard), heard=())
        case StepBegun(step=step, belief=belief, frontier=frontier):
            return rep(state, steps=step, belief=belief, frontier=frontier)
        case ModelDecided(decision=ToolCall() | ToolCalls() as decided):
            # Only what the model said enters the history: a provider adapter sends it
            # back as the text of the assistant message that carries the tool calls, so
            # invented text ("I will call ...") would be put in the model's mouth.
            said = ChatMessage(role="assistant", text=decided.thought)
            calls = "; ".join(f"{c.tool} {as_json(c.args)}" for c in calls_of(decided))
            return rep(
                state,
                decisions=state.decisions + 1,
                belief=decided.thought or state.belief,
                frontier=f"call {calls}",
                usage=_used(state, decided),
                **(_keep(state, max_history, said) if decided.thought else {}),
            )
        case ModelDecided(decision=FinalAnswer() as answer):
            return rep(
                state,
                decisions=state.decisions + 1,
                belief=answer.thought or state.belief,
                frontier="answer the user",
                usage=_used(state, answer),
            )
        case ToolResult(record=record, invalid=invalid, key=key):
            tools = state.task_tools
            made = TaskCall(
                tool=record.tool,
                args=record.args,
                result=record.result,
                error=record.error,
                effect_key=key,
                asked=None if isinstance(record.asked, msgspec.UnsetType) else record.asked,
            )
            return rep(
                state,
                corrections=_corrections(state, record, invalid),
                invalid_turn=record.turn if invalid else state.invalid_turn,
                task_calls=state.task_calls + 1,
                task_tools=tools if record.tool in tools else (*tools, record.tool),
                calls=(*state.calls, made),
                **_keep(state, max_history, record),
            )
        case ContextReset(summary=summary):
            return rep(state, summary=summary, history=())
        case TaskEnded(outcome=outcome, answer=answer):
            return rep(
                state,
                status="idle",
                reply_to=(),
                last_answer=answer,
                outcome=outcome,
                frontier="",
                **_keep(
                    state, max_history, *state.heard, ChatMessage(role="assistant", text=answer)
                ),
                heard=(),
            )
    return state


def _keep(
    state: SessionState, max_history: int, *new: ChatMessage | ToolCallRecord
) -> dict[str, Any]:
    """The ``history`` and ``history_dropped`` fields after appending ``new``: the newest
    ``max_history`` entries are kept and the rest counted. Part of the fold, so a replay or
    a recovery (from a snapshot or not) drops exactly what the live run dropped; a state
    folded under a larger bound is cut down at its next append."""
    history = (*state.history, *new)
    over = len(history) - max_history
    if over <= 0:
        return {"history": history, "history_dropped": state.history_dropped}
    return {"history": history[over:], "history_dropped": state.history_dropped + over}


def _corrections(state: SessionState, record: ToolCallRecord, invalid: bool) -> int:
    """``SessionState.corrections`` after ``record``: 0 after a valid call; one more after an
    invalid one, unless an earlier call of the same answer was invalid already."""
    if not invalid:
        return 0
    if record.turn and record.turn == state.invalid_turn:
        return state.corrections
    return state.corrections + 1


def _used(state: SessionState, decision: Decision) -> Usage:
    """The session's token total with ``decision``'s usage added, if the model reported one."""
    return state.usage if decision.usage is None else state.usage + decision.usage


def as_json(value: Any) -> str:
    return msgspec.json.encode(value, order="sorted").decode()
