"""The PostgreSQL store (``tether.store.postgres.store``), from the ``tether[postgres]`` extra.

* ``store``    ``PostgresStore``: lifecycle, migrations, the batch, leases and runtimes
* ``mail``     the message scan, due and orphaned actors, replies, dedup keys, watchers
* ``reads``    reads across every actor (``StoreAdmin``), the ledger, approvals, audit
* ``admin_writes`` writes outside the batch: a person's decisions, the audit log, retention
* ``writes``   a batch's writes, one function per kind, fenced ``FOR SHARE``
* ``writer``   the writer's exactly-once transactions (a batch id per transaction)
* ``cursor``   the message scan's cursor: transaction snapshots, as PgQ's ticks
* ``schema``   numbered migrations under an advisory lock
* ``conn``     connections on threads of their own, their settings, reconnecting
* ``rows``     rows as records and records as rows
* ``dsn``      the store's URL and its ``?schema=``
"""

from tether.store.postgres.store import PostgresStore as PostgresStore

__all__ = ("PostgresStore",)
