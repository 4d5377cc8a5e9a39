"""Observability with the OpenTelemetry SDK's in-memory exporters (in a child process: an SDK
provider, once set, stays for the process): spans per message, effect and approval; the
metrics operators alert on; structlog lines bound with session, actor, message and trace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    db = tmp_path_factory.mktemp("telemetry") / "agents.db"
    out = subprocess.run(
        [sys.executable, "-m", "tests.runtime.telemetry_program", str(db)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def spans(recorded: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [s for s in recorded["spans"] if s["name"] == name]


def test_each_handled_message_is_a_span_with_actor_and_message(recorded: dict[str, Any]) -> None:
    handled = spans(recorded, "tether.handle")
    assert any(
        s["attributes"]["tether.actor_id"] == "s1"
        and s["attributes"]["tether.message_type"] == "UserMessage"
        for s in handled
    )
    assert all("tether.msg_id" in s["attributes"] for s in handled)


def test_each_effect_is_a_span_with_tool_key_attempt_and_replayed(recorded: dict[str, Any]) -> None:
    effects = spans(recorded, "tether.effect")
    tools = {s["attributes"]["tether.tool"] for s in effects}
    assert {"model", "lookup_order", "big_refund", "flaky"} <= tools
    for s in effects:
        assert len(s["attributes"]["tether.effect_key"]) == 40
    done = [s for s in effects if "tether.replayed" in s["attributes"]]
    assert done
    assert all(s["attributes"]["tether.attempt"].isdigit() for s in done)
    # The step parked for approval replayed its model decision when it came back.
    assert any(
        s["attributes"]["tether.tool"] == "model" and s["attributes"]["tether.replayed"] == "True"
        for s in done
    )
    # Guard state changes are span events of the effect (or the step) that caused them.
    assert "tether.breaker_opened" in {e for s in effects for e in s["events"]}
    handled = spans(recorded, "tether.handle")
    assert "tether.approval_requested" in {e for s in handled for e in s["events"]}


def test_each_approval_decision_is_a_span(recorded: dict[str, Any]) -> None:
    [decide] = spans(recorded, "tether.approval.decide")
    assert decide["attributes"]["tether.decision"] == "approve"
    assert decide["attributes"]["tether.decided_by"] == "manager"
    assert decide["attributes"]["tether.status"] == "approved"


def test_the_metrics_operators_alert_on_are_recorded(recorded: dict[str, Any]) -> None:
    m = recorded["metrics"]
    for name in (
        "tether.messages.handled",
        "tether.messages.queue_age",
        "tether.commit.writes",
        "tether.effects.calls",
        "tether.effects.replayed",
        "tether.approvals.requested",
        "tether.approvals.decisions",
        "tether.approvals.latency",
        "tether.breakers.transitions",
    ):
        assert m.get(name, 0) > 0, name
    assert m["tether.messages.in_flight"] == 0  # every handled message left


def test_log_lines_in_a_handler_carry_session_actor_message_and_trace(
    recorded: dict[str, Any],
) -> None:
    lines = [log for log in recorded["logs"] if log.get("event") == "approval_requested"]
    assert lines
    line = lines[0]
    assert line["session_id"] == "s1"
    assert line["actor_id"] == "s1"
    assert line["msg_id"]
    assert len(line["trace_id"]) == 32
