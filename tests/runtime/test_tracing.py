"""One trace per task: the W3C trace context stored with every message makes a task's steps,
effects, model calls and approvals one trace, linked to the caller's span, across sends
between actors, restarts and processes. The workloads run in child processes with the
OpenTelemetry SDK (``tests.runtime.trace_program``); the no-SDK cases run here, where no SDK
is installed."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry import context, trace

import tether
from tests.runtime.trace_program import (
    Later,
    Note,
    Relay,
    finished,
    spans_in,
    start_program,
)
from tether.runtime.tracing import format_traceparent, parse_traceparent

REMOTE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def named(spans: list[dict[str, Any]], name: str, **attributes: str) -> list[dict[str, Any]]:
    return [
        s
        for s in spans
        if s["name"] == name
        and all(s["attributes"].get(f"tether.{k}") == v for k, v in attributes.items())
    ]


# -- in one process -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_trace(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    d = tmp_path_factory.mktemp("one-trace")
    finished(start_program("one-trace", d / "agents.db", d / "spans.jsonl"))
    return spans_in(d / "spans.jsonl")


def test_a_tasks_steps_are_one_trace_under_the_callers_span(
    one_trace: list[dict[str, Any]],
) -> None:
    """The task's first step is a child of the span ``tell`` was called in; its continuation
    steps (the session's messages to itself) follow in the same trace, each a child of the
    step that sent it, the step delivered again after its approval included."""
    [caller] = named(one_trace, "caller")
    steps = named(one_trace, "tether.handle", actor_id="s1")
    assert len(steps) >= 4
    assert {s["trace_id"] for s in steps} == {caller["trace_id"]}
    [first] = [s for s in steps if s["attributes"]["tether.message_type"] == "UserMessage"]
    assert first["parent_id"] == caller["span_id"]
    ids = {s["span_id"] for s in steps}
    assert all(s["parent_id"] in ids for s in steps if s is not first)
    assert all(s["kind"] == "CONSUMER" for s in steps)


def test_a_tasks_model_calls_effects_and_approval_decision_are_spans_in_its_trace(
    one_trace: list[dict[str, Any]],
) -> None:
    """Every effect of the task (model decisions and tools), and the person's decision made in
    a span of their own (a console request), are in the task's trace; the decision is linked
    to the person's span and is a child of the effect that asked for it."""
    [caller] = named(one_trace, "caller")
    effects = [s for s in named(one_trace, "tether.effect") if s["trace_id"] == caller["trace_id"]]
    assert {s["attributes"]["tether.tool"] for s in effects} >= {
        "model",
        "lookup_order",
        "big_refund",
    }
    [decide] = named(one_trace, "tether.approval.decide")
    [console] = named(one_trace, "console")
    assert decide["trace_id"] == caller["trace_id"] != console["trace_id"]
    assert decide["links"] == [console["span_id"]]
    asked = {s["span_id"]: s for s in effects}[decide["parent_id"]]
    assert asked["attributes"]["tether.tool"] == "big_refund"


def test_a_send_between_actors_continues_the_senders_trace(
    one_trace: list[dict[str, Any]],
) -> None:
    [forwarder] = named(one_trace, "forwarder")
    [forward] = named(one_trace, "tether.handle", actor_id="a1", message_type="Forward")
    [deposit] = named(one_trace, "tether.handle", actor_id="a2", message_type="Deposit")
    assert forward["parent_id"] == forwarder["span_id"]
    assert deposit["parent_id"] == forward["span_id"]
    assert deposit["trace_id"] == forwarder["trace_id"]


def test_a_message_sent_outside_any_span_gets_a_send_span_as_its_traces_root(
    one_trace: list[dict[str, Any]],
) -> None:
    asks = named(one_trace, "tether.handle", actor_id="a2", message_type="GetBalance")
    sends = {s["span_id"]: s for s in named(one_trace, "tether.send", actor_id="a2")}
    assert asks
    for step in asks:
        send = sends[step["parent_id"]]
        assert (send["kind"], send["parent_id"]) == ("PRODUCER", None)
        assert step["trace_id"] == send["trace_id"]


def test_tethers_spans_name_the_tether_instrumentation_scope_and_version(
    one_trace: list[dict[str, Any]],
) -> None:
    ours = [s for s in one_trace if s["name"].startswith("tether.")]
    assert {tuple(s["scope"]) for s in ours} == {("tether", tether.__version__)}


# -- across a SIGKILL and a restart in another process ------------------------------------------


def test_the_resumed_steps_after_a_sigkill_are_in_the_tasks_trace(tmp_path: Path) -> None:
    """A runtime is SIGKILLed while a tool of the task hangs; a new process resumes the task.
    The resumed step, its replayed model decision and the tool called again are in the trace
    of the caller's span in the killed process."""
    db, marker = tmp_path / "agents.db", tmp_path / "calling"
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    proc = start_program("start", db, first, marker)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, "the tool was never called"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)  # reaped, its pipes closed
    assert '"shipped 42"' in finished(start_program("resume", db, second)).replace("done: ", "")

    [caller] = named(spans_in(first), "caller")
    before = {s["span_id"] for s in spans_in(first)}
    resumed = spans_in(second)
    steps = named(resumed, "tether.handle", actor_id="ship-1")
    assert steps
    assert {s["trace_id"] for s in steps} == {caller["trace_id"]}
    # The step that was cut short is delivered again as a child of the span that sent it,
    # which the killed process recorded.
    [again] = [s for s in steps if s["parent_id"] in before]
    assert again["attributes"]["tether.delivery"] == "2"  # its first delivery was cut short
    effects = named(resumed, "tether.effect")
    assert {s["attributes"]["tether.tool"] for s in effects} >= {"model", "ship"}
    assert {s["trace_id"] for s in effects} == {caller["trace_id"]}
    [ship] = [s for s in effects if s["attributes"]["tether.tool"] == "ship"]
    assert ship["attributes"]["tether.replayed"] == "False"  # called again, same key


