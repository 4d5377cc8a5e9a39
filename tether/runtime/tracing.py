"""One trace per task: the W3C trace context that travels with every message.

Each message is stored with the ``traceparent`` it was sent in (``StoredMessage.traceparent``)
and every step that handles it runs in a span whose parent is that context. So a task is one
trace: the caller's span, the step of each message the task sends (a session's continuation
steps, sends between actors, notices), and within each step its model calls, effects,
approvals and retries — in whichever process the step runs, after however many restarts,
since the context is read back from the store with the message.

What a send carries, in order of preference:

1. the active span's context, when there is one (the caller's own span outside an actor;
   the step's or the effect's span inside one): the message's steps are its children;
2. inside a step with no active span (no SDK in this process), the context the step's own
   message came with: a process that records nothing still passes the trace on;
3. with an SDK and no span at all, a ``tether.send`` span started for the send (the root of
   a new trace), so that the message's steps share one trace id even across restarts;
4. otherwise none: the message's steps start a trace of their own, as a message stored
   before schema version 6 does.

With no SDK this costs one context lookup per send (about 0.2 µs), and nothing per delivery.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import structlog
from opentelemetry import context as otel_context
from opentelemetry import trace

from tether import telemetry
from tether.store.records import StoredMessage

_HEX = frozenset("0123456789abcdef")


def format_traceparent(ctx: trace.SpanContext) -> str:
    """``ctx`` as a W3C ``traceparent`` header value (version 00)."""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parse_traceparent(value: str | None) -> trace.SpanContext | None:
    """The remote span context a ``traceparent`` names, or None for a missing or malformed
    one (a damaged value only costs the message its link to the trace, never its delivery).

    Follows W3C Trace Context: lowercase hex, version ``ff`` invalid, all-zero ids invalid; a
    later version may append fields after the four of version 00."""
    if not value or len(value) < 55:
        return None
    parts = value.split("-")
    if len(parts) < 4 or (parts[0] == "00" and len(parts) != 4):
        return None
    version, trace_id, span_id, flags = parts[:4]
    if (
        len(version) != 2
        or version == "ff"
        or len(trace_id) != 32
        or len(span_id) != 16
        or len(flags) != 2
        or not set(version + trace_id + span_id + flags) <= _HEX
    ):
        return None
    tid, sid = int(trace_id, 16), int(span_id, 16)
    if tid == 0 or sid == 0:
        return None
    return trace.SpanContext(
        trace_id=tid,
        span_id=sid,
        is_remote=True,
        trace_flags=trace.TraceFlags(int(flags, 16) & trace.TraceFlags.SAMPLED),
    )


def _active() -> trace.SpanContext | None:
    """The active span's context, if there is one."""
    attached = otel_context.get_current()
    if not attached:  # nothing attached at all: the usual case with no SDK, and the cheapest
        return None
    ctx = trace.get_current_span(attached).get_span_context()
    return ctx if ctx.is_valid else None


def current() -> str | None:
    """The active span's context as a ``traceparent``, or None outside any span."""
    ctx = _active()
    return None if ctx is None else format_traceparent(ctx)


def outgoing(inbound: str | None, in_step: bool, actor_id: str, message_type: str) -> str | None:
    """The ``traceparent`` to store with a message being sent to ``actor_id`` now.

    ``in_step``: the send is made by a step, whose own message came with ``inbound``. The
    order of preference is the module docstring's."""
    ctx = _active()
    if ctx is not None:
        return format_traceparent(ctx)
    if in_step:
        return inbound
    if telemetry.tracing_enabled():
        attributes = {"tether.actor_id": actor_id, "tether.message_type": message_type}
        with telemetry.tracer.start_as_current_span(
            "tether.send", kind=trace.SpanKind.PRODUCER, attributes=attributes
        ) as span:
            return format_traceparent(span.get_span_context())
    return None


def parent_context(traceparent: str | None) -> otel_context.Context:
    """The context a step's span starts in: the message's trace when it has one, else an
    empty context (a new trace), never whatever span happened to be active when the actor's
    task was started."""
    remote = parse_traceparent(traceparent)
    return otel_context.Context() if remote is None else _under(remote)


def _under(remote: trace.SpanContext) -> otel_context.Context:
    """A context holding nothing but the remote span ``remote``, to start spans under it."""
    return trace.set_span_in_context(trace.NonRecordingSpan(remote), otel_context.Context())


def span_in_trace_of(
    name: str, traceparent: str | None, attributes: dict[str, Any]
) -> AbstractContextManager[trace.Span]:
    """A span for work done outside the task that belongs to its trace (a person deciding an
    approval in the console or the CLI): a child of the task's context ``traceparent``,
    linked to the caller's own span if there is one. Without a ``traceparent`` (a record
    stored before traces were kept), a child of the caller's span."""
    remote = parse_traceparent(traceparent)
    if remote is None:
        return telemetry.tracer.start_as_current_span(name, attributes=attributes)
    caller = trace.get_current_span().get_span_context()
    return telemetry.tracer.start_as_current_span(
        name,
        context=_under(remote),
        links=[trace.Link(caller)] if caller.is_valid else None,
        attributes=attributes,
    )


@contextlib.contextmanager
def handling(actor_id: str, m: StoredMessage) -> Iterator[None]:
    """The span of one delivery of ``m`` (with tracing on): a child of the context the message
    was sent in, whatever process sent it and however often it was delivered before, so that
    every attempt at a task's steps is in its one trace. Every log line meanwhile carries the
    trace id."""
    attributes = {
        "tether.actor_id": actor_id,
        "tether.msg_id": m.msg_id,
        "tether.message_type": m.type,
    }
    with telemetry.tracer.start_as_current_span(
        "tether.handle",
        context=parent_context(m.traceparent),
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
    ) as span:
        trace_id = span.get_span_context().trace_id
        structlog.contextvars.bind_contextvars(trace_id=f"{trace_id:032x}")
        try:
            yield
        finally:
            structlog.contextvars.unbind_contextvars("trace_id")
            # Which delivery of the message this was (counted once claimed): a step run
            # again after a failure or a crash is another span of the same trace.
            span.set_attribute("tether.delivery", m.attempts)
