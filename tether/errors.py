"""Every error tether raises, in one tree.

::

    TetherError
    ├── ConfigError (ValueError)            a bad actor class, spawn argument or runtime setting
    │   └── AlreadyApproved                 this approver already counts towards the quorum
    ├── MessageRejected (TypeError)         a message of a type the actor does not accept
    ├── ActorNotFound (LookupError)         no actor with that id in the store
    ├── DeadLetterNotFound (LookupError)    no dead letter with that message id
    ├── ActorStopped                        the actor was stopped; it takes no more messages
    ├── ActorIdTaken                        add_child cannot give the id to a new child now
    │   └── AlreadyStarted                  an actor with that id is running (OTP's already_started)
    ├── ChildStartFailed                    a child failed to start when its supervisor (or add_child)
    │                                       started it (OTP's failed_to_start_child)
    ├── AskTimeout (TimeoutError)           no reply within the ask's timeout
    ├── MessageDeadLettered                 the asked message failed max_attempts times
    ├── TaskFailed                          an agent session's task was stopped, cancelled or failed
    ├── RuntimeClosed                       the Runtime is not open
    ├── EffectNotFound (LookupError)        no quarantined effect with that key
    ├── ApprovalNotFound (LookupError)      no approval request with that id
    ├── ApprovalClosed                      the request was already decided, or expired
    ├── ApprovalChanged                     the request changed since the decider read it
    ├── NotPermitted (PermissionError)      this identity may not decide or resolve anything
    ├── WebhookSignatureError               a webhook notice's signature does not hold
    │                                       (tether.verify_webhook; defined beside it)
    ├── ToolError                           an effect did not produce a result
    │   ├── ToolInputError (ValueError)     the arguments do not fit the tool's schema; nothing ran
    │   ├── ToolFailed                      the tool raised; the error is recorded and replayed
    │   ├── TransientToolError              raised BY a tool: not carried out, safe to call again
    │   │   └── McpNotConnected             an MCP request was not sent (tether.mcp)
    │   ├── ToolTimeout (TimeoutError)      raised BY a tool: timed out, maybe carried out
    │   ├── ProviderError                   a model provider's error that asking again will not fix
    │   ├── McpToolError                    an MCP server answered that its tool failed
    │   ├── McpConnectionLost (ConnectionError)  an MCP connection dropped after the request
    │   │                                   was sent: maybe carried out (both in tether.mcp)
    │   ├── ToolUnavailable                 the tool's circuit breaker is open; retry after retry_at
    │   ├── LoopDetected                    the session repeats itself; the call was not made
    │   ├── EffectAborted                   a person aborted the quarantined effect
    │   ├── EffectInterrupted               a CancelTask cut the call short (or it was not made)
    │   ├── ApprovalRejected                a person (or the deadline) rejected the call
    │   └── DeterminismViolation            a replayed step asked for a different effect
    └── StoreError                          the store could not do what was asked
        ├── StoreOpenError                  the store file cannot be opened or created
        ├── SchemaVersionError              the store's schema version is not this tether's
        ├── CorruptRecordError              a stored row cannot be decoded
        ├── StaleLeaseError                 a commit carried a fencing token that is no longer current
        └── JournalWriteError               a commit failed; its outcome is unknown

Cancellation is never wrapped or swallowed: anyio's cancellation exceptions pass through
every layer untouched. Outside the tree, ``StepSuspended`` (a ``BaseException``, like
cancellation) unwinds a handler whose step must wait for a person; the runtime catches it and
delivers the message again once the wait is over. Handlers must let it pass.

Warnings (``warnings.warn``, filterable by category) say what works now but will fail later:
``MainModuleWarning`` (a ``UserWarning``) for a class or tool defined in ``__main__``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class TetherError(Exception):
    """The root of every error tether raises."""


class ConfigError(TetherError, ValueError):
    """A bad actor class definition, spawn argument or runtime setting."""


class AlreadyApproved(ConfigError):
    """The approver already counts towards the request's quorum (the same person again, or a
    second name nobody checked): the approval would not count, and is refused."""


class MessageRejected(TetherError, TypeError):
    """A message of a type the actor does not accept; nothing was stored."""

    def __init__(self, actor_id: str, message_type: str, accepted: Sequence[str]) -> None:
        self.actor_id = actor_id
        self.message_type = message_type
        self.accepted = tuple(accepted)
        super().__init__(
            f"actor {actor_id!r} does not accept {message_type}; "
            f"it accepts: {', '.join(self.accepted) or 'nothing'}"
        )


class ActorNotFound(TetherError, LookupError):
    """No actor with this id exists in the store."""

    def __init__(self, actor_id: str) -> None:
        self.actor_id = actor_id
        super().__init__(f"no actor with id {actor_id!r} in this store")


class DeadLetterNotFound(TetherError, LookupError):
    """No dead letter with this message id."""

    def __init__(self, msg_id: str) -> None:
        self.msg_id = msg_id
        super().__init__(f"no dead letter with message id {msg_id!r}")


class ActorStopped(TetherError):
    """The actor was stopped and takes no more messages."""

    def __init__(self, actor_id: str, reason: str | None) -> None:
        self.actor_id = actor_id
        self.reason = reason
        super().__init__(f"actor {actor_id!r} is stopped ({reason or 'no reason given'})")


class ActorIdTaken(TetherError):
    """``add_child`` cannot give this id to a new child now; ``reason`` says why and what would
    free it (see ``docs/supervision.md``, "Adding a child under a used id")."""

    def __init__(self, actor_id: str, reason: str) -> None:
        self.actor_id = actor_id
        self.reason = reason
        super().__init__(f"actor id {actor_id!r} cannot be given to a new child: {reason}")


class AlreadyStarted(ActorIdTaken):
    """An actor with this id is running (or being restarted by its supervisor): ``add_child``
    refuses to start a second one (OTP's ``{error, {already_started, Pid}}``). ``parent_id``
    is the supervisor it runs under, None for a top-level actor."""

    def __init__(self, actor_id: str, parent_id: str | None) -> None:
        self.parent_id = parent_id
        where = f"under supervisor {parent_id!r}" if parent_id else "as a top-level actor"
        super().__init__(actor_id, f"it is already started, {where}")


class ChildStartFailed(TetherError):
    """A child failed to start while its supervisor started (OTP's ``{shutdown,
    {failed_to_start_child, Id, Reason}}``), or when ``add_child`` started it. The children
    after it were not started and the ones before it were stopped again, in reverse order; a
    child added by ``add_child`` was not added (its id can be added again)."""

    def __init__(self, supervisor_id: str, child_id: str, reason: str) -> None:
        self.supervisor_id = supervisor_id
        self.child_id = child_id
        self.reason = reason
        super().__init__(
            f"supervisor {supervisor_id!r} could not start its child {child_id!r}: {reason}"
        )


class AskTimeout(TetherError, TimeoutError):
    """No reply arrived within the ask's timeout. The message stays queued and is processed."""

    def __init__(self, actor_id: str, message_type: str, timeout: float) -> None:
        self.actor_id = actor_id
        self.message_type = message_type
        self.timeout = timeout
        super().__init__(f"no reply from {actor_id!r} to {message_type} within {timeout} s")


