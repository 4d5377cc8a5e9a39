"""The words tether uses for where an actor, a session and a task stand: defined here once,
and used the same way by ``Runtime.tree`` (``TreeNode.status``), ``SessionInfo.status``,
``TaskResult.status``, ``tether actors``, ``tether sessions``, ``tether tree``,
``tether show`` and the console.

Two questions, two columns, one meaning per word:

``ActorStatus`` — is the actor there to take messages? (``TreeNode.status``; the STATUS
column of ``tether actors``, ``tether sessions`` and ``tether tree``)

- ``running``: it takes messages — active in some runtime, or passivated and woken by the
  next message (the store says ``active``: that is ``running`` too).
- ``restarting``: its supervisor is restarting it after a crash.
- ``backing off``: its supervisor waits out a backoff delay before restarting it.
- ``stopped``: stopped for good, on purpose (a ``StopActor``, its supervisor shutting down).
- ``failed``: given up on: a crash its supervisor did not restart (restart intensity spent,
  or a ``temporary`` child).

``SessionStatus`` — where an agent session's latest task stands (``SessionInfo.status``; the
TASK column of ``tether sessions``, ``session:`` in ``tether show``). ``TaskStatus`` is the
same without ``idle`` (a ``TaskResult`` is always of a task):

- ``idle``: no task yet.
- ``working``: a task is under way (its step may be waiting for a person's approval).
- ``finished``: the task ended with an answer.
- ``stopped``: the session ended it, saying why: the step limit, a loop, an escalation to a
  person, the model failing past its retries, a context that does not fit its budget.
- ``cancelled``: someone cancelled it (``CancelTask``).
- ``failed``: a step of it could not be processed (its message was dead-lettered).
"""

from __future__ import annotations

from typing import Literal, get_args

ActorStatus = Literal["running", "restarting", "backing off", "stopped", "failed"]
TaskStatus = Literal["working", "finished", "stopped", "cancelled", "failed"]
SessionStatus = Literal["idle", "working", "finished", "stopped", "cancelled", "failed"]

ACTOR_STATUSES: tuple[ActorStatus, ...] = get_args(ActorStatus)
SESSION_STATUSES: tuple[SessionStatus, ...] = get_args(SessionStatus)


def actor_status(stored: str, held: str | None = None) -> ActorStatus:
    """The ``ActorStatus`` of an actor whose store row says ``stored`` (``active``,
    ``stopped`` or ``failed``), and whose supervisor, in this process, holds it ``held``
    (``restarting``, ``backing off``; None when it holds it not)."""
    if stored == "stopped":
        return "stopped"
    if stored == "failed":
        return "failed"
    if held == "restarting":
        return "restarting"
    if held == "backing off":
        return "backing off"
    if held == "stopped":  # its tree is coming down: none of it is re-activated
        return "stopped"
    return "running"


def task_status(outcome: str) -> TaskStatus:
    """The ``TaskStatus`` of an ended task, from its outcome ("stopped: why" -> "stopped")."""
    word = outcome.partition(":")[0] or "finished"
    for status in _ENDED:
        if word == status:
            return status
    # An outcome written by a tether that knew other words: ended, but not how; "stopped"
    # says that much without claiming an answer ("finished") or a failure.
    return "stopped"


_ENDED: tuple[TaskStatus, ...] = ("finished", "stopped", "cancelled", "failed")
