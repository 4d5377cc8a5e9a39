"""Workloads for the one-trace-per-task tests, each in a process of its own (an OpenTelemetry
SDK provider, once set, stays set for the process). Every finished span is written at once as
one JSON line to the file named on the command line, so a process SIGKILLed mid-task leaves
the spans it finished.

    python -m tests.runtime.trace_program one-trace DB SPANS
    python -m tests.runtime.trace_program start DB SPANS MARKER   # hangs in a tool until killed
    python -m tests.runtime.trace_program resume DB SPANS         # finishes the task
    python -m tests.runtime.trace_program genai DB SPANS METRICS  # the real openai SDK
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import tether
from tether.testing import ScriptedModel

PHASE = ["one-trace"]  # which run this process is (the hanging tool looks)
MARKER: list[Path] = []


class LinesExporter(SpanExporter):
    """Each span as a JSON line, flushed as it ends."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for s in spans:
            ctx = s.get_span_context()
            assert ctx is not None
            self.out.write(
                json.dumps(
                    {
                        "name": s.name,
                        "kind": s.kind.name,
                        "trace_id": f"{ctx.trace_id:032x}",
                        "span_id": f"{ctx.span_id:016x}",
                        "parent_id": f"{s.parent.span_id:016x}" if s.parent else None,
                        "links": [f"{link.context.span_id:016x}" for link in s.links],
                        "events": {e.name: dict(e.attributes or {}) for e in s.events},
                        "attributes": {k: str(v) for k, v in (s.attributes or {}).items()},
                        "scope": [s.instrumentation_scope.name, s.instrumentation_scope.version]
                        if s.instrumentation_scope
                        else None,
                    }
                )
                + "\n"
            )
        self.out.flush()
        return SpanExportResult.SUCCESS


def record_spans(path: str) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(LinesExporter(open(path, "a"))))  # noqa: SIM115
    trace.set_tracer_provider(provider)
    return provider


# -- an actor whose sends wait in the mailbox, to be looked at ----------------------------------


class Later(tether.Message):
    to: str


class Note(tether.Message):
    pass


class Relay(tether.Actor[int]):
    """Passes ``Later`` on as a ``Note`` delivered an hour from now (it stays stored)."""

    initial_state = 0

    async def handle(self, msg: Later | Note) -> None:
        if isinstance(msg, Later):
            await self.ref(msg.to).tell(Note(), delay=3600)


# -- the task that is killed mid-way ------------------------------------------------------------


@tether.tool(recovery="retry", timeout=None)
async def ship(order_id: str, idempotency_key: str) -> str:
    """Ships an order; in the first run it hangs (after saying so) until the process is
    killed."""
    if PHASE[0] == "start":
        MARKER[0].write_text("calling")
        await anyio.sleep_forever()
    return f"shipped {order_id}"


def ship_script(request: tether.ModelRequest) -> tether.ToolCall | tether.FinalAnswer:
    if request.bundle.tool_results:
        return tether.FinalAnswer(text=f"done: {request.bundle.tool_results[-1].result}")
    return tether.ToolCall(tool="ship", args={"order_id": "42"})


class ShippingAgent(tether.AgentSession):
    tools = [ship]
    model = ScriptedModel(ship_script)


async def start(db: str) -> None:
    async with tether.Runtime(db, poll_interval=0.02) as rt:
        s = await rt.spawn(ShippingAgent, "ship-1", goal="Ship orders")
        with trace.get_tracer("app").start_as_current_span("caller"):
            await s.tell(tether.UserMessage("ship order 42"), dedup_key="task-1")
        await anyio.sleep_forever()  # killed while the tool hangs


async def resume(db: str) -> None:
    async with tether.Runtime(db, poll_interval=0.02) as rt:
        with anyio.fail_after(60):
            while (info := await rt.session_info("ship-1")).status == "working":
                await anyio.sleep(0.02)
        print(f"answer={json.dumps(info.last_answer)}")


# -- one process: every kind of message -----------------------------------------------------------


async def one_trace(db: str) -> None:
    from tests.actors.session_agents import RefundAgent, first_pending
    from tests.sample_actors import Account, Forward, GetBalance

    app = trace.get_tracer("app")
    async with tether.Runtime(db, poll_interval=0.02) as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders")
        with app.start_as_current_span("caller"):
            await s.tell(tether.UserMessage("please refund order 43"), dedup_key="t")
        request = await first_pending(rt)
        with app.start_as_current_span("console"):
            await rt.approvals.decide(request.request_id, tether.Approve(by="manager"))
        await s.ask(tether.UserMessage("please refund order 43"), timeout=30, dedup_key="t")

        a1, a2 = await rt.spawn(Account, "a1"), await rt.spawn(Account, "a2")
        with app.start_as_current_span("forwarder"):
            await a1.tell(Forward(to="a2", amount=5))
        with anyio.fail_after(30):
            while await a2.ask(GetBalance(), timeout=30) != 5:  # outside any span
                await anyio.sleep(0.01)


# -- model calls on the real openai SDK, against a local provider ---------------------------------


async def genai(db: str) -> None:
    from tests.models.agents import OpenAIAgent, use_openai
    from tests.models.servers import ProviderServer
    from tests.models.shapes import openai_call, openai_completion, openai_server_error

    script = [
        openai_server_error(),  # not carried out: the call is made again
        openai_completion(None, openai_call("call_1", "lookup_order", {"order_id": "42"})),
        openai_completion("Order 42 is delivered.", prompt_tokens=120, completion_tokens=9),
    ]
    with ProviderServer(script) as server:
        client = use_openai(server.url)
        try:
            async with tether.Runtime(db, poll_interval=0.02) as rt:
                s = await rt.spawn(OpenAIAgent, "o1", goal="Answer about orders")
                with trace.get_tracer("app").start_as_current_span("caller"):
                    await s.ask(tether.UserMessage("where is order 42"), timeout=60)
        finally:
            await client.close()


def record_metrics() -> Any:
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader


def dump_metrics(reader: Any, path: str) -> None:
    """Each metric: its unit, scope, and the attributes of each of its points."""
    out: dict[str, Any] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = {
                    "unit": m.unit,
                    "scope": [sm.scope.name, sm.scope.version],
                    "points": [
                        {k: str(v) for k, v in (p.attributes or {}).items()}
                        for p in m.data.data_points
                    ],
                }
    Path(path).write_text(json.dumps(out))


def main(argv: list[str]) -> None:
    scenario, db, spans = argv[:3]
    PHASE[0] = scenario
    provider = record_spans(spans)
    if scenario == "one-trace":
        anyio.run(one_trace, db)
    elif scenario == "genai":
        reader = record_metrics()
        anyio.run(genai, db)
        dump_metrics(reader, argv[3])
    elif scenario == "start":
        MARKER.append(Path(argv[3]))
        anyio.run(start, db)
    elif scenario == "resume":
        anyio.run(resume, db)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    provider.shutdown()


def start_program(*args: object) -> subprocess.Popen[bytes]:
    """This program, as a child process of a test, run with ``args``."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.trace_program", *map(str, args)],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finished(proc: subprocess.Popen[bytes]) -> str:
    """What a child of ``start_program`` printed, once it exited successfully."""
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err.decode()[-3000:]
    return out.decode()


def spans_in(path: Path) -> list[dict[str, Any]]:
    """The spans a program wrote to ``path``."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    main(sys.argv[1:])
