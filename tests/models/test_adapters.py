"""Both provider adapters, each on its real SDK, against a local server speaking its wire format.

Every test runs once per provider (``openai``, ``anthropic``): an agent session on
``tether.models.openai.OpenAIChatModel`` or ``tether.models.anthropic.AnthropicModel``, whose
SDK client talks over HTTP to a ``ProviderServer`` on 127.0.0.1 answering with the provider's
own response shapes. What the server received is the provider's view of what was asked; the
tool's own file is the world's view of what ran.
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import msgspec
import pytest

import tether
from tests.models.agents import CONFIG, tool_runs
from tests.models.providers import (
    PROVIDERS,
    Provider,
    journaled_decisions,
    model_effects,
    session_on,
)
from tests.models.servers import ProviderServer, Reply
from tether.actors.model import Decision
from tether.runtime.clock import SystemClock
from tether.store.records import EffectRecord

pytestmark = pytest.mark.anyio


@pytest.fixture(params=PROVIDERS, ids=lambda p: p.name)
def provider(request: pytest.FixtureRequest) -> Provider:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def tool_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = str(tmp_path / "tool-runs.jsonl")
    monkeypatch.setattr(CONFIG, "tool_log", path)
    return path


class RecordingClock(SystemClock):
    """The real clock, remembering every wait the runtime asked for."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await super().sleep(seconds)


async def run_task(session: tether.ActorRef, text: str) -> tether.TaskResult:
    """The task's result, finished or not (a task that did not finish raises ``TaskFailed``
    with the same result): these tests read its answer and, through ``GetSessionInfo``, its
    outcome."""
    try:
        result: tether.TaskResult = await session.ask(tether.UserMessage(text), timeout=20)
    except tether.TaskFailed as failed:
        return failed.result  # type: ignore[no-any-return]
    return result


def serve(*replies: Reply) -> ProviderServer:
    return ProviderServer(list(replies))


# -- answers -------------------------------------------------------------------------------------


async def test_a_plain_answer_finishes_the_task_and_its_token_usage_is_journaled(
    provider: Provider, tmp_path: Path
) -> None:
    with serve(provider.answer("Order 42 was delivered.")) as server:
        async with session_on(provider, server, tmp_path) as (rt, s):
            text = (await run_task(s, "where is order 42?")).answer
            info = await s.ask(tether.GetSessionInfo(), timeout=5)
            [decided] = await journaled_decisions(rt)
            [effect] = await model_effects(rt)
        [request] = server.received
    assert text == "Order 42 was delivered."
    assert info.outcome == "finished"
    assert isinstance(decided, tether.FinalAnswer)
    usage = decided.usage
    assert usage is not None
    prompt, completion = (82, 17) if provider.name == "openai" else (1021, 86)
    assert (usage.input_tokens, usage.output_tokens) == (prompt, completion)
    assert usage.total_tokens == prompt + completion
    assert usage.finish_reason == ("stop" if provider.name == "openai" else "end_turn")
    assert usage.response_id
    assert usage.model  # the provider's ids, for a trace
    # The same figures are in the ledger's receipt of the model call, and in the session.
    assert effect.result is not None
    assert msgspec.msgpack.decode(effect.result, type=Decision) == decided
    assert info.usage.input_tokens == prompt
    assert info.usage.output_tokens == completion
    assert request.headers["content-type"] == "application/json"


async def test_the_session_sums_the_usage_of_its_decisions(
    provider: Provider, tmp_path: Path, tool_log: str
) -> None:
    with serve(
        provider.calls("Let me look.", ("call_1", "lookup_order", {"order_id": "42"})),
        provider.answer("Delivered."),
    ) as server:
        async with session_on(provider, server, tmp_path) as (rt, s):
            await run_task(s, "where is order 42?")
            info = await s.ask(tether.GetSessionInfo(), timeout=5)
            decisions = await journaled_decisions(rt)
    each = [d.usage for d in decisions]
    assert all(u is not None for u in each)
    assert info.usage.input_tokens == sum(u.input_tokens for u in each if u)
    assert info.usage.total_tokens == sum(u.total_tokens for u in each if u)


# -- tool calls ------------------------------------------------------------------------------


