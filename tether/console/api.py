"""The JSON API beside the pages, for scripts and bridges (a Slack button, a pager's ack):

* ``GET  /api/approvals?status=pending|approved|rejected|all[&session=ID]``
* ``GET  /api/approvals/{id}``
* ``POST /api/approvals/{id}/approve``  ``{"comment"?, "version"?}``
* ``POST /api/approvals/{id}/reject``   ``{"reason", "version"?}``
* ``POST /api/approvals/{id}/modify``   ``{"args", "comment"?, "version"?}``

Authenticated by ``Authorization: Bearer TOKEN`` (token mode) or the trusted proxy's header
(proxy mode); a session cookie is not enough for a POST. ``version`` is the request's
``version`` the client read: when given and no longer current, the decision is refused (409).
Statuses: 401 no or bad credentials, 403 a viewer or a read-only console, 404 unknown, 409 the
request changed since it was read (or this approver already counts), 410 decided or expired,
422 invalid arguments or body. Errors are ``{"error": code, "detail": text}``.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import tether
from tether.actors.messages import TOO_DEEP
from tether.console import actions, csrf
from tether.console.actions import Refusal
from tether.console.auth import Principal
from tether.console.views import approvals


def routes() -> list[Route]:
    return [
        Route("/api/approvals", _list),
        Route("/api/approvals/{request_id}", _get),
        Route("/api/approvals/{request_id}/{kind}", _decide, methods=["POST"]),
    ]


def _error(status: int, code: str, detail: str, **headers: str) -> Response:
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


def _unauthorized() -> Response:
    return _error(
        401,
        "unauthenticated",
        "no valid credentials: send Authorization: Bearer TOKEN",
        **{"WWW-Authenticate": 'Bearer realm="tether"'},
    )


def _json(value: Any, status: int = 200) -> Response:
    return Response(
        msgspec.json.encode(value, enc_hook=repr), status_code=status, media_type="application/json"
    )


def _caller(request: Request) -> Principal | None:
    """The API's principal: a bearer token or the proxy's header, never a session cookie
    alone (a cookie is sent by a browser to any request, forged ones too)."""
    console = request.app.state.console
    if console.config.auth == "token":
        return console.auth.bearer(request)  # type: ignore[no-any-return]
    who: Principal | None = request.state.principal
    return who


async def _list(request: Request) -> Response:
    if _caller(request) is None:
        return _unauthorized()
    status = request.query_params.get("status", "pending")
    if status not in ("pending", "approved", "rejected", "all"):
        return _error(
            422, "invalid", f"status is pending, approved, rejected or all, not {status!r}"
        )
    rt: tether.Runtime = request.app.state.console.rt
    rows = await approvals(rt, None if status == "all" else status)
    session = request.query_params.get("session")
    if session:
        rows = [r for r in rows if r.session_id == session]
    return _json(rows)


async def _get(request: Request) -> Response:
    if _caller(request) is None:
        return _unauthorized()
    rt: tether.Runtime = request.app.state.console.rt
    try:
        return _json(await rt.approvals.get(request.path_params["request_id"]))
    except tether.ApprovalNotFound as exc:
        return _error(404, "not_found", str(exc))


async def _decide(request: Request) -> Response:
    who = _caller(request)
    if who is None:
        return _unauthorized()
    console = request.app.state.console
    if not request.headers.get("content-type", "").startswith("application/json"):
        return _error(415, "json_required", "send the body as Content-Type: application/json")
    if request.headers.get("origin"):  # a browser's request: from the console's own origin only
        try:
            csrf.same_origin(request)
        except csrf.CsrfRefused as exc:
            return _error(403, "cross_origin", str(exc))
    try:
        body = msgspec.json.decode(await request.body()) if await request.body() else {}
    except msgspec.DecodeError as exc:
        return _error(422, "invalid_json", f"the body is not valid JSON: {exc}")
    except RecursionError:  # deeper than the decoder goes, so far beyond what tether stores
        return _error(422, "invalid_json", f"the body cannot be stored: {TOO_DEEP}")
    if not isinstance(body, dict):
        return _error(422, "invalid", "the body must be a JSON object")
    version = body.get("version")
    if version is not None and (type(version) is not int or version < 0):
        return _error(422, "invalid", f"version must be an int >= 0, not {version!r}")
    for field in ("comment", "reason"):
        if body.get(field) is not None and not isinstance(body[field], str):
            return _error(422, "invalid", f"{field} must be text")
    try:
        decided = await actions.decide(
            console.rt,
            who,
            "api",
            request.path_params["request_id"],
            request.path_params["kind"],
            comment=body.get("comment"),
            reason=body.get("reason"),
            args=body.get("args"),
            version=version,
            read_only=console.config.read_only,
        )
    except Refusal as exc:
        return _error(exc.status, exc.code, exc.message)
    return _json(decided)
