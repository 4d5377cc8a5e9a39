"""``tether check``: an integrity check of a whole store, after an incident or in a test.

It reads the store through ``StoreAdmin`` only (so every backend gets the same checks) and
never writes. What it checks, module by module:

* the backend's own check of its storage, when it offers one (``SelfChecking``: SQLite's
  ``PRAGMA integrity_check``);
* each actor's journal whole up to its last committed event, and its snapshot the fold of
  that journal (``check_journals.py``);
* the effects ledger, the approvals its calls ran under, the mailbox and the dead letters
  (``check_ledger.py``).

Each violation is named with its actor, key, request or message (``check_report.py``). The
check reads a store that runtimes may be serving: a step committed while it reads can show
as a transient violation (a new intent whose message it had already read past), so check a
store at rest — after an incident, with its runtimes stopped — for a verdict.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from tether.errors import CorruptRecordError
from tether.runtime.check_journals import check_actor
from tether.runtime.check_ledger import check_effects, check_mail
from tether.runtime.check_report import KINDS, CheckReport, Violation
from tether.runtime.runtime import Runtime
from tether.store.integrity import SelfChecking
from tether.store.records import ActorRecord

#: ``progress(done, total)``: called as actors are checked (a CLI draws a bar with it).
Progress = Callable[[int, int], None]

T = TypeVar("T")

#: Mailbox rows read per actor.
MAILBOX_LIMIT = 1_000_000

__all__ = ["KINDS", "CheckReport", "Progress", "Violation", "check_runtime_store"]


async def check_runtime_store(
    rt: Runtime, *, name: str | None = None, progress: Progress | None = None
) -> CheckReport:
    """Check the store ``rt`` has open (``Runtime(serve=False)`` for a store at rest); the
    report, whatever it finds (``report.ok``). ``name``: how the report names the store."""
    store = rt.store
    report = CheckReport(store=name or rt.path or type(store).__name__)
    if isinstance(store, SelfChecking):
        problems = await store.storage_problems()
        report.storage = "integrity_check ok" if not problems else "integrity_check failed"
        for problem in problems:
            report.add("storage_damaged", problem)
    else:
        report.storage = "the backend offers no check of its own storage"

    on_corrupt = report.on_corrupt
    records = await _listing(report, "the actors", store.list_actors(on_corrupt=on_corrupt))
    actors: dict[str, ActorRecord] = {r.actor_id: r for r in records}
    events = snapshots = 0
    for done, rec in enumerate(records, 1):
        read, snapshot = await check_actor(rt, rec, report)
        events += read
        snapshots += snapshot
        if progress is not None:
            progress(done, len(records))
    effects = await _listing(report, "the ledger", store.find_effects(on_corrupt=on_corrupt))
    approvals = await _listing(report, "the approvals", store.find_approvals(on_corrupt=on_corrupt))
    letters = await _listing(report, "the dead letters", store.dead_letters(on_corrupt=on_corrupt))
    dead = {d.msg_id for d in letters}
    waiting = await check_mail(store, actors, effects, approvals, dead, report, limit=MAILBOX_LIMIT)
    check_effects(effects, approvals, actors, waiting, dead, report)
    report.counts = {
        "actors": len(records),
        "events": events,
        "snapshots": snapshots,
        "effects": len(effects),
        "approvals": len(approvals),
        "messages": len(waiting),
        "dead letters": len(letters),
    }
    return report


async def _listing(report: CheckReport, what: str, reading: Awaitable[list[T]]) -> list[T]:
    """A whole listing, or none when the store cannot read it at all (a damaged page under
    it): that is a violation of its own, and the check goes on with what it can read."""
    try:
        return await reading
    except CorruptRecordError as exc:
        report.add("storage_damaged", f"{what} cannot be read: {exc}")
        return []
