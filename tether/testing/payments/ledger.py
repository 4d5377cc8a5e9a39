"""The server's state: the refunds file, the call counter and the fault plan, and the requests
it accepts (a refund, a fault plan)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

import msgspec

from tether.testing.payments.database import REFUND_COLUMNS, open_db, row_to_refund


class RefundRequest(msgspec.Struct, forbid_unknown_fields=True):
    order_id: Annotated[str, msgspec.Meta(min_length=1)]
    amount_cents: Annotated[int, msgspec.Meta(gt=0)]
    idempotency_key: str | None = None


# Calls are numbered from 1: a plan for call 0 or -1 would never fire, so it is a 400.
_CallNumber = Annotated[int, msgspec.Meta(ge=1)]


class Faults(msgspec.Struct, forbid_unknown_fields=True):
    fail_calls: list[_CallNumber] = []
    status: Annotated[int, msgspec.Meta(ge=400, le=599)] = 503
    delay_calls: dict[_CallNumber, Annotated[float, msgspec.Meta(ge=0)]] = {}
    delay_before_calls: dict[_CallNumber, Annotated[float, msgspec.Meta(ge=0)]] = {}
    hang_calls: list[_CallNumber] = []
    hang_before_calls: list[_CallNumber] = []


class HttpError(Exception):
    """An error answer: its HTTP status, and the message its JSON body carries."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(message)


class Ledger:
    """The server's state: the SQLite file, the call counter and the fault plan."""

    def __init__(self, db_path: str | Path, *, honor_keys: bool, delay: float) -> None:
        self.honor_keys = honor_keys
        self.delay = delay
        self.stopping = threading.Event()
        self._conn = open_db(db_path)
        self._lock = threading.Lock()  # around every use of the one connection
        self._calls = 0
        self._faults = Faults()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def next_call(self) -> tuple[int, Faults]:
        with self._lock:
            self._calls += 1
            return self._calls, self._faults

    @property
    def calls(self) -> int:
        with self._lock:
            return self._calls

    def set_faults(self, faults: Faults) -> None:
        with self._lock:
            self._faults = faults

    def record(self, req: RefundRequest, call: int) -> dict[str, Any]:
        """Record a refund (or find the one its key already recorded) in one transaction."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                key = req.idempotency_key if self.honor_keys else None
                if key is not None:
                    row = conn.execute(
                        "SELECT r.refund_id, r.order_id, r.amount_cents FROM idempotency_keys k "
                        "JOIN refunds r USING (refund_id) WHERE k.idempotency_key = ?",
                        (key,),
                    ).fetchone()
                    if row is not None:
                        conn.execute("ROLLBACK")
                        if (row[1], row[2]) != (req.order_id, req.amount_cents):
                            raise HttpError(
                                422,
                                f"idempotency key {key!r} was used for order {row[1]!r} "
                                f"({row[2]} cents)",
                            )
                        return {
                            "refund_id": row[0],
                            "order_id": row[1],
                            "amount_cents": row[2],
                            "replayed": True,
                        }
                refund_id = f"re_{uuid.uuid4().hex[:20]}"
                conn.execute(
                    f"INSERT INTO refunds ({REFUND_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        refund_id,
                        req.order_id,
                        req.amount_cents,
                        req.idempotency_key,
                        call,
                        time.time(),
                    ),
                )
                if key is not None:
                    conn.execute(
                        "INSERT INTO idempotency_keys (idempotency_key, refund_id) VALUES (?, ?)",
                        (key, refund_id),
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return {
            "refund_id": refund_id,
            "order_id": req.order_id,
            "amount_cents": req.amount_cents,
            "replayed": False,
        }

    def refunds(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(f"SELECT {REFUND_COLUMNS} FROM refunds ORDER BY seq")
            return [row_to_refund(r) for r in rows.fetchall()]

    def count(self, order_id: str | None) -> int:
        with self._lock:
            if order_id is None:
                row = self._conn.execute("SELECT COUNT(*) FROM refunds").fetchone()
            else:
                row = self._conn.execute(
                    "SELECT COUNT(*) FROM refunds WHERE order_id = ?", (order_id,)
                ).fetchone()
            return int(row[0])
