"""``AgentSession``: an agent as a durable actor, one step per message.

A session runs "decide → guard → act → record" one step at a time. Each step is one message
(an internal ``Continue``), so each step commits on its own (I2), other messages interleave
(a ``CancelTask``, a user's interjection, the wake-up after an approval), and a crash resumes
at the frontier: the step that was running is delivered again and replays its recorded model
decision and tool calls from the ledger (I4, I6).

One step:

1. the belief and the frontier are journaled (``StepBegun``);
2. the context bundle is assembled from the session's typed fragments within its token budget
   (``tether.actors.context``), and the model is asked — through the ledger — what to do;
3. a tool call goes through the guards (loop detector, breaker, gate) and the ledger;
4. its outcome is journaled for the next step's context, and the next step is queued. A final
   answer ends the task and answers whoever asked.

The error taxonomy (``docs/recovery.md``) is wired in: invalid arguments go back to the model with the
validation error for one correction, then the task is escalated (stopped, with the reason); a
transient failure is retried under the tool's policy; an open breaker tells the model when to
retry; a loop follows the session's ``loop_policy``; a rejected call tells the model why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import msgspec

from tether import telemetry
from tether.actors import genai
from tether.actors.actor import Actor, check_items
from tether.actors.context import (
    ChatMessage,
    Checkpoint,
    Constraint,
    ContextBundle,
    Fragment,
    Goal,
    Summary,
    TokenCounter,
    ToolCallRecord,
    assemble,
    default_counter,
)
from tether.actors.guards.gate import ApprovalPolicy
from tether.actors.guards.loops import LoopPolicy
from tether.actors.messages import DeadLettered, Event, FallibleReply, Message
from tether.actors.model import (
    Decision,
    FinalAnswer,
    Model,
    ModelRequest,
    ToolCall,
    ToolCalls,
    Usage,
    calls_of,
)
from tether.actors.status import SessionStatus, TaskStatus, task_status
from tether.actors.tool import Tool
from tether.errors import (
    ApprovalRejected,
    ConfigError,
    DeterminismViolation,
    EffectAborted,
    EffectInterrupted,
    LoopDetected,
    TaskFailed,
    ToolFailed,
    ToolInputError,
    ToolUnavailable,
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
    """One tool call a task made, as its ``TaskResult`` reports it."""

    tool: str
    args: dict[str, Any]
    result: str | None = None  # what the model was shown (JSON for structured results)
    error: str | None = None
    # The call's idempotency key in the effects ledger (``tether show``, ``tether quarantine``);
    # None when nothing was recorded: invalid arguments, a detected loop, an open breaker.
    effect_key: str | None = None


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


class AgentSession(Actor[SessionState]):
    """Subclass it, declare ``tools`` and ``model``, and spawn it::

        class Refunds(tether.AgentSession):
            tools = [lookup_order, refund]
            model = MyModel()

        session = await rt.spawn(Refunds, "session-7", goal="...", constraints=["..."])
        answer = await session.ask(tether.UserMessage("refund order 42"), timeout=60)

    Spawning an existing session id resumes it; a new id starts clean. Guard policies are
    class attributes too: ``loop_policy``, ``approval_policy``, ``escalate_after_failures``,
    and each tool's own breaker and approval requirement.

    ``max_history`` (default 5000, an int >= 1) bounds the conversation the session keeps: past
    it, the oldest messages and tool calls are dropped as new ones arrive, and the state counts
    them in ``history_dropped``. The context bundle shows the model far fewer: under the
    default token counter at most ``context_budget // 4``, so raise ``max_history`` past that
    if you raise the budget that far.
    """

    initial_state = SessionState()
    is_session: ClassVar[bool] = True  # logs carry session_id; the CLI lists it as a session
    tools: ClassVar[Sequence[Tool]] = ()
    model: ClassVar[Model]
    context_budget: ClassVar[int] = 8000
    count_tokens: ClassVar[TokenCounter] = default_counter
    max_steps: ClassVar[int] = 50
    model_timeout: ClassVar[float] = 120.0
    loop_policy: ClassVar[LoopPolicy | None] = LoopPolicy()
    escalate_after_failures: ClassVar[int | None] = 3
    # Each history entry costs at least FRAGMENT_OVERHEAD (4) tokens under the default counter,
    # so the default context_budget of 8000 shows the model at most 2000 of them; 5000 keeps
    # 2.5 times that. The one visible effect: the budget trims messages before tool results,
    # so an old tool result can sit in the bundle behind thousands of trimmed messages; past
    # the bound it is gone and newer messages take its place. The bound caps memory and
    # snapshot size, and each append's copy at O(max_history) rather than O(session age).
    max_history: ClassVar[int] = 5000
    _model_tool: ClassVar[Tool]
    _tools_by_name: ClassVar[dict[str, Tool]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_items(
            cls.tools,
            Tool,
            f"{cls.__qualname__}.tools",
            "a list or tuple of @tether.tool functions",
            "declare tools with @tether.tool",
        )
        names: dict[str, Tool] = {}
        for t in cls.tools:
            if t.name in names:
                raise ConfigError(f"{cls.__qualname__}.tools has two tools named {t.name!r}")
            names[t.name] = t
        cls._tools_by_name = names
        cls._model_tool = _model_tool(cls)
        limit = cls.max_history
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(
                f"{cls.__qualname__}.max_history must be an int >= 1 (the number of history "
                f"entries a session keeps), not {limit!r}"
            )
        _check_settings(cls)

    def __init__(self, goal: str, constraints: list[str] | None = None) -> None:
        if not isinstance(goal, str) or not goal.strip():
            raise ConfigError("an agent session needs a goal (a non-empty string)")
        self.goal = goal
        self.constraints = list(constraints or [])
        if not hasattr(type(self), "model") or not isinstance(type(self).model, Model):
            raise ConfigError(
                f"{type(self).__qualname__}.model must be a tether.Model "
                "(an object with async decide(request))"
            )

    # -- the fold ------------------------------------------------------------------------------

    def apply(self, state: SessionState, event: SessionEvent) -> SessionState:
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
                    **self._keep(state, ChatMessage(role="user", text=text)),
                )
            case UserSaid(text=text, reply_to=reply_to):
                return rep(
                    state,
                    reply_to=(*state.reply_to, reply_to) if reply_to else state.reply_to,
                    heard=(*state.heard, ChatMessage(role="user", text=text)),
                )
            case Heard():
                return rep(state, **self._keep(state, *state.heard), heard=())
            case StepBegun(step=step, belief=belief, frontier=frontier):
                return rep(state, steps=step, belief=belief, frontier=frontier)
            case ModelDecided(decision=ToolCall() | ToolCalls() as decided):
                # Only what the model said enters the history: a provider adapter sends it
                # back as the text of the assistant message that carries the tool calls, so
                # invented text ("I will call ...") would be put in the model's mouth.
                said = ChatMessage(role="assistant", text=decided.thought)
                calls = "; ".join(f"{c.tool} {_json(c.args)}" for c in calls_of(decided))
                return rep(
                    state,
                    decisions=state.decisions + 1,
                    belief=decided.thought or state.belief,
                    frontier=f"call {calls}",
                    usage=_used(state, decided),
                    **(self._keep(state, said) if decided.thought else {}),
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
                )
                return rep(
                    state,
                    corrections=_corrections(state, record, invalid),
                    invalid_turn=record.turn if invalid else state.invalid_turn,
                    task_calls=state.task_calls + 1,
                    task_tools=tools if record.tool in tools else (*tools, record.tool),
                    calls=(*state.calls, made),
                    **self._keep(state, record),
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
                    **self._keep(state, *state.heard, ChatMessage(role="assistant", text=answer)),
                    heard=(),
                )
        return state

    def _keep(self, state: SessionState, *new: ChatMessage | ToolCallRecord) -> dict[str, Any]:
        """The ``history`` and ``history_dropped`` fields after appending ``new``: the newest
        ``max_history`` entries are kept and the rest counted. Part of the fold, so a replay or
        a recovery (from a snapshot or not) drops exactly what the live run dropped; a state
        folded under a larger bound is cut down at its next append."""
        history = (*state.history, *new)
        over = len(history) - self.max_history
        if over <= 0:
            return {"history": history, "history_dropped": state.history_dropped}
        return {"history": history[over:], "history_dropped": state.history_dropped + over}

    # -- messages ------------------------------------------------------------------------------

    async def handle(
        self, msg: UserMessage | CancelTask | Continue | GetSessionInfo | DeadLettered
    ) -> TaskResult | SessionInfo | str | None:
        match msg:
            case UserMessage(text=text):
                if not text.strip():
                    raise ConfigError("a UserMessage needs text")
                reply_to = self.reply_later()
                if self.state.status == "working":
                    self.persist(UserSaid(text=text, reply_to=reply_to))
                else:
                    task = self.state.task + 1
                    self.persist(TaskStarted(task=task, text=text, reply_to=reply_to))
                    await self.self_ref.tell(Continue(task=task))
                return None
            case CancelTask(reason=reason):
                if self.state.status != "working":
                    return "no task is running"
                self._end(f"cancelled: {reason}", f"Task cancelled: {reason}")
                return "cancelled"
            case Continue(task=task):
                if self.state.status == "working" and task == self.state.task:
                    await self._step()
                return None  # a step of a task that ended (cancelled) is dropped
            case DeadLettered():
                self._dead_lettered(msg)
                return None
        return self.info()  # GetSessionInfo

    def _dead_lettered(self, notice: DeadLettered) -> None:
        """A step of the running task could not be processed (it failed, or its process died,
        ``max_attempts`` times): the task fails, with the reason, and whoever asked for it is
        answered now. Without this the session said "working" for ever, each new message
        joined a task that no step would ever continue, and every asker waited its timeout.
        (A dead-lettered ``UserMessage`` changed nothing here: its asker was told by the
        runtime.)"""
        if notice.msg_type != Continue.__name__ or self.state.status != "working":
            return
        try:
            task = msgspec.msgpack.decode(notice.payload, type=Continue).task
        except msgspec.DecodeError:  # sent without its payload (too large): it was ours
            task = self.state.task
        if task != self.state.task:
            return  # a step of a task that already ended
        last = notice.errors[-1] if notice.errors else "no attempt finished"
        why = f"step {self.state.steps + 1} was dead-lettered ({notice.reason}); {last}"
        self._end(f"failed: {why}", f"I could not continue: {why}")

    def info(self) -> SessionInfo:
        s = self.state
        return SessionInfo(
            session_id=self.id,
            goal=self.goal,
            status=session_status(s),
            task=s.task,
            task_text=s.task_text,
            steps=s.steps,
            belief=s.belief,
            frontier=s.frontier,
            last_answer=s.last_answer,
            outcome=s.outcome,
            usage=s.usage,
        )

    # -- one step ------------------------------------------------------------------------------

    async def _step(self) -> None:
        s = self.state
        if s.steps >= self.max_steps:
            self._end(f"stopped: step limit ({self.max_steps}) reached", _stopped_answer(s))
            return
        step = s.steps + 1
        self.persist(StepBegun(task=s.task, step=step, belief=s.belief, frontier="decide"))
        try:
            bundle = self.context()
        except ConfigError as exc:
            # The pinned fragments (goal, constraints, the checkpoint with the task's text), or
            # the thread summary with them, do not fit the budget: every replay of this step
            # would fail the same way, so the step's message was dead-lettered and the task
            # stayed "working", its asker never answered. End the task, saying why; the
            # session takes the next task (whose checkpoint may leave the summary room).
            self._end(f"stopped: {exc}", f"I could not continue: {exc}")
            return
        request = ModelRequest(
            session_id=self.id,
            task=s.task,
            step=step,
            decisions=s.decisions,
            context=bundle.render(),
            tools=[t.spec() for t in self.tools],
            bundle=bundle,
        )
        try:
            decision: Decision = await self.effect(self._model_tool, request=request)
        except EffectInterrupted:
            # A CancelTask is next in the mailbox: it ends the task. (Should it not, this
            # continuation asks the model again, in a new step.)
            await self.self_ref.tell(Continue(task=s.task))
            return
        except (ToolFailed, EffectAborted, DeterminismViolation) as exc:
            self._end(f"stopped: the model failed: {exc}", f"I could not continue: {exc}")
            return
        self.persist(ModelDecided(decision=decision))
        if isinstance(decision, FinalAnswer):
            self._end("finished", decision.text)
            return
        # Several calls in one answer are made in order, each its own effect (its own index,
        # key, guards and receipt), so a crash between two of them replays the done ones from
        # their receipts and makes the next. Every call gets a result before the model is
        # asked again, as the providers require for each of its call ids.
        for call in calls_of(decision):
            if not await self._act(call):
                return
            if not self.state.history:
                # A successful _act always appends a record, so an empty history means the
                # loop policy reset the context: the model decides afresh, and the rest of
                # this answer, planned on the context just dropped, is not made.
                break
        if self.state.heard:
            self.persist(Heard())
        await self.self_ref.tell(Continue(task=s.task))

    async def _act(self, call: ToolCall) -> bool:
        """Make the call the model asked for and journal its outcome; False if the task ended."""
        if call.malformed:
            return self._invalid(call, call.malformed)
        tool = self._tools_by_name.get(call.tool)
        if tool is None:
            known = ", ".join(self._tools_by_name) or "none"
            return self._invalid(call, f"there is no tool named {call.tool!r} (tools: {known})")
        key: str | None = None  # set once the call is in the ledger
        try:
            value = await self.effect(tool, **call.args)
        except ToolInputError as exc:
            return self._invalid(call, exc.problem)
        except LoopDetected as exc:
            if exc.response == "stop":
                self._end(f"stopped: loop detected: {exc.detail}", _stopped_answer(self.state))
                return False
            if exc.response == "reset":
                return self._reset_context(exc.detail)
            error = f"Loop detected, the call was not made: {exc.detail}"
        except ToolUnavailable as exc:
            error = exc.reason
        except ApprovalRejected as exc:
            error = f"A person rejected this call ({exc.by}): {exc.reason}"
        except (ToolFailed, EffectAborted, DeterminismViolation, EffectInterrupted) as exc:
            error, key = str(exc), exc.key
        else:
            key = self.last_effect_key
            self.persist(ToolResult(record=self._record(call, result=_text(value)), key=key))
            return True
        self.persist(ToolResult(record=self._record(call, error=error), key=key))
        return True

    def _invalid(self, call: ToolCall, problem: str) -> bool:
        """Invalid arguments go back to the model for one correction; in two answers in a
        row, the task is escalated: stopped, with the reason, for a person to pick up."""
        self.persist(
            ToolResult(record=self._record(call, error=f"Invalid call: {problem}"), invalid=True)
        )
        if self.state.corrections >= 2:
            why = f"escalated: invalid tool call twice in a row ({call.tool}: {problem})"
            telemetry.escalations.add(1, {"tether.tool": call.tool})
            telemetry.log.info("session_escalated", session_id=self.id, why=why)  # by design
            self._end(f"stopped: {why}", f"I need a person's help: {why}")
            return False
        return True

    def _record(
        self, call: ToolCall, *, result: str | None = None, error: str | None = None
    ) -> ToolCallRecord:
        """The history record of ``call``: under the provider's call id, in the turn of the
        answer that asked for it (the decision just journaled)."""
        return ToolCallRecord(
            tool=call.tool,
            args=dict(call.args),
            result=result,
            error=error,
            call_id=call.call_id,
            turn=self.state.decisions,
        )

    def _end(self, outcome: str, answer: str) -> None:
        """End the running task: journaled, and every asker of it answered with its
        ``TaskResult`` (raised as ``TaskFailed`` unless the outcome is "finished")."""
        s = self.state
        result = TaskResult(
            session_id=self.id,
            task=s.task,
            status=task_status(outcome),
            outcome=outcome,
            answer=answer,
            calls=s.calls,
        )
        for msg_id in s.reply_to:
            self.reply(msg_id, result)
        self.persist(TaskEnded(task=s.task, outcome=outcome, answer=answer))

    # -- context -------------------------------------------------------------------------------

    def context(self) -> ContextBundle:
        """The context bundle for the next model call, from the session's fragments."""
        return self._bundle(self.state.summary, self.state.history)

    def _bundle(
        self, summary: str, history: Sequence[ChatMessage | ToolCallRecord]
    ) -> ContextBundle:
        fragments: list[Fragment] = [Goal(text=self.goal)]
        fragments.extend(Constraint(text=c) for c in self.constraints)
        if summary:
            fragments.append(Summary(text=summary))
        fragments.append(Checkpoint(text=self._checkpoint()))
        fragments.extend(history)
        return assemble(fragments, budget=self.context_budget, count_tokens=type(self).count_tokens)

    def _checkpoint(self) -> str:
        s = self.state
        note = f"Task {s.task}: {s.task_text} Step {s.steps} of at most {self.max_steps}."
        return f"{note} Belief: {s.belief}" if s.belief else note

    def _reset_context(self, detail: str) -> bool:
        """Replace the history by a summary (a loop policy's ``reset``); False if the task
        ended instead. The bundle never trims the summary, so one that does not fit the budget
        would stop the next step anyway: it is refused here, not stored, and the task ends
        saying why, the session's summary and history left as they were for its next task."""
        summary = self._reset_summary(detail)
        try:
            self._bundle(summary, ())
        except ConfigError as exc:
            why = f"loop detected: {detail} The context could not be reset: {exc}"
            self._end(f"stopped: {why}", f"I could not continue: {why}")
            return False
        self.persist(ContextReset(summary=summary))
        return True

    def _reset_summary(self, detail: str) -> str:
        s = self.state
        names = ", ".join(s.task_tools) or "none"
        return (
            f"The context was reset because the session repeated itself: {detail} "
            f"Task: {s.task_text} Tool calls so far: {s.task_calls} ({names})."
        )

    # -- approvals -----------------------------------------------------------------------------

    def approval_context(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "goal": self.goal,
            "task": self.state.task_text,
            "belief": self.state.belief,
            "if_rejected": "the reason is given to the agent, which must find another way",
        }


