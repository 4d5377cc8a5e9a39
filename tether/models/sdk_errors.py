"""The provider SDKs' errors sorted into tether's taxonomy (``docs/recovery.md``).

The ``openai`` and ``anthropic`` SDKs raise the same family of errors: ``APITimeoutError``
(a subclass of ``APIConnectionError``), ``APIConnectionError``, and ``APIStatusError`` with
the HTTP ``status_code`` and the response. :func:`sort` maps one onto what tether's effect
path understands, so the model call is retried, or not, by what the error says about it:

========================================  ================  ==================================
the SDK's error                           tether raises     the model call
========================================  ================  ==================================
``APIConnectionError`` (no answer)        TransientToolError  not carried out: retried
HTTP 429 (``Retry-After`` honoured)       TransientToolError  not carried out: retried
HTTP 500, 502, 503, 529 and other 5xx     TransientToolError  not carried out: retried
``APITimeoutError``, HTTP 408, 504        ToolTimeout       maybe carried out: retried
HTTP 429 for an exhausted quota or        ProviderError     failed: recorded, never retried
spending limit, any other 4xx
========================================  ================  ==================================

A 5xx is "transient infrastructure" in the error taxonomy this follows (the reliability
guide's table in ``seeds/004``): retried with backoff, at most ``RetryPolicy.max_attempts``
times (3 for the session's model), under the ``model`` circuit breaker. The session's model
tool is ``recovery="retry"``: a model call has no side effect, so "maybe carried out" is
retried as well; the difference shows in the ledger's attempt history and in the breaker.

Errors that are not the SDK's (a custom client, a bug) pass through unchanged, and are sorted
by ``tether.actors.tool.classify`` as any tool's.
"""

from __future__ import annotations

import email.utils
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from tether.errors import ProviderError, ToolTimeout, TransientToolError

TOOL = "model"  # the session's model tool: what the ledger and the breaker call it

QuotaCheck = Callable[[Any], bool]


def sort(
    exc: Exception, sdk: ModuleType | None, provider: str, out_of_money: QuotaCheck
) -> Exception:
    """The tether error that says what ``exc`` (raised by ``sdk``) means for the call; ``exc``
    itself if it is not one of the SDK's API errors. ``out_of_money(exc)`` tells a 429 that
    no wait will cure (a quota, a spending limit) from a rate limit."""
    original = exc  # the SDK's classes are untyped here: isinstance would make exc an Any
    if sdk is None or not isinstance(exc, sdk.APIError):
        return original
    if isinstance(exc, sdk.APITimeoutError):
        return ToolTimeout(
            TOOL, f"{provider}: no answer in time (the request may have been processed)"
        )
    if isinstance(exc, sdk.APIConnectionError):
        return TransientToolError(TOOL, f"{provider}: connection error: {_cause(exc)}")
    if not isinstance(exc, sdk.APIStatusError):
        return original  # e.g. a response the SDK could not validate: a failure, as it is
    status: int = exc.status_code
    said = _said(exc, provider, status)
    if status in (408, 504):
        return ToolTimeout(TOOL, said, status_code=status)
    if status == 429 and not out_of_money(exc):
        return TransientToolError(TOOL, said, status_code=status, retry_after=retry_after(exc))
    if status >= 500:
        return TransientToolError(TOOL, said, status_code=status, retry_after=retry_after(exc))
    return ProviderError(
        TOOL,
        said,
        provider=provider,
        status=status,
        code=_code(exc),
        request_id=getattr(exc, "request_id", None),
    )


@contextmanager
def sorted_errors(sdk_name: str, out_of_money: QuotaCheck) -> Iterator[None]:
    """Raise the SDK ``sdk_name``'s errors as :func:`sort` says (the SDK's error chained as
    the cause); any other error as it is. The SDK is looked up, not imported: if it is not
    loaded, no error can be one of its own."""
    try:
        yield
    except Exception as exc:
        sorted_exc = sort(exc, sys.modules.get(sdk_name), sdk_name, out_of_money)
        if sorted_exc is exc:
            raise
        raise sorted_exc from exc


def retry_after(exc: Any) -> float | None:
    """The server's ``Retry-After`` in seconds (``retry-after-ms`` first, then
    ``retry-after`` as seconds or an HTTP date), or None."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _said(exc: Any, provider: str, status: int) -> str:
    """``provider: HTTP 429 rate_limit_error: <message> (request req_…)``."""
    kind = _kind(exc)
    request = getattr(exc, "request_id", None)
    text = f"{provider}: HTTP {status}"
    if kind:
        text += f" {kind}"
    text += f": {_message(exc)}"
    if request:
        text += f" (request {request})"
    return text


def _body_error(exc: Any) -> dict[str, Any]:
    """The ``error`` object of the response body: the body itself for ``openai`` (which
    unwraps it), ``body["error"]`` for ``anthropic``."""
    body = getattr(exc, "body", None)
    if not isinstance(body, dict):
        return {}
    inner = body.get("error")
    return inner if isinstance(inner, dict) else body


def _kind(exc: Any) -> str:
    kind = _body_error(exc).get("type")
    return kind if isinstance(kind, str) else ""


def _code(exc: Any) -> str | None:
    code = getattr(exc, "code", None) or getattr(exc, "error_code", None)
    if code is None:
        code = _body_error(exc).get("code")
    return str(code) if code is not None else None


def _message(exc: Any) -> str:
    message = getattr(exc, "api_message", None) or _body_error(exc).get("message")
    if isinstance(message, str) and message:
        return message
    return str(exc)


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
