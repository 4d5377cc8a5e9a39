"""A session's model calls as OpenTelemetry GenAI client spans and metrics, on the real
``openai`` SDK against a local provider (``tests.models.servers``): the first request fails
with a 500 and is made again, then a tool call, then the answer. Recorded with the SDK in a
child process (``tests.runtime.trace_program genai``)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import tether
from tests.models.shapes import OPENAI_MODEL
from tests.runtime.trace_program import finished, spans_in, start_program


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Any]:
    d = tmp_path_factory.mktemp("genai")
    spans, metrics = d / "spans.jsonl", d / "metrics.json"
    finished(start_program("genai", d / "a.db", spans, metrics))
    return spans_in(spans), msgspec.json.decode(metrics.read_bytes())


REQUEST = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.system": "openai",
    "gen_ai.request.model": "gpt-4o-mini",
}


def test_each_model_call_is_a_genai_client_span_under_its_model_effect(
    recorded: tuple[list[dict[str, Any]], Any],
) -> None:
    spans, _ = recorded
    calls = [s for s in spans if s["name"] == "chat gpt-4o-mini"]
    assert len(calls) == 3  # the failed attempt, the tool call, the answer
    effects = {s["span_id"]: s for s in spans if s["name"] == "tether.effect"}
    for call in calls:
        assert call["kind"] == "CLIENT"
        assert call["attributes"].items() >= REQUEST.items()
        assert effects[call["parent_id"]]["attributes"]["tether.tool"] == "model"
    [caller] = [s for s in spans if s["name"] == "caller"]
    assert {c["trace_id"] for c in calls} == {caller["trace_id"]}

    failed, tool_call, answer = calls
    assert failed["attributes"]["error.type"] == "openai.InternalServerError"
    assert "gen_ai.usage.input_tokens" not in failed["attributes"]
    assert failed["parent_id"] == tool_call["parent_id"]  # two attempts of one model effect
    model_effect = effects[failed["parent_id"]]
    assert model_effect["attributes"]["tether.attempt"] == "2"
    failure = model_effect["events"]["tether.effect_attempt_failed"]
    assert (failure["tether.attempt"], failure["tether.outcome"]) == ("1", "not_done")
    assert {
        k: answer["attributes"][k]
        for k in (
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.response.model",
            "gen_ai.response.finish_reasons",
        )
    } == {
        "gen_ai.usage.input_tokens": "120",
        "gen_ai.usage.output_tokens": "9",
        "gen_ai.response.model": OPENAI_MODEL,
        "gen_ai.response.finish_reasons": "('stop',)",
    }
    assert tool_call["attributes"]["gen_ai.response.finish_reasons"] == "('tool_calls',)"
    assert answer["attributes"]["gen_ai.response.id"].startswith("chatcmpl-")


def test_genai_metrics_have_units_and_the_spans_attribute_names(
    recorded: tuple[list[dict[str, Any]], Any],
) -> None:
    _, metrics = recorded
    duration = metrics["gen_ai.client.operation.duration"]
    assert duration["unit"] == "s"
    assert {p.get("error.type") for p in duration["points"]} == {
        "openai.InternalServerError",
        None,
    }
    assert all(p.items() >= REQUEST.items() for p in duration["points"])
    tokens = metrics["gen_ai.client.token.usage"]
    assert tokens["unit"] == "{token}"
    assert sorted(p["gen_ai.token.type"] for p in tokens["points"]) == ["input", "output"]
    assert all(p["gen_ai.response.model"] == OPENAI_MODEL for p in tokens["points"])


def test_every_metric_has_a_unit_and_tethers_scope_and_version(
    recorded: tuple[list[dict[str, Any]], Any],
) -> None:
    _, metrics = recorded
    assert metrics
    for name, metric in metrics.items():
        assert metric["unit"], name
        assert metric["scope"] == ["tether", tether.__version__], name
    # tether's own metrics name their attributes as its spans do.
    effect_points = metrics["tether.effects.calls"]["points"]
    assert {p["tether.tool"] for p in effect_points} == {"model", "lookup_order"}
