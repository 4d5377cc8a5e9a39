"""Runs a small workload with the OpenTelemetry SDK's in-memory exporters and a capturing
structlog configuration, and prints what was recorded as one JSON line. Run in its own process
by tests/runtime/test_telemetry.py (an SDK provider, once set, stays set for the process)."""

from __future__ import annotations

import json
import sys
from collections.abc import MutableMapping
from typing import Any

import anyio
import structlog
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tether

LOGS: list[dict[str, Any]] = []


def capture(_: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
    LOGS.append({k: str(v) for k, v in event_dict.items()})
    return ""


def setup() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            capture,
        ],
        logger_factory=structlog.ReturnLoggerFactory(),
    )
    return exporter, reader


async def workload(db: str) -> None:
    from tests.actors.session_agents import RefundAgent, first_pending
    from tests.runtime.guard_actors import Call, Caller

    async with tether.Runtime(db, poll_interval=0.02) as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders")
        await s.tell(tether.UserMessage("please refund order 43"), dedup_key="t")
        request = await first_pending(rt)
        await rt.approvals.decide(request.request_id, tether.Approve(by="manager"))
        await s.ask(tether.UserMessage("please refund order 43"), timeout=10, dedup_key="t")
        c = await rt.spawn(Caller, "c1")
        for i in range(4):  # three failures trip the breaker; the fourth is refused
            await c.ask(Call(n=i), timeout=5)


def main(db: str) -> None:
    exporter, reader = setup()
    anyio.run(workload, db)
    spans = [
        {"name": s.name, "attributes": {k: str(v) for k, v in (s.attributes or {}).items()},
         "events": [e.name for e in s.events]}
        for s in exporter.get_finished_spans()
    ]  # fmt: skip
    data = reader.get_metrics_data()
    names: dict[str, float] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                total = 0.0
                for p in m.data.data_points:
                    total += float(getattr(p, "value", getattr(p, "count", 0)))
                names[m.name] = total
    print(json.dumps({"spans": spans, "metrics": names, "logs": LOGS}))


if __name__ == "__main__":
    main(sys.argv[1])
