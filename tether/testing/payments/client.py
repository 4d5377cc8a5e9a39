"""Talking to the service over HTTP: one blocking JSON request with its failures sorted
(``PaymentsError``, ``TimeoutError``, ``ConnectionError``), and ``PaymentsClient``, the small
async client."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from http.client import HTTPException
from typing import Any

import anyio.to_thread


class PaymentsError(Exception):
    """The payments service answered with a non-2xx status.

    ``status_code`` is the HTTP status; ``transient`` is true for 429 and 5xx, the answers a
    caller may retry.
    """

    def __init__(self, status: int, message: str) -> None:
        self.status_code = status
        self.message = message
        super().__init__(f"payments service answered {status}: {message}")

    @property
    def transient(self) -> bool:
        return self.status_code == 429 or self.status_code >= 500


def json_request(
    method: str, url: str, body: object | None = None, *, timeout: float
) -> Any:  # the decoded JSON answer
    """One blocking JSON request; maps failures onto PaymentsError / TimeoutError /
    ConnectionError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            raw = exc.read()
        finally:
            exc.close()
        try:
            message = str(json.loads(raw)["error"])
        except (ValueError, KeyError, TypeError):
            message = raw.decode(errors="replace") or exc.reason
        raise PaymentsError(exc.code, message) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise TimeoutError(f"{method} {url}: no answer within {timeout} s") from exc
        # keep the subtype: a refused connection (nothing was sent) is not a reset one
        cls = type(exc.reason) if isinstance(exc.reason, ConnectionError) else ConnectionError
        raise cls(f"{method} {url}: {exc.reason}") from exc
    except TimeoutError as exc:
        raise TimeoutError(f"{method} {url}: no answer within {timeout} s") from exc
    except ConnectionError:
        raise
    except (OSError, HTTPException) as exc:
        raise ConnectionError(f"{method} {url}: {exc!r}") from exc


class PaymentsClient:
    """A small async client: each call runs ``urllib`` in a worker thread.

    Errors: :class:`PaymentsError` for a non-2xx answer (``status_code``; 429 and 5xx are
    transient), ``TimeoutError`` when no answer arrives within ``timeout`` seconds and
    ``ConnectionError`` when the service cannot be reached (``ConnectionRefusedError`` when
    nothing was sent, ``ConnectionResetError`` when the connection dropped mid-call). A cancelled call returns at once;
    its request may still reach the service (the ambiguous case this service exists to test).
    """

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    async def refund(
        self, order_id: str, amount_cents: int, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """``POST /refunds``: ``{refund_id, order_id, amount_cents, replayed}``."""
        body: dict[str, Any] = {"order_id": order_id, "amount_cents": amount_cents}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        answer: dict[str, Any] = await self._call("POST", "/refunds", body)
        return answer

    async def refunds(self) -> list[dict[str, Any]]:
        """``GET /refunds``: every refund, oldest first."""
        answer: list[dict[str, Any]] = await self._call("GET", "/refunds", None)
        return answer

    async def _call(self, method: str, path: str, body: object | None) -> Any:
        def run() -> Any:
            return json_request(method, self.url + path, body, timeout=self.timeout)

        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
