"""``tether.models.sdk_errors``: the SDKs' own error objects, sorted into tether's taxonomy."""

from __future__ import annotations

import email.utils
import sys
import time
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import tether
from tether.actors.tool import classify
from tether.models import sdk_errors


def _response(status: int, headers: dict[str, str] | None = None) -> httpx2.Response:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    return httpx2.Response(status, headers=headers or {}, request=request)


def openai_status(status: int, code: str | None = None, **headers: str) -> Exception:
    """The SDK's error for a response of ``status`` (the body as the SDK unwraps it)."""
    response = _response(status, {k.replace("_", "-"): v for k, v in headers.items()})
    body = {"message": "said by the server", "type": "some_error", "code": code}
    cls = openai.RateLimitError if status == 429 else openai.APIStatusError
    return cls("said by the server", response=response, body=body)


def sort_openai(exc: Exception) -> Exception:
    return sdk_errors.sort(
        exc, sys.modules["openai"], "openai", lambda e: e.code == "insufficient_quota"
    )


@pytest.mark.parametrize(
    ("status", "code", "sorted_as", "outcome"),
    [
        (429, "rate_limit_exceeded", tether.TransientToolError, "not_done"),
        (429, "insufficient_quota", tether.ProviderError, "failed"),
        (500, None, tether.TransientToolError, "not_done"),
        (502, None, tether.TransientToolError, "not_done"),
        (503, None, tether.TransientToolError, "not_done"),
        (529, None, tether.TransientToolError, "not_done"),
        (408, None, tether.ToolTimeout, "maybe_done"),
        (504, None, tether.ToolTimeout, "maybe_done"),
        (400, None, tether.ProviderError, "failed"),
        (401, None, tether.ProviderError, "failed"),
        (404, None, tether.ProviderError, "failed"),
        (409, None, tether.ProviderError, "failed"),
    ],
)
def test_each_status_is_sorted_by_what_it_says_about_the_call(
    status: int, code: str | None, sorted_as: type[Exception], outcome: str
) -> None:
    result = sort_openai(openai_status(status, code))
    assert type(result) is sorted_as
    assert classify(result) == outcome
    assert f"openai: HTTP {status} some_error: said by the server" in str(result)


def test_connection_errors_and_timeouts_are_sorted_and_the_cause_named() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError as cause:
            raise anthropic.APIConnectionError(request=request) from cause
    except anthropic.APIConnectionError as exc:
        refused: Exception = exc
    sorted_exc = sdk_errors.sort(refused, sys.modules["anthropic"], "anthropic", lambda e: False)
    assert isinstance(sorted_exc, tether.TransientToolError)
    assert "Connection refused" in str(sorted_exc)
    timeout = sdk_errors.sort(
        anthropic.APITimeoutError(request=request),
        sys.modules["anthropic"],
        "anthropic",
        lambda e: False,
    )
    assert isinstance(timeout, tether.ToolTimeout)
    assert classify(timeout) == "maybe_done"


def test_an_error_that_is_not_the_sdks_passes_unchanged() -> None:
    error = KeyError("x")
    assert sort_openai(error) is error
    assert sdk_errors.sort(error, None, "openai", lambda e: False) is error


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),  # the precise one first
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_in_seconds(headers: dict[str, str], seconds: float | None) -> None:
    exc: Any = openai_status(
        429, "rate_limit_exceeded", **{k.replace("-", "_"): v for k, v in headers.items()}
    )
    assert sdk_errors.retry_after(exc) == seconds
    sorted_exc = sort_openai(exc)
    assert isinstance(sorted_exc, tether.TransientToolError)
    assert sorted_exc.retry_after == seconds


def test_retry_after_as_an_http_date_is_the_time_until_then() -> None:
    then = email.utils.formatdate(time.time() + 60, usegmt=True)
    exc: Any = openai_status(429, "rate_limit_exceeded", retry_after=then)
    seconds = sdk_errors.retry_after(exc)
    assert seconds is not None
    assert 50 < seconds <= 60