async def test_a_tool_call_goes_back_as_the_providers_own_tool_call_and_result_under_its_id(
    provider: Provider, tmp_path: Path, tool_log: str
) -> None:
    with serve(
        provider.calls(None, ("call_abc123", "lookup_order", {"order_id": "42"})),
        provider.answer("Order 42 was delivered."),
    ) as server:
        async with session_on(provider, server, tmp_path) as (rt, s):
            text = (await run_task(s, "where is order 42?")).answer
            [call, _] = await journaled_decisions(rt)
        first, second = server.bodies()
    assert text == "Order 42 was delivered."
    assert isinstance(call, tether.ToolCall)
    assert call.call_id == "call_abc123"  # journaled
    assert provider.sent_calls(first) == []
    assert provider.sent_calls(second) == [("call_abc123", "lookup_order", {"order_id": "42"})]
    assert provider.results(second) == [("call_abc123", "order 42: delivered", False)]
    # Native tool calling, nothing retold as text: no message mentions the result but the
    # tool result itself.
    assert str(second).count("order 42: delivered") == 1
    assert [r["order_id"] for r in tool_runs(tool_log)] == ["42"]


async def test_parallel_tool_calls_all_run_in_order_and_each_is_answered_under_its_id(
    provider: Provider, tmp_path: Path, tool_log: str
) -> None:
    with serve(
        provider.calls(
            "I will look both up.",
            ("call_1", "lookup_order", {"order_id": "42"}),
            ("call_2", "lookup_order", {"order_id": "43"}),
        ),
        provider.answer("42 is delivered, 43 is in transit."),
    ) as server:
        async with session_on(provider, server, tmp_path) as (rt, s):
            text = (await run_task(s, "where are orders 42 and 43?")).answer
            [decided, _] = await journaled_decisions(rt)
            effects = [e for e in await rt.store.find_effects(actor_id="s1") if e.tool != "model"]
        _, second = server.bodies()
    assert text == "42 is delivered, 43 is in transit."
    assert isinstance(decided, tether.ToolCalls)
    assert [c.call_id for c in decided.calls] == ["call_1", "call_2"]
    # Two effects, each with its own index and key, both through the ledger.
    assert [(e.idx, e.status) for e in effects] == [(1, "done"), (2, "done")]
    assert len({e.key for e in effects}) == 2
    assert [r["order_id"] for r in tool_runs(tool_log)] == ["42", "43"]
    assert provider.sent_calls(second) == [
        ("call_1", "lookup_order", {"order_id": "42"}),
        ("call_2", "lookup_order", {"order_id": "43"}),
    ]
    assert provider.results(second) == [
        ("call_1", "order 42: delivered", False),
        ("call_2", "order 43: in transit", False),
    ]


DEEP = '{"order_id": ' + "[" * 300 + "]" * 300 + "}"


@pytest.mark.parametrize(
    ("arguments", "told"),
    [
        ('{"order_id": 42', 'the arguments are not valid JSON: .*\\{"order_id": 42$'),
        # Valid JSON nested deeper than any value tether stores: recorded as they came, the
        # model's decision could not be, and the task ended on it ("the model failed").
        (DEEP, "the arguments cannot be stored: it nests lists, dicts or structs more than 256"),
    ],
    ids=["not-json", "too-deep"],
)
async def test_arguments_that_cannot_be_used_go_back_to_the_model_as_the_calls_result(
    provider: Provider, tmp_path: Path, tool_log: str, arguments: str, told: str
) -> None:
    with serve(
        provider.calls(None, ("call_bad", "lookup_order", arguments)),
        provider.answer("Sorry, which order?"),
    ) as server:
        async with session_on(provider, server, tmp_path) as (_, s):
            text = (await run_task(s, "where is order 42?")).answer
            info = await s.ask(tether.GetSessionInfo(), timeout=5)
        _, second = server.bodies()
    assert text == "Sorry, which order?"
    assert info.outcome == "finished"  # not a crash
    [(call_id, result, is_error)] = provider.results(second)
    assert call_id == "call_bad"
    assert is_error
    assert re.match(f"Invalid call: {told}", result), result  # the model sees what it sent
    assert tool_runs(tool_log) == []  # nothing ran


async def test_two_malformed_calls_in_a_row_escalate_as_invalid_arguments_do(
    provider: Provider, tmp_path: Path, tool_log: str
) -> None:
    with serve(
        provider.calls(None, ("call_1", "lookup_order", "{not json")),
        provider.calls(None, ("call_2", "lookup_order", "[42]")),
    ) as server:
        async with session_on(provider, server, tmp_path) as (_, s):
            text = (await run_task(s, "where is order 42?")).answer
            info = await s.ask(tether.GetSessionInfo(), timeout=5)
    assert info.outcome.startswith("stopped: escalated: invalid tool call twice in a row")
    assert "the arguments are not a JSON object" in text
    assert tool_runs(tool_log) == []


