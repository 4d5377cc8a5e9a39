"""Who decides, through what, and the audit log of every attempt.

Every decision on an approval request and every resolution of a quarantined effect or a dead
letter is made by an ``Identity``: a name, whether an authentication layer established it,
the way it came (``via``), the client's address, and — for one who may only look — why it
may not change anything. The identity comes from the authentication layer (the console's
tokens or trusted proxy), never from a form field or a request body; the CLI's ``--by`` is a
name nobody checked, and says so (``authenticated=False``).

Each attempt, allowed or refused, is one ``AuditRecord``: an allowed one is written in the
store transaction that makes its change (``Store.update_approval``, ``resolve_effect``,
``retry_dead_letter``, ``discard_dead_letter``), a refused one on its own
(``Store.append_audit``), so the log never says a change happened that did not, nor misses
one that did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from tether import telemetry
from tether.errors import ConfigError
from tether.store.records import AuditRecord

if TYPE_CHECKING:
    from tether.runtime.kernel import Kernel

#: The ways a decision comes: the console's pages, its JSON API, the CLI, a policy (an
#: attached handler, a deadline's default outcome), or the application's own code.
VIAS = ("console", "api", "cli", "policy", "app")
_TARGET_MAX = 200  # an unknown id is audited as given, cut to this


class Identity(msgspec.Struct, frozen=True, kw_only=True):
    """Who makes a decision or a resolution, as the layer that authenticated them says.

    Attributes:
        name: the person (or program) as authenticated.
        via: ``"console"``, ``"api"``, ``"cli"``, ``"policy"`` or ``"app"``.
        authenticated: False for a name the decider typed that nothing checked (the CLI's
            ``--by``). Such names cannot be told apart: together they count as one
            approver towards a quorum.
        remote: the client's address, for the audit log.
        forbidden: why this identity may not change anything (a viewer's role), or None.
            Its attempts are refused (``NotPermitted``) and audited as refused.
    """

    name: str
    via: str = "app"
    authenticated: bool = True
    remote: str | None = None
    forbidden: str | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name.strip()):
            raise ConfigError(f"an identity needs a name, not {self.name!r}")
        if self.via not in VIAS:
            raise ConfigError(f"Identity.via must be one of {VIAS}, not {self.via!r}")
        if not isinstance(self.authenticated, bool):
            raise ConfigError(f"Identity.authenticated must be a bool, not {self.authenticated!r}")

    def shown(self) -> str:
        """The name as the audit view shows it: marked when nothing checked it."""
        return self.name if self.authenticated else f"{self.name} (unauthenticated)"


def entry(
    identity: Identity,
    action: str,
    target: str,
    now: float,
    *,
    outcome: str = "allowed",
    detail: str = "",
    actor_id: str | None = None,
    version_before: int | None = None,
    version_after: int | None = None,
    fingerprint: str | None = None,
) -> AuditRecord:
    """The audit row of one attempt by ``identity``."""
    return AuditRecord(
        at=now,
        identity=identity.name,
        authenticated=identity.authenticated,
        via=identity.via,
        action=action,
        target=target if len(target) <= _TARGET_MAX else target[: _TARGET_MAX - 1] + "…",
        outcome=outcome,
        detail=detail,
        actor_id=actor_id,
        version_before=version_before,
        version_after=version_after,
        fingerprint=fingerprint,
        remote=identity.remote,
    )


async def refused(rt: Kernel, row: AuditRecord, error: BaseException) -> None:
    """Append the refused attempt ``row`` (its detail: ``error``) to the audit log."""
    refusal = msgspec.structs.replace(row, outcome="refused", detail=str(error))
    await rt.store.append_audit(refusal)
    telemetry.log.info(
        "attempt_refused",
        action=row.action,
        target=row.target,
        identity=row.identity,
        via=row.via,
        error=str(error),
    )


def check_identity(identity: object) -> Identity:
    if not isinstance(identity, Identity):
        raise ConfigError(f"identity must be a tether.Identity, not {identity!r}")
    return identity
