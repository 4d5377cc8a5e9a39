"""What ``tether check`` reports: each violation of a store's invariants, named, and a summary.

A violation names what it is about — an actor, an effect's key, an approval request, a
message — so that an operator can look at exactly that (``tether show``, ``tether quarantine
show``, ``tether approvals show``) and a script can act on it (``--json``).
"""

from __future__ import annotations

from collections import Counter

import msgspec

from tether.errors import CorruptRecordError

#: Each kind of violation, and what it means (the CLI's ``--help`` and docs/operations.md).
KINDS: dict[str, str] = {
    "storage_damaged": "the backend's own check of its storage failed (SQLite integrity_check)",
    "unreadable_row": "a row cannot be decoded, or holds a value of the wrong type",
    "journal_gap": "an actor's journal misses events below its last committed one (head_seq)",
    "journal_past_head": "an actor's journal holds events after its last committed one",
    "journal_unreadable": "an event or a snapshot of an actor cannot be read or decoded",
    "snapshot_past_head": "an actor's snapshot is at a seq after its last committed event",
    "snapshot_mismatch": "an actor's snapshot is not the fold of its journal up to its seq",
    "effect_key_mismatch": "an effect's key is not the key of its own call (I5)",
    "key_executed_twice": "two ledger rows carry one idempotency key",
    "receipt_incomplete": "a receipt without its outcome (done: no result; failed: no error)",
    "intent_without_receipt": "an intent that nothing will ever settle: no receipt, no "
    "quarantine, and its message is in neither the mailbox nor the dead letters",
    "retry_left_behind": "a call to be made again when its step runs again, whose message is "
    "in neither the mailbox nor the dead letters: nothing will make or settle it",
    "unapproved_call": "a call that needs a person's approval ran (or may run) without one",
    "approval_mismatch": "a call ran under an approval given for another call",
    "approval_incomplete": "an approved request without the arguments it approved",
    "message_also_dead_lettered": "a message is both in the mailbox and in the dead letters",
    "mail_for_unknown_actor": "a message waits for an actor the store does not hold",
    "parked_without_reason": "a message is parked for good with nothing that will wake it "
    "(no quarantined effect, no pending approval)",
}


class Violation(msgspec.Struct, frozen=True, omit_defaults=True):
    """One broken invariant: its ``kind`` (``KINDS``), a one-line ``message`` naming it, and
    the ids it is about."""

    kind: str
    message: str
    actor_id: str | None = None
    key: str | None = None  # an effect's idempotency key
    request_id: str | None = None  # an approval request
    msg_id: str | None = None


class CheckReport(msgspec.Struct):
    """The outcome of a check of a whole store.

    ``counts``: what was read (actors, events, snapshots, effects, approvals, messages, dead
    letters). ``unchecked``: what could not be checked, and why (an actor whose class does
    not import here: its journal is checked, its snapshot is not folded); these do not fail
    the check. ``storage``: what the backend's own check said, or that it offers none."""

    store: str
    violations: list[Violation] = msgspec.field(default_factory=list)
    counts: dict[str, int] = msgspec.field(default_factory=dict)
    unchecked: list[str] = msgspec.field(default_factory=list)
    storage: str = "not checked"

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, kind: str, message: str, **ids: str | None) -> None:
        self.violations.append(Violation(kind, " ".join(message.split()), **ids))

    def on_corrupt(self, key: str, error: CorruptRecordError) -> None:
        """A listing's ``on_corrupt``: a damaged row it left out is a violation."""
        self.add("unreadable_row", str(error), key=key)

    def summary(self) -> str:
        """Lines for a person: every violation, then what was read, then the verdict."""
        lines = [f"{v.kind}: {v.message}" for v in self.violations]
        lines += [f"not checked: {u}" for u in self.unchecked]
        read = ", ".join(f"{n} {what}" for what, n in self.counts.items())
        lines.append(f"read: {read}" if read else "read: nothing")
        lines.append(f"storage: {self.storage}")
        if self.ok:
            lines.append(f"{self.store}: clean, no violation found")
        else:
            tally = Counter(v.kind for v in self.violations)
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(tally.items()))
            lines.append(f"{self.store}: {len(self.violations)} violation(s): {kinds}")
        return "\n".join(lines)

    def json(self) -> bytes:
        """The report for scripts: ``{"ok", "store", "violations", "counts", "unchecked",
        "storage"}``."""
        return msgspec.json.encode({"ok": self.ok, **msgspec.structs.asdict(self)})
