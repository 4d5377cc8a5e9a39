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
from tether.actors.actor import Actor
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
from tether.actors.guards.loops import LoopPolicy
from tether.actors.messages import DeadLettered
from tether.actors.model import (
    Decision,
    FinalAnswer,
    Model,
    ModelRequest,
    ToolCall,
    calls_of,
)
from tether.actors.session_class import MODEL_TOOL as MODEL_TOOL
from tether.actors.session_class import check_settings, model_tool, tools_by_name
from tether.actors.session_records import CancelTask as CancelTask
from tether.actors.session_records import ContextReset as ContextReset
from tether.actors.session_records import Continue as Continue
from tether.actors.session_records import GetSessionInfo as GetSessionInfo
from tether.actors.session_records import Heard as Heard
from tether.actors.session_records import ModelDecided as ModelDecided
from tether.actors.session_records import SessionEvent as SessionEvent
from tether.actors.session_records import SessionInfo as SessionInfo
from tether.actors.session_records import SessionState as SessionState
from tether.actors.session_records import StepBegun as StepBegun
from tether.actors.session_records import TaskCall as TaskCall
from tether.actors.session_records import TaskEnded as TaskEnded
from tether.actors.session_records import TaskResult as TaskResult
from tether.actors.session_records import TaskStarted as TaskStarted
from tether.actors.session_records import ToolResult as ToolResult
from tether.actors.session_records import UserMessage as UserMessage
from tether.actors.session_records import UserSaid as UserSaid
from tether.actors.session_records import as_json, fold_event
from tether.actors.session_records import session_status as session_status
from tether.actors.status import task_status
from tether.actors.tool import Tool
from tether.errors import (
    ApprovalRejected,
    ConfigError,
    DeterminismViolation,
    EffectAborted,
    EffectInterrupted,
    LoopDetected,
    ToolFailed,
    ToolInputError,
    ToolUnavailable,
)


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
        cls._tools_by_name = tools_by_name(cls)
        cls._model_tool = model_tool(cls)
        check_settings(cls)

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
        return fold_event(state, event, self.max_history)

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
        ran: dict[str, Any] | None = None  # the arguments it ran with, if a person modified it
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
            error, key = exc.reason, exc.key  # a key: a retry refused, settled with the step
        except ApprovalRejected as exc:
            error = f"A person rejected this call ({exc.by}): {exc.reason}"
        except (ToolFailed, EffectAborted, DeterminismViolation, EffectInterrupted) as exc:
            error, key, ran = str(exc), exc.key, self.last_effect_modified_args
        else:
            key, ran = self.last_effect_key, self.last_effect_modified_args
            record = self._record(call, result=_text(value), ran=ran)
            self.persist(ToolResult(record=record, key=key))
            return True
        self.persist(ToolResult(record=self._record(call, error=error, ran=ran), key=key))
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
        self,
        call: ToolCall,
        *,
        result: str | None = None,
        error: str | None = None,
        ran: dict[str, Any] | None = None,
    ) -> ToolCallRecord:
        """The history record of ``call``: under the provider's call id, in the turn of the
        answer that asked for it (the decision just journaled). ``ran``: the arguments it ran
        with, when a person modified it (the record keeps what the model asked, too)."""
        return ToolCallRecord(
            tool=call.tool,
            args=dict(call.args) if ran is None else ran,
            result=result,
            error=error,
            call_id=call.call_id,
            turn=self.state.decisions,
            asked=msgspec.UNSET if ran is None else dict(call.args),
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


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return as_json(msgspec.to_builtins(value))


def _stopped_answer(s: SessionState) -> str:
    return f"I stopped before finishing: {s.task_text}"