class MessageDeadLettered(TetherError):
    """The asked message failed ``max_attempts`` times and was moved to the dead letters."""

    def __init__(self, actor_id: str, msg_id: str, errors: Sequence[str]) -> None:
        self.actor_id = actor_id
        self.msg_id = msg_id
        self.errors = tuple(errors)  # one entry per attempt, then why it was dead-lettered
        attempts = [e for e in self.errors if e.startswith("attempt ")]
        last = attempts[-1] if attempts else "no attempt finished"
        why = self.errors[-1] if self.errors and not self.errors[-1].startswith("attempt ") else ""
        super().__init__(
            f"message {msg_id} to {actor_id!r} was dead-lettered after {len(attempts)} "
            f"attempt(s) ({why or 'no reason recorded'}); last error: {last}"
        )


class TaskFailed(TetherError):
    """An agent session's task did not finish: it was stopped (a step limit, a loop, a person
    needed), cancelled, or it failed (a step could not be processed). ``result`` is its
    ``tether.TaskResult``: the session's last word, the reason and the calls made."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.session_id: str = result.session_id
        self.task: int = result.task
        self.status: str = result.status
        self.reason: str = result.outcome.partition(": ")[2] or result.answer
        super().__init__(f"task {self.task} of session {self.session_id!r} {result.outcome}")


class RuntimeClosed(TetherError):
    """The Runtime is not open (use ``async with tether.Runtime(...)``)."""


class StoreError(TetherError):
    """The store could not do what was asked."""


class StoreOpenError(StoreError):
    """The store file cannot be opened or created."""


class SchemaVersionError(StoreError):
    """The store's schema version is not this tether's: an unknown one, or an older one that
    ``tether migrate`` upgrades (never done when a store is opened)."""


class CorruptRecordError(StoreError):
    """A stored row cannot be decoded."""


class StaleLeaseError(StoreError):
    """A commit carried a fencing token that is no longer current: another owner took over."""

    def __init__(self, actor_id: str, fence: int) -> None:
        self.actor_id = actor_id
        self.fence = fence
        super().__init__(
            f"commit for {actor_id!r} rejected: fencing token {fence} is stale "
            "(another runtime owns this actor now)"
        )


class JournalWriteError(StoreError):
    """A commit failed. Its outcome is unknown, so the step is never resumed in place."""


class EffectNotFound(TetherError, LookupError):
    """No effect with this key is waiting to be resolved."""

    def __init__(self, key: str, why: str = "no quarantined effect has this key") -> None:
        self.key = key
        super().__init__(f"effect {key!r}: {why}")


class ToolError(TetherError):
    """An effect did not produce a result. ``tool`` names the tool."""

    def __init__(self, tool: str, message: str) -> None:
        self.tool = tool
        super().__init__(f"tool {tool!r}: {message}")


class ToolInputError(ToolError, ValueError):
    """The arguments do not fit the tool's input schema. Nothing was recorded or run."""

    def __init__(self, tool: str, problem: str) -> None:
        self.problem = problem
        super().__init__(tool, f"invalid arguments: {problem}")


