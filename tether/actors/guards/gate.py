"""What a held call's approval looks like to an actor: the policy that decides it, the three
decisions a person can give, and the request a reviewer reads.

These are plain values, beside ``BreakerPolicy`` and ``LoopPolicy``: an ``AgentSession``
declares its ``approval_policy`` here, and the runtime's approval gate and desk
(``tether.runtime.approvals``, ``approval_desk.py``) act on them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import msgspec

from tether.actors.guards.webhook import Webhook
from tether.deprecation import RenamedFields
from tether.errors import ConfigError


class ApprovalPolicy(msgspec.Struct, frozen=True, kw_only=True, metaclass=RenamedFields):
    """How a held call is decided: a deadline with a default outcome, and a quorum.

    ``approvers_needed`` distinct people must approve (``ApprovalRequest.approvers_needed``);
    ``approvers=`` is its deprecated name. ``notify``: a ``tether.Webhook`` (or several) that
    receives each new request and its outcome, signed.
    """

    timeout: float = 24 * 3600.0
    on_timeout: Literal["reject", "approve"] = "reject"
    approvers_needed: int = 1
    notify: Webhook | Sequence[Webhook] = ()

    _renamed_fields: ClassVar[Mapping[str, str]] = {"approvers": "approvers_needed"}

    def __post_init__(self) -> None:
        if isinstance(self.timeout, bool) or not (
            isinstance(self.timeout, int | float) and self.timeout > 0
        ):
            raise ConfigError(f"ApprovalPolicy.timeout must be > 0 seconds, not {self.timeout!r}")
        if self.on_timeout not in ("reject", "approve"):
            raise ConfigError(
                f"ApprovalPolicy.on_timeout must be 'reject' or 'approve', not {self.on_timeout!r}"
            )
        if isinstance(self.approvers_needed, bool) or not (
            isinstance(self.approvers_needed, int) and self.approvers_needed >= 1
        ):
            raise ConfigError(
                f"ApprovalPolicy.approvers_needed must be an int >= 1, not {self.approvers_needed!r}"
            )
        hooks = self.webhooks()
        urls = [w.url for w in hooks]
        if len(set(urls)) != len(urls):
            raise ConfigError(f"ApprovalPolicy.notify names a URL twice: {urls}")

    def webhooks(self) -> tuple[Webhook, ...]:
        """``notify`` as a tuple (it may be given as one ``Webhook``)."""
        notify = self.notify
        if isinstance(notify, Webhook):
            return (notify,)
        if isinstance(notify, list | tuple):
            hooks = tuple(notify)
            if all(isinstance(w, Webhook) for w in hooks):
                return hooks
        raise ConfigError(
            f"ApprovalPolicy.notify must be a tether.Webhook or a sequence of them, not {notify!r}"
        )


class Approve(msgspec.Struct, frozen=True, kw_only=True):
    """Run the call as requested (or as last modified). ``comment`` is kept with it."""

    by: str
    comment: str | None = None


class Reject(msgspec.Struct, frozen=True, kw_only=True):
    """Do not run it. ``reason`` goes back to the agent as an instruction."""

    by: str
    reason: str


class Modify(msgspec.Struct, frozen=True, kw_only=True):
    """Run it with these arguments instead (validated against the tool's schema, and
    fingerprinted anew); its author counts as the first approver of the new call."""

    by: str
    args: dict[str, Any]
    comment: str | None = None


Decision = Approve | Reject | Modify
Handler = Callable[["ApprovalRequest"], Awaitable[Decision | None]]


class ApprovalRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a reviewer needs to decide in 30 seconds."""

    request_id: str
    session_id: str
    tool: str
    args: dict[str, Any]  # the call that will run if approved (as last modified)
    requested_args: dict[str, Any]  # the call as the agent asked for it
    reason: str  # why it was escalated
    context: dict[str, Any]  # the session's goal, what happens if rejected, ...
    deadline: float
    on_timeout: str
    approvers_needed: int
    approved_by: list[str]
    status: str
    decisions: list[dict[str, Any]]
    created_at: float
    version: int = 0  # grows with every change: decide(expected_version=) refuses a stale one
    fingerprint: str = ""  # of the call that will run if approved (as last modified)
    approvals_counted: int = 0  # towards approvers_needed: names nobody checked count as one