async def test_several_invalid_calls_in_one_answer_count_as_one_correction(
    provider: Provider, tmp_path: Path, tool_log: str
) -> None:
    with serve(
        provider.calls(
            None, ("call_1", "lookup_order", "{broken"), ("call_2", "lookup_order", "[42]")
        ),
        provider.calls(None, ("call_3", "lookup_order", {"order_id": "42"})),
        provider.answer("Order 42 was delivered."),
    ) as server:
        async with session_on(provider, server, tmp_path) as (_, s):
            text = (await run_task(s, "where is order 42?")).answer
    # The model had no feedback between its two broken calls: it gets its one correction.
    assert text == "Order 42 was delivered."
    assert [r["order_id"] for r in tool_runs(tool_log)] == ["42"]


async def test_a_resumed_session_sends_the_call_ids_the_provider_issued(
    provider: Provider, tmp_path: Path, tool_log: str
) -> None:
    with serve(
        provider.calls(None, ("call_from_provider", "lookup_order", {"order_id": "42"})),
        provider.answer("Order 42 was delivered."),
        provider.answer("You are welcome."),
    ) as server:
        async with session_on(provider, server, tmp_path) as (_, s):
            await run_task(s, "where is order 42?")
        # A new runtime on the same store: the session is folded from its journal.
        async with session_on(provider, server, tmp_path) as (_, s):
            await run_task(s, "thanks")
        *_, third = server.bodies()
    assert provider.sent_calls(third) == [
        ("call_from_provider", "lookup_order", {"order_id": "42"})
    ]
    assert provider.results(third) == [("call_from_provider", "order 42: delivered", False)]


async def test_a_task_ended_mid_answer_leaves_no_call_unanswered_in_the_next_request(
    provider: Provider, tmp_path: Path, tool_log: str
) -> None:
    with serve(
        provider.calls(None, ("call_1", "lookup_order", "{broken")),
        provider.calls(
            None,
            ("call_2", "lookup_order", "{broken again"),  # the second invalid answer: escalated
            ("call_3", "lookup_order", {"order_id": "42"}),  # so this one is never made
        ),
        provider.answer("Hello again."),
    ) as server:
        async with session_on(provider, server, tmp_path) as (_, s):
            first = (await run_task(s, "where is order 42?")).answer
            second = (await run_task(s, "hello?")).answer
        *_, request = server.bodies()
    assert "invalid tool call twice in a row" in first
    assert second == "Hello again."
    assert tool_runs(tool_log) == []
    # Every call sent back has its result; the call never made is not sent at all.
    assert [c[0] for c in provider.sent_calls(request)] == ["call_1", "call_2"]
    assert [r[0] for r in provider.results(request)] == ["call_1", "call_2"]


# -- errors ----------------------------------------------------------------------------------


async def test_a_429_is_retried_after_the_servers_retry_after(
    provider: Provider, tmp_path: Path
) -> None:
    clock = RecordingClock()
    with serve(provider.rate_limited("1"), provider.answer("Delivered.")) as server:
        async with session_on(provider, server, tmp_path, clock=clock) as (rt, s):
            text = (await run_task(s, "where is order 42?")).answer
            [effect] = await model_effects(rt)
        first, second = server.received
    assert text == "Delivered."
    assert effect.attempts == 2
    assert effect.history[0].startswith(
        f"attempt 1: TransientToolError: tool 'model': {provider.name}: HTTP 429"
    )
    # The backoff waited for the Retry-After (1 s), not the policy's jittered 0-0.5 s.
    assert 1.0 in clock.sleeps
    assert second.at - first.at >= 1.0


async def test_a_429_for_an_exhausted_quota_is_a_failure_and_is_not_retried(
    provider: Provider, tmp_path: Path
) -> None:
    with serve(provider.out_of_money, provider.answer("never sent")) as server:
        async with session_on(provider, server, tmp_path) as (rt, s):
            text = (await run_task(s, "where is order 42?")).answer
            info = await s.ask(tether.GetSessionInfo(), timeout=5)
            [effect] = await model_effects(rt)
        assert len(server.received) == 1
    assert effect.status == "failed"
    assert effect.attempts == 1
    assert effect.error is not None
    assert effect.error.startswith("ProviderError: ")
    assert info.outcome.startswith("stopped: the model failed")
    assert "HTTP 429" in text