class ToolFailed(ToolError):
    """The tool raised. Its receipt holds the error, so a replay raises the same error again
    without calling the tool."""

    def __init__(self, tool: str, key: str, error: str, attempts: int) -> None:
        self.key = key
        self.error = error
        self.attempts = attempts
        super().__init__(tool, f"failed after {attempts} attempt(s): {error}")


class TransientToolError(ToolError):
    """Raised by a tool to say the call was NOT carried out and may be made again (a 429, a
    503, a refused connection). The effect is retried under the tool's retry policy.

    ``retry_after`` is the receiver's own word on when to try again (an HTTP ``Retry-After``),
    in seconds: the next attempt waits at least that long, within the policy's ``max_delay``.
    """

    def __init__(
        self,
        tool: str,
        message: str,
        *,
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status_code = status_code
        self.retry_after = retry_after
        super().__init__(tool, message)


class ToolTimeout(ToolError, TimeoutError):
    """Raised by a tool to say its call timed out: it MAY have been carried out (the request
    was sent, no answer came). Sorted like any ``TimeoutError``: retried with the same key by
    ``recovery="retry"`` tools (the session's model is one), otherwise ambiguous and resolved
    by the tool's recovery policy."""

    def __init__(self, tool: str, message: str, *, status_code: int | None = None) -> None:
        self.status_code = status_code
        super().__init__(tool, message)


class ProviderError(ToolError):
    """A model provider answered with an error that asking again will not fix: a bad request,
    bad credentials, an unknown model, a quota or spending limit reached. Recorded as the
    model call's failure and never retried; the session's task stops with it.

    ``status`` is the HTTP status (not ``status_code``: tether sorts errors by that attribute,
    and a 429 for an exhausted quota must not be retried like a rate limit), ``code`` the
    provider's error code, ``request_id`` its request id for a support ticket.
    """

    def __init__(
        self,
        tool: str,
        message: str,
        *,
        provider: str,
        status: int | None,
        code: str | None = None,
        request_id: str | None = None,
    ) -> None:
        self.provider = provider
        self.status = status
        self.code = code
        self.request_id = request_id
        super().__init__(tool, message)


class ToolUnavailable(ToolError):
    """The tool's circuit breaker is open: the call was not made. Retry after ``retry_at``.

    ``key``: the call's row in the effects ledger when an earlier attempt of it was recorded
    (a retry the breaker refused), else None (a new call: nothing was recorded)."""

    def __init__(
        self, tool: str, reason: str, retry_at: float, retry_in: float, key: str | None = None
    ) -> None:
        self.reason = reason
        self.retry_at = retry_at
        self.retry_in = retry_in
        self.key = key
        super().__init__(
            tool, f"unavailable ({reason}); the call was not made; retry in {retry_in:.1f} s"
        )


class EffectAborted(ToolError):
    """A person aborted a quarantined effect: it will not run, and the step must go on without it."""

    def __init__(self, tool: str, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(tool, f"effect {key} was aborted: {reason}")


class EffectInterrupted(ToolError):
    """The call was interrupted: a message that ends the step's work (``tether.CancelTask``)
    arrived while the step waited on it (``made``: its outcome, "maybe carried out", is then
    recorded by the tool's recovery policy) or before it was made (``made`` False: it was not).
    See ``docs/recovery.md``, "Interrupted calls"."""

    def __init__(self, tool: str, key: str, why: str, *, made: bool) -> None:
        self.key = key
        self.why = why
        self.made = made
        when = "during the call" if made else "before the call: it was not made"
        super().__init__(tool, f"call {key} interrupted {when} ({why})")


class DeterminismViolation(ToolError):
    """A replayed step asked, at an effect index already recorded, for a different tool or
    input. The call is refused, never executed (I5). A ledger row at that index is held for a
    person (quarantined: only ``abort`` resolves it); an approval given for another call
    raises this at once."""

    def __init__(self, tool: str, key: str, detail: str) -> None:
        self.key = key
        self.detail = detail
        super().__init__(tool, f"determinism violation at effect {key}: {detail}")


class StepSuspended(BaseException):
    """Unwinds a handler whose step waits for a person (a quarantined effect or an approval).

    Not an error: the runtime sets the message aside, durably, and delivers it again when the
    wait is resolved; the step then replays from the start, its recorded effects answered from
    the ledger. It derives from ``BaseException`` so that ``except Exception`` in a handler
    does not swallow it; even if it is swallowed, the step is not committed.
    """

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


class ApprovalNotFound(TetherError, LookupError):
    """No approval request with this id in the store."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        super().__init__(f"no approval request with id {request_id!r}")


class ApprovalClosed(TetherError):
    """The approval request takes no more decisions: it was decided, or its deadline passed."""

    def __init__(self, request_id: str, why: str) -> None:
        self.request_id = request_id
        self.why = why
        super().__init__(f"approval request {request_id!r} is closed: {why}")


class ApprovalChanged(TetherError):
    """The request changed (another decision, a modification) after the decider read it:
    what they saw is not what they would decide on. Read it again."""

    def __init__(self, request_id: str, seen: int, now: int) -> None:
        self.request_id = request_id
        self.seen = seen
        self.now = now
        super().__init__(
            f"approval request {request_id!r} changed since it was read (version {seen}, "
            f"now {now}): read it again before deciding"
        )


class NotPermitted(TetherError, PermissionError):
    """The identity may not change anything: a viewer's role, a read-only console. The
    attempt is audited as refused."""

    def __init__(self, who: str, why: str) -> None:
        self.who = who
        self.why = why
        super().__init__(f"{who} may not do this: {why}")


class ApprovalRejected(ToolError):
    """The held call was rejected (by a person, or by the deadline's default outcome). The
    call did not run; ``reason`` is the reviewer's instruction to the agent."""

    def __init__(self, tool: str, request_id: str, by: str, reason: str) -> None:
        self.request_id = request_id
        self.by = by
        self.reason = reason
        super().__init__(tool, f"call rejected by {by} ({request_id}): {reason}")


class LoopDetected(ToolError):
    """The session's loop detector caught a repeating pattern; the call was not made.

    ``response`` is what the session's ``LoopPolicy`` says to do: ``feedback`` (tell the
    model ``detail``), ``reset`` (restart its context from a clean summary) or ``stop``. An
    ``escalate`` response never raises: the call is held for a person instead.
    """

    def __init__(self, tool: str, pattern: str, response: str, detail: str) -> None:
        self.pattern = pattern
        self.response = response
        self.detail = detail
        super().__init__(tool, f"loop detected ({pattern}, response {response}): {detail}")


class MainModuleWarning(UserWarning):
    """An actor class or tool is defined in ``__main__`` (the script being run), so no other
    process (the CLI, a console, another runtime) can import it by name. Move it into a module
    and import it from the script."""
