"""Signed webhooks: where approval notices are posted, how they are signed, and how a
receiver checks them.

A notice is a JSON body POSTed with these headers::

    Content-Type: application/json
    Tether-Delivery: ntf-…        the same for every attempt of one notice: deduplicate on it
    Tether-Event: approval.requested | approval.decided
    Tether-Signature: t=1717171717,v1=5257a869…

``v1`` is the hex HMAC-SHA256, keyed with the webhook's secret, of ``f"{t}.{body}"``: the
timestamp, a dot, and the raw body — the scheme Stripe uses (GitHub signs the body alone).
Each attempt is signed anew with its own timestamp, so a receiver may refuse old timestamps
(a replayed capture) without refusing a late retry. ``verify_webhook`` does every check a
receiver must make, in constant time.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import anyio
import msgspec

from tether.actors.tool import RetryPolicy
from tether.errors import ConfigError, TetherError, ToolTimeout, TransientToolError

SIGNATURE_HEADER = "Tether-Signature"
DELIVERY_HEADER = "Tether-Delivery"
EVENT_HEADER = "Tether-Event"
#: How far a signature's timestamp may be from the receiver's clock by default (Stripe's).
DEFAULT_TOLERANCE = 300.0
_MIN_SECRET = 16
# Statuses that say the receiver did not take the notice and may take it later: a timeout, a
# conflict with a concurrent delivery, too early, too many requests. Every 5xx too.
_AGAIN = frozenset({408, 409, 425, 429})


class WebhookSignatureError(TetherError):
    """A notice's signature does not hold: missing, malformed, too old, or not made with the
    secret. The receiver must refuse the notice."""


class Webhook(msgspec.Struct, frozen=True, kw_only=True):
    """Where an ``ApprovalPolicy`` posts its notices: each new request, and its outcome.

    Attributes:
        url: an ``http://`` or ``https://`` URL.
        secret: the key both ends share (16 characters at least; 32 random bytes,
            e.g. ``secrets.token_urlsafe(32)``, is right). Never stored, never logged: the
            store holds the URL only, and the runtime that delivers a notice finds the
            secret in its own policy.
        timeout: seconds one attempt may take.
        retry: the backoff between the attempts of one delivery round. A round that fails
            fails its notice's message, which is delivered again (a new round, the same
            delivery id) until the runtime's ``max_attempts``, and then dead-lettered: it
            can be retried from the console or ``tether dead-letters retry``.
    """

    url: str
    secret: str = msgspec.field(default="")
    timeout: float = 10.0
    retry: RetryPolicy = msgspec.field(
        default_factory=lambda: RetryPolicy(max_attempts=5, initial_delay=1.0, max_delay=60.0)
    )

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url) if isinstance(self.url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"Webhook.url must be an http:// or https:// URL, not {self.url!r}")
        if not isinstance(self.secret, str) or len(self.secret) < _MIN_SECRET:
            raise ConfigError(
                f"Webhook.secret must be text of {_MIN_SECRET} characters at least "
                "(secrets.token_urlsafe(32) makes a good one)"
            )
        if isinstance(self.timeout, bool) or not (
            isinstance(self.timeout, int | float) and self.timeout > 0
        ):
            raise ConfigError(f"Webhook.timeout must be > 0 seconds, not {self.timeout!r}")
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigError(f"Webhook.retry must be a tether.RetryPolicy, not {self.retry!r}")

    def __repr__(self) -> str:  # the secret never reaches a log
        return f"Webhook(url={self.url!r}, secret='***', timeout={self.timeout!r})"

    __str__ = __repr__


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``Tether-Signature`` header value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify_webhook(
    secret: str,
    body: bytes,
    signature: str | None,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> None:
    """Check a notice as its receiver must, or raise ``WebhookSignatureError`` saying why.

    ``body`` is the raw request body, exactly as received (not re-encoded JSON);
    ``signature`` the ``Tether-Signature`` header. The timestamp must be within ``tolerance``
    seconds of ``now`` (default: this machine's clock), and one of the ``v1`` values must be
    the HMAC of ``f"{t}.{body}"`` (several ``v1`` values are accepted, for a secret being
    rotated). Then deduplicate on ``Tether-Delivery``: a notice may arrive more than once.
    """
    if not signature:
        raise WebhookSignatureError(f"no {SIGNATURE_HEADER} header")
    timestamp: int | None = None
    candidates: list[str] = []
    for item in signature.split(","):
        key, _, value = item.strip().partition("=")
        if key == "t" and value.isdigit():
            timestamp = int(value)
        elif key == "v1" and value:
            candidates.append(value)
    if timestamp is None or not candidates:
        raise WebhookSignatureError(f"malformed {SIGNATURE_HEADER} header: {signature[:80]!r}")
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance:
        raise WebhookSignatureError(
            f"signature timestamp {timestamp} is {abs(clock - timestamp):.0f} s from now "
            f"(tolerance {tolerance:.0f} s)"
        )
    expected = sign(secret, body, timestamp).partition(",v1=")[2]
    if not any(hmac.compare_digest(expected, c) for c in candidates):
        raise WebhookSignatureError("signature does not match the body and the secret")


async def post(webhook: Webhook, body: str, delivery_id: str, event: str, tool: str) -> int:
    """POST ``body`` to ``webhook`` once, signed now; the receiver's 2xx status.

    Raises ``TransientToolError`` when the notice may be sent again (no connection, a 5xx, a
    408/409/425/429), ``ToolTimeout`` when no answer came in time (it may have arrived:
    sent again with the same delivery id), and ``WebhookRefused`` for any other answer."""
    data = body.encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "tether-webhook",
        DELIVERY_HEADER: delivery_id,
        EVENT_HEADER: event,
        SIGNATURE_HEADER: sign(webhook.secret, data, int(time.time())),
    }
    request = urllib.request.Request(webhook.url, data=data, headers=headers, method="POST")
    send = functools.partial(_send, request, webhook.timeout, tool)
    return await anyio.to_thread.run_sync(send, abandon_on_cancel=True)


class WebhookRefused(TetherError):
    """The receiver answered with a status that sending again will not change (a 4xx)."""

    def __init__(self, url: str, status: int, detail: str) -> None:
        self.status = status
        super().__init__(f"{url} answered {status}: {detail}")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A notice goes to its URL or nowhere: urllib would follow a redirect as a GET."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirects)


def _send(request: urllib.request.Request, timeout: float, tool: str) -> int:
    try:
        with _opener.open(request, timeout=timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the response (and its socket) open
        detail = exc.reason if isinstance(exc.reason, str) else str(exc)
        if exc.code >= 500 or exc.code in _AGAIN:
            retry_after = exc.headers.get("Retry-After") if exc.headers else None
            raise TransientToolError(
                tool,
                f"{request.full_url} answered {exc.code}: {detail}",
                retry_after=float(retry_after) if retry_after and retry_after.isdigit() else None,
            ) from None
        raise WebhookRefused(request.full_url, exc.code, detail) from None
    except TimeoutError as exc:
        raise ToolTimeout(tool, f"{request.full_url} did not answer within {timeout} s") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise ToolTimeout(tool, f"{request.full_url}: {reason}") from exc
        raise TransientToolError(tool, f"{request.full_url}: {reason}") from exc
    return status