async def test_a_bad_request_is_a_failure_naming_the_providers_message(
    provider: Provider, tmp_path: Path
) -> None:
    with serve(provider.bad_request) as server:
        async with session_on(provider, server, tmp_path) as (rt, s):
            text = (await run_task(s, "where is order 42?")).answer
            [effect] = await model_effects(rt)
        assert len(server.received) == 1
    assert effect.attempts == 1
    assert "HTTP 400 invalid_request_error" in text
    assert "schema" in text  # the provider's own words
    assert "(request req_" in text  # the request id, for a support ticket


async def test_a_500_is_retried_as_a_transient_failure_that_was_not_carried_out(
    provider: Provider, tmp_path: Path
) -> None:
    with serve(provider.server_error(), provider.answer("Delivered.")) as server:
        async with session_on(provider, server, tmp_path) as (rt, s):
            text = (await run_task(s, "where is order 42?")).answer
            [effect] = await model_effects(rt)
        assert len(server.received) == 2
    assert text == "Delivered."
    [attempt] = effect.history
    assert attempt.startswith(
        f"attempt 1: TransientToolError: tool 'model': {provider.name}: HTTP 500 "
    )
    assert (
        "server had an error" if provider.name == "openai" else "Internal server error"
    ) in attempt


async def test_persistent_5xx_open_the_model_breaker_and_the_step_waits_instead_of_failing(
    provider: Provider, tmp_path: Path
) -> None:
    # The seeds' table: 5xx are transient infrastructure, retried with backoff; model calls
    # have a breaker that opens after 2 failures, for 120 s. The step is parked, not failed.
    with serve(provider.server_error(), provider.server_error()) as server:
        async with session_on(provider, server, tmp_path) as (rt, s):
            await s.tell(tether.UserMessage("where is order 42?"))
            effect = await wait_for_model_effect(rt, "retry")
            info = await s.ask(tether.GetSessionInfo(), timeout=5)
        assert len(server.received) == 2
    assert len(effect.history) == 2  # two attempts made; the third was refused by the breaker
    assert all("TransientToolError" in h and "HTTP 500" in h for h in effect.history)
    assert info.status == "working"  # the task goes on once the breaker lets a probe through


async def wait_for_model_effect(rt: tether.Runtime, status: str) -> EffectRecord:
    """The model call's ledger row, once it has ``status``."""
    with anyio.fail_after(20):
        while True:
            found = [e for e in await model_effects(rt) if e.status == status]
            if found:
                return found[0]
            await anyio.sleep(0.02)


async def test_a_timeout_is_retried_as_maybe_carried_out(
    provider: Provider, tmp_path: Path
) -> None:
    held = Reply(provider.answer("too late").body, hold=30.0)  # the server holds it
    with serve(held, provider.answer("Delivered.")) as server:
        async with session_on(provider, server, tmp_path, timeout=0.5) as (rt, s):
            text = (await run_task(s, "where is order 42?")).answer
            [effect] = await model_effects(rt)
        assert len(server.received) == 2
    assert text == "Delivered."
    assert effect.attempts == 2
    assert effect.history[0].startswith(
        f"attempt 1: ToolTimeout: tool 'model': {provider.name}: no answer in time"
    )


async def test_a_connection_error_is_retried_as_a_call_that_was_not_carried_out(
    provider: Provider, tmp_path: Path
) -> None:
    with serve() as server:
        url = server.url
    # Nothing listens there any more: every attempt is refused, until the breaker opens.
    async with session_on(provider, url, tmp_path) as (rt, s):
        await s.tell(tether.UserMessage("where is order 42?"))
        effect = await wait_for_model_effect(rt, "retry")
        info = await s.ask(tether.GetSessionInfo(), timeout=5)
    assert len(effect.history) == 2  # two attempts made; the third was refused by the breaker
    assert all("TransientToolError" in h and "connection error" in h for h in effect.history)
    assert info.status == "working"


async def test_an_answer_cut_at_the_token_limit_stops_the_task_instead_of_finishing_it(
    provider: Provider, tmp_path: Path
) -> None:
    with serve(provider.cut_off) as server:
        async with session_on(provider, server, tmp_path) as (_, s):
            text = (await run_task(s, "where is order 42?")).answer
            info = await s.ask(tether.GetSessionInfo(), timeout=5)
    assert info.outcome.startswith("stopped: the model failed")
    assert "cut off" in text
    assert text != "Order 42 is deliv"
