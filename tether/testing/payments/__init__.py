"""A fake payments service in its own process, for crash tests that count what the world saw.

An agent that refunds an order and is SIGKILLed mid-call leaves the world in one of three
states: the refund never reached the service, it was recorded once, or (after a careless retry)
it was recorded twice. This module makes those outcomes countable. The service runs as a
separate process and persists every refund in its own SQLite file, so the counts survive the
agent and can be read after everything else has died.

Run it directly::

    python -m tether.testing.payments serve --db refunds.db [--port 0] [--ignore-keys]
        [--delay SECONDS] [--host 127.0.0.1]

It prints exactly one line, ``listening on http://HOST:PORT``, then serves JSON (``--host``:
the address it listens on; ``0.0.0.0`` for every address of the machine, as a test of
several network namespaces needs):

``POST /refunds`` ``{order_id, amount_cents, idempotency_key?}``
    Records a refund and answers ``{refund_id, order_id, amount_cents, replayed}``. When the
    service honors idempotency keys (the default) and the key was seen before, it records
    nothing and answers the stored refund with ``replayed: true`` (a key reused with a
    different order or amount is a 422). With ``--ignore-keys`` every call records a refund.
``GET /refunds``
    Every refund, oldest first, as a JSON list.
``GET /refunds/count?order_id=X``
    ``{"order_id": X, "count": n}`` (all refunds when ``order_id`` is left out).
``GET /calls``
    ``{"calls": n}``: how many ``POST /refunds`` this process has received.
``POST /faults``
    Replaces the fault plan. Calls are numbered by the server, 1-based, in arrival order of
    ``POST /refunds`` since the process started::

        {"fail_calls": [1, 2], "status": 503,          # answer these calls with an error
         "delay_calls": {"3": 1.5},                     # record, wait, then answer
         "delay_before_calls": {"4": 1.5},              # wait, then record and answer
         "hang_calls": [5], "hang_before_calls": [6]}   # record (or not) and never answer

    A failed call records nothing. A delay (and ``--delay``, which applies to every call)
    happens *after* the refund is durably recorded and *before* the answer, so a client killed
    or timing out during the wait leaves a recorded refund: the ambiguous case. The
    ``*_before`` variants wait before anything is recorded.

Errors are JSON ``{"error": "..."}`` with a non-2xx status; 429 and 5xx are transient.

For tests: :class:`PaymentsService` starts and stops the process, :class:`PaymentsClient` is
a small async client raising :class:`PaymentsError`, and :func:`refunds` /
:func:`refund_count` read the SQLite file directly, with or without the process running.
"""

from tether.testing.payments.cli import main as main
from tether.testing.payments.client import PaymentsClient as PaymentsClient
from tether.testing.payments.client import PaymentsError as PaymentsError
from tether.testing.payments.database import refund_count as refund_count
from tether.testing.payments.database import refunds as refunds
from tether.testing.payments.service import PaymentsService as PaymentsService

__all__ = (
    "PaymentsClient",
    "PaymentsError",
    "PaymentsService",
    "main",
    "refund_count",
    "refunds",
)
