"""The PostgreSQL store (``tether.store.postgres.store``), from the ``tether[postgres]`` extra.

* ``store``    ``PostgresStore``: lifecycle, the batch, the scan, leases, small writes
* ``reads``    reads across every actor (``StoreAdmin``), the ledger, approvals, audit
* ``writes``   a batch's writes, one function per kind, fenced ``FOR SHARE``
* ``writer``   the writer's exactly-once transactions (a batch id per transaction)
* ``cursor``   the message scan's cursor: transaction snapshots, as PgQ's ticks
* ``schema``   numbered migrations under an advisory lock
* ``conn``     connections on threads of their own, their settings, reconnecting
* ``rows``     rows as records and records as rows
"""

from tether.store.postgres.store import PostgresStore as PostgresStore

__all__ = ("PostgresStore",)
