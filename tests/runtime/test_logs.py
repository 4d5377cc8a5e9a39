"""tether's log events reach the application's ``logging`` handlers when it did not configure
structlog, at info for what happens by design, with times in ISO 8601; an application that
configured structlog gets them through its own configuration instead."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog

import tether
from tests.actors.session_agents import LOG, RefundAgent, first_pending
from tether.logs import iso_time

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def structlog_unconfigured() -> Iterator[None]:
    structlog.reset_defaults()
    try:
        yield
    finally:
        structlog.reset_defaults()
        LOG.clear()  # the tools' own record, which other modules read


async def refund_with_approval() -> None:
    """A task that asks a person (who approves) before its large refund: all by design."""
    async with tether.Runtime(":memory:") as rt:
        s = await rt.spawn(RefundAgent, "s1", goal="Refund delivered orders")
        await s.tell(tether.UserMessage("please refund order 43"), dedup_key="t")
        request = await first_pending(rt)
        await rt.approvals.decide(request.request_id, tether.Approve(by="manager"))
        answer = await s.ask(
            tether.UserMessage("please refund order 43"), timeout=30, dedup_key="t"
        )
        assert "refunded 90000" in str(answer)


def is_iso_utc(value: object) -> bool:
    if not isinstance(value, str) or not value.endswith("Z"):
        return False
    parsed = datetime.datetime.fromisoformat(value)
    return parsed.utcoffset() == datetime.timedelta(0)


async def test_without_structlog_configured_events_are_records_of_the_tether_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="tether")
    await refund_with_approval()
    [requested] = [r for r in caplog.records if getattr(r, "event", None) == "approval_requested"]
    assert (requested.name, requested.levelno) == ("tether", logging.INFO)
    fields: dict[str, Any] = requested.tether  # type: ignore[attr-defined]
    assert (fields["session_id"], fields["actor_id"], fields["tool"]) == ("s1", "s1", "big_refund")
    assert fields["msg_id"]
    assert is_iso_utc(fields["deadline"])
    assert is_iso_utc(fields["timestamp"])
    message = requested.getMessage()
    assert message.startswith("approval_requested ")
    assert "tool=big_refund" in message
    assert f"deadline={fields['deadline']}" in message
    assert "timestamp=" not in message  # the handler's formatter shows the record's own time


async def test_a_task_that_runs_as_designed_logs_nothing_above_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An approval requested and granted, a session escalating to a person, guards started
    by their supervisor: routine, so info at most."""
    caplog.set_level(logging.DEBUG, logger="tether")
    await refund_with_approval()
    events = {getattr(r, "event", None): r.levelno for r in caplog.records}
    assert events.get("approval_requested") == logging.INFO
    assert events.get("child_started") == logging.INFO
    louder = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno > logging.INFO]
    assert louder == []


async def test_info_events_stay_out_of_an_application_that_shows_warnings_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="tether")
    await refund_with_approval()
    assert [r for r in caplog.records if r.name.startswith("tether")] == []


async def test_an_application_that_configured_structlog_gets_the_events_through_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="tether")
    seen: list[dict[str, Any]] = []

    def capture(_: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
        seen.append({"level": method, **event_dict})
        return ""

    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, capture],
        logger_factory=structlog.ReturnLoggerFactory(),
    )
    await refund_with_approval()
    [requested] = [e for e in seen if e["event"] == "approval_requested"]
    assert (requested["level"], requested["session_id"]) == ("info", "s1")
    assert [r for r in caplog.records if r.name.startswith("tether")] == []


def test_iso_time_is_iso_8601_in_utc() -> None:
    assert iso_time(0.0) == "1970-01-01T00:00:00.000Z"
    assert iso_time(1_795_682_041.9512) == "2026-11-26T08:34:01.951Z"
