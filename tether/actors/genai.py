"""A session's model calls as OpenTelemetry GenAI client spans and metrics.

Each call a session makes to its model (each attempt: a retried call is several) is a span
``chat {model}`` of kind CLIENT, a child of the model effect's span, with the GenAI semantic
conventions' attributes: ``gen_ai.operation.name`` (``chat``), ``gen_ai.provider.name``,
``gen_ai.request.model``; from the answer's ``tether.Usage``, ``gen_ai.response.model``,
``gen_ai.response.id``, ``gen_ai.response.finish_reasons`` and ``gen_ai.usage.*`` token counts;
``error.type`` when it fails. The two GenAI client metrics, ``gen_ai.client.operation.duration``
(s) and ``gen_ai.client.token.usage`` ({token}, by ``gen_ai.token.type``), carry the same
attribute names. A decision replayed from the ledger makes no call, so no span.

``gen_ai.provider.name`` replaced ``gen_ai.system`` in the conventions (semconv 1.37); both are
set, to the same value, for backends that still read the older name. The provider is the
model's ``provider`` attribute (``openai``, ``anthropic`` for tether's adapters), else its
class name; the request model is its ``model`` attribute, when it is a string.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace

from tether.actors.model import Decision, Model, ModelRequest, Usage
from tether.otel import meter, tracer, tracing_enabled

OPERATION = "chat"

duration = meter.create_histogram(
    "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration"
)
token_usage = meter.create_histogram(
    "gen_ai.client.token.usage",
    unit="{token}",
    description="number of input and output tokens used",
)


def request_attributes(model: Model) -> dict[str, str]:
    """What is known of a call before it is made: operation, provider and requested model."""
    provider = getattr(model, "provider", None)
    if not isinstance(provider, str) or not provider:
        provider = type(model).__name__
    attributes = {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,
    }
    requested = getattr(model, "model", None)
    if isinstance(requested, str) and requested:
        attributes["gen_ai.request.model"] = requested
    return attributes


def response_attributes(usage: Usage | None) -> dict[str, Any]:
    """The span attributes of an answer, from what the provider reported (nothing unknown)."""
    if usage is None:
        return {}
    out: dict[str, Any] = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    }
    if usage.cache_read_input_tokens:
        out["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_input_tokens
    if usage.cache_creation_input_tokens:
        out["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_creation_input_tokens
    if usage.model:
        out["gen_ai.response.model"] = usage.model
    if usage.response_id:
        out["gen_ai.response.id"] = usage.response_id
    if usage.finish_reason:
        out["gen_ai.response.finish_reasons"] = (usage.finish_reason,)
    return out


async def decide(model: Model, request: ModelRequest) -> Decision:
    """``model.decide(request)``, observed (see the module docstring)."""
    attributes = request_attributes(model)
    started = time.monotonic()
    if not tracing_enabled():
        try:
            decision = await model.decide(request)
        except Exception as exc:
            _record(attributes, None, exc, started)
            raise
        _record(attributes, decision.usage, None, started)
        return decision
    name = f"{OPERATION} {attributes.get('gen_ai.request.model', '')}".rstrip()
    with tracer.start_as_current_span(
        name,
        kind=trace.SpanKind.CLIENT,
        attributes={**attributes, "tether.session_id": request.session_id},
    ) as span:
        try:
            decision = await model.decide(request)
        except Exception as exc:
            span.set_attribute("error.type", _error_type(exc))
            _record(attributes, None, exc, started)
            raise
        span.set_attributes(response_attributes(decision.usage))
        _record(attributes, decision.usage, None, started)
        return decision


def _record(
    attributes: Mapping[str, str], usage: Usage | None, error: Exception | None, started: float
) -> None:
    common = dict(attributes)
    if usage is not None and usage.model:
        common["gen_ai.response.model"] = usage.model
    if error is not None:
        common["error.type"] = _error_type(error)
    duration.record(time.monotonic() - started, common)
    if usage is not None:
        token_usage.record(usage.input_tokens, {**common, "gen_ai.token.type": "input"})
        token_usage.record(usage.output_tokens, {**common, "gen_ai.token.type": "output"})


def _error_type(exc: BaseException) -> str:
    """``error.type``: the fully qualified class name of the provider's own error when tether
    sorted one into its taxonomy (``openai.InternalServerError`` rather than
    ``tether.errors.TransientToolError``), else of the exception."""
    cls = type(exc.__cause__ if exc.__cause__ is not None else exc)
    return f"{cls.__module__}.{cls.__qualname__}"
