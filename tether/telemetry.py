"""Logs, traces and metrics, on structlog and the OpenTelemetry API.

With no OpenTelemetry SDK configured, the API hands out no-op tracers and meters, so the calls
below cost next to nothing; a user who configures an SDK gets spans and metrics with no code
change. Spans are only started when the active tracer provider records them
(``tracing_enabled``). Tracer and meter are tether's instrumentation scope (``tether.otel``).
"""

from __future__ import annotations

from typing import Any

import structlog
from opentelemetry import trace

from tether.logs import TetherLogger, iso_time
from tether.otel import meter as meter
from tether.otel import tracer as tracer
from tether.otel import tracing_enabled as tracing_enabled

log: Any = TetherLogger()  # structlog when the app configured it, else `logging` (logs.py)

# Units are UCUM ("s", and "{message}"-style annotations for counts); attributes are named as
# on the spans ("tether.tool", "tether.decision", ...), so a metric and a span can be joined.
messages_handled = meter.create_counter(
    "tether.messages.handled", unit="{message}", description="messages processed and committed"
)
redeliveries = meter.create_counter(
    "tether.messages.redelivered", unit="{message}", description="deliveries after a failed attempt"
)
dead_letters = meter.create_counter(
    "tether.messages.dead_lettered", unit="{message}", description="messages moved to dead letters"
)
queue_age = meter.create_histogram(
    "tether.messages.queue_age",
    unit="s",
    description="time from enqueue to the start of processing",
)
in_flight = meter.create_up_down_counter(
    "tether.messages.in_flight", unit="{message}", description="messages being handled right now"
)
commit_size = meter.create_histogram(
    "tether.commit.writes", unit="{write}", description="writes per group commit"
)
activations = meter.create_counter(
    "tether.actors.activated", unit="{activation}", description="actor activations (incl. recovery)"
)
passivations = meter.create_counter(
    "tether.actors.passivated", unit="{passivation}", description="idle actors moved out of memory"
)
stale_commits = meter.create_counter(
    "tether.commits.stale",
    unit="{commit}",
    description="commits rejected for a stale fencing token",
)
effects_run = meter.create_counter(
    "tether.effects.calls", unit="{call}", description="tool and model calls made (each attempt)"
)
effects_replayed = meter.create_counter(
    "tether.effects.replayed",
    unit="{effect}",
    description="effects answered from their receipt, not called",
)
effects_quarantined = meter.create_counter(
    "tether.effects.quarantined", unit="{effect}", description="ambiguous effects held for a person"
)
escalations = meter.create_counter(
    "tether.approvals.requested",
    unit="{request}",
    description="calls held for a person (escalations)",
)
approval_decisions = meter.create_counter(
    "tether.approvals.decisions", unit="{decision}", description="approval decisions recorded"
)
approval_latency = meter.create_histogram(
    "tether.approvals.latency", unit="s", description="time from request to final decision"
)
breaker_transitions = meter.create_counter(
    "tether.breakers.transitions", unit="{transition}", description="circuit breaker state changes"
)
loop_detections = meter.create_counter(
    "tether.loops.detected", unit="{detection}", description="loop patterns detected in sessions"
)


_msg_id_var: Any = None  # the ContextVar structlog binds ``msg_id`` with, once known


def bind_msg_id(msg_id: str) -> None:
    """``structlog.contextvars.bind_contextvars(msg_id=msg_id)`` at the cost of one
    ``ContextVar.set`` (it is called once per message). structlog keeps one ContextVar per key
    for the life of the process; the first binding hands it over (``Token.var``)."""
    global _msg_id_var
    if _msg_id_var is None:
        _msg_id_var = structlog.contextvars.bind_contextvars(msg_id=msg_id)["msg_id"].var
    else:
        _msg_id_var.set(msg_id)


# Fields of guard events that are times (seconds since the epoch, on the runtime's clock):
# logged, and added to spans, in ISO 8601.
_TIMES = frozenset({"at", "until", "deadline"})


def span_event(name: str, fields: dict[str, object]) -> None:
    """A span event ``tether.{name}`` with ``fields`` on the active span, if it records."""
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(f"tether.{name}", _attributes(fields))


def guard_event(name: str, level: str = "warning", **fields: object) -> None:
    """A guard's state change (a breaker trip, a loop detection, an approval requested): a log
    event and, inside a recorded span (the effect's), a span event with the same fields."""
    fields = {
        k: iso_time(v) if k in _TIMES and isinstance(v, int | float) else v
        for k, v in fields.items()
    }
    getattr(log, level)(name, **fields)
    span_event(name, fields)


def supervision_event(name: str, actor_id: str, **fields: object) -> None:
    """Every restart, stop, escalation and backoff: a structlog event and, inside a recorded
    span, a span event with the same fields."""
    log.info(name, actor_id=actor_id, **fields)
    span_event(name, {"actor_id": actor_id, **fields})


def _attributes(fields: dict[str, object]) -> dict[str, str]:
    """A log event's fields as span event attributes, named as the spans' own are."""
    return {f"tether.{k}": str(v) for k, v in fields.items()}


# Damaged store rows this process has already logged: scans and listings read them again and
# again, and one error naming the row is enough (reading it by its key still raises each time).
_reported_corrupt: set[tuple[str, str, str]] = set()


def report_corrupt(event: str, key: str, error: Exception, **fields: object) -> None:
    """Log, once per process (per row and error), a damaged row that was left out."""
    seen = (event, key, str(error))
    if seen in _reported_corrupt:
        return
    _reported_corrupt.add(seen)
    log.error(event, error=str(error), **fields)