# -- without an SDK -----------------------------------------------------------------------------


def test_traceparent_round_trips_and_malformed_values_are_ignored() -> None:
    ctx = parse_traceparent(REMOTE)
    assert ctx is not None
    assert (ctx.trace_id, ctx.span_id, ctx.is_remote) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        True,
    )
    assert format_traceparent(ctx) == REMOTE
    for bad in (
        None,
        "",
        "garbage",
        REMOTE.upper(),
        "ff" + REMOTE[2:],
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
        REMOTE + "-extra",  # version 00 has exactly four fields
        REMOTE.replace("-01", "-1x"),
    ):
        assert parse_traceparent(bad) is None, bad
    # A later version may append fields; the first four are read.
    assert parse_traceparent("01" + REMOTE[2:] + "-what-comes") is not None


@pytest.mark.anyio
async def test_without_an_sdk_a_remote_callers_trace_is_passed_on_through_every_send() -> None:
    """No SDK records anything here, but a caller in a remote trace (a request whose
    traceparent header the app extracted) still gets its trace stored with the message, and
    with the messages that message's step sends: the next process with an SDK joins it."""
    remote = parse_traceparent(REMOTE)
    assert remote is not None
    async with tether.Runtime(":memory:") as rt:
        r1, r2 = await rt.spawn(Relay, "r1"), await rt.spawn(Relay, "r2")
        token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(remote)))
        try:
            await r1.tell(Later(to="r2"))
            await r1.tell(Note(), delay=3600)
        finally:
            context.detach(token)
        await r2.tell(Note(), delay=3600)  # outside any trace
        with anyio.fail_after(30):
            while len(waiting := await rt.store.list_messages("r2", 10)) < 2:
                await anyio.sleep(0.01)
        [kept] = await rt.store.list_messages("r1", 10)
    assert kept.traceparent == REMOTE
    assert sorted(m.traceparent or "" for m in waiting) == ["", REMOTE]