def _check_settings(cls: type[AgentSession]) -> None:
    """Refuse a bad class setting when the class is defined. Unchecked, each one failed later
    and far away: a bare TypeError on the first step (a str number, a count_tokens that is not
    callable), a session that could never act (max_steps=0; escalate_after_failures=0 held even
    the model's call for a person), or nothing until a call needed the policy."""
    where = cls.__qualname__

    def positive_int(name: str, value: object, *, optional: bool = False) -> None:
        if optional and value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            none = " or None" if optional else ""
            raise ConfigError(f"{where}.{name} must be an int >= 1{none}, not {value!r}")

    positive_int("context_budget", cls.context_budget)
    positive_int("max_steps", cls.max_steps)
    positive_int("escalate_after_failures", cls.escalate_after_failures, optional=True)
    if not callable(cls.count_tokens):
        raise ConfigError(
            f"{where}.count_tokens must be a function of a str, not {cls.count_tokens!r}"
        )
    if cls.loop_policy is not None and not isinstance(cls.loop_policy, LoopPolicy):
        raise ConfigError(
            f"{where}.loop_policy must be a tether.LoopPolicy or None, not {cls.loop_policy!r}"
        )
    approval = getattr(cls, "approval_policy", None)
    if approval is not None and not isinstance(approval, ApprovalPolicy):
        raise ConfigError(
            f"{where}.approval_policy must be a tether.ApprovalPolicy or None, not {approval!r}"
        )
    # A class without a model may be a base for sessions that set one: spawning it is refused.
    model = getattr(cls, "model", None)
    if model is not None and not isinstance(model, Model):
        raise ConfigError(
            f"{where}.model must be a tether.Model (an object with async decide(request)), "
            f"not {model!r}"
        )


#: The name of a session's model calls in the effects ledger (each one is an effect).
MODEL_TOOL = "model"


def _model_tool(cls: type[AgentSession]) -> Tool:
    async def model(request: ModelRequest) -> Decision:
        return await genai.decide(cls.model, request)  # a GenAI client span and metrics

    return Tool(
        model,
        name=MODEL_TOOL,
        recovery="retry",  # asking again has no side effect; a recorded decision is replayed
        breaker="model",
        timeout=cls.model_timeout,
        description="the session's model",
        loop_guard=False,
        defer_receipt=False,  # I6: once the model answered, it is never asked again
        bound_nesting=False,  # the session's own request (its decisions are bounded: results)
    )


def session_status(state: SessionState) -> SessionStatus:
    """``SessionInfo.status``: "working", the latest task's ending, or "idle" before any."""
    if state.status == "working":
        return "working"
    return task_status(state.outcome) if state.task else "idle"


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


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return _json(msgspec.to_builtins(value))


def _json(value: Any) -> str:
    return msgspec.json.encode(value, order="sorted").decode()


def _stopped_answer(s: SessionState) -> str:
    return f"I stopped before finishing: {s.task_text}"
