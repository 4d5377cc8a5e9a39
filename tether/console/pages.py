"""The console's pages: server-rendered HTML (Jinja2), refreshed live and submitted with htmx.

A page needs a principal: without one it sends the browser to the login page (token mode)
or says the proxy did not authenticate the request. Every form POST is checked for CSRF
(``csrf.py``) before anything else; a refused change re-renders its page with the reason
and the refusal's status code (409, 410, 422 …), so a person sees why at once.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

import tether
from tether.actors.messages import TOO_DEEP, nesting_problem
from tether.console import actions, csrf, views
from tether.console.actions import Refusal
from tether.console.auth import Principal, Session

#: What a redirect after a change says, by code (never free text from the URL).
NOTES = {
    "approved": "Approval recorded.",
    "rejected": "Rejection recorded: the agent is told the reason.",
    "modified": "Modification recorded, as your approval of the new call (approvals of the "
    "old one no longer count).",
    "resolved": "Resolution recorded: the waiting step goes on.",
    "retried": "The dead letter is back in its actor's mailbox.",
    "discarded": "The dead letter was discarded.",
}
_STATUSES = ("pending", "approved", "rejected", "all")
AUDIT_PAGE = 50  # rows of the audit log a page shows


def routes() -> list[Route]:
    return [
        Route("/", _home),
        Route("/login", _login, methods=["GET", "POST"]),
        Route("/logout", _logout, methods=["POST"]),
        Route("/approvals", _approvals),
        Route("/approvals/rows", _approval_rows),
        Route("/approvals/{request_id}", _approval),
        Route("/approvals/{request_id}/live", _approval_live),
        Route("/approvals/{request_id}/check", _check, methods=["POST"]),
        Route("/approvals/{request_id}/{kind:str}", _decide, methods=["POST"]),
        Route("/sessions", _sessions),
        Route("/sessions/{actor_id:path}", _session),
        Route("/tree", _tree),
        Route("/quarantine", _quarantine),
        Route("/quarantine/{key}", _resolve, methods=["POST"]),
        Route("/dead-letters", _dead_letters),
        Route("/dead-letters/{msg_id}/{how}", _dead_letter, methods=["POST"]),
        Route("/audit", _audit),
    ]


# -- plumbing -----------------------------------------------------------------------------------


def _console(request: Request) -> Any:
    return request.app.state.console


def _principal(request: Request) -> Principal | None:
    who: Principal | None = request.state.principal
    return who


def _render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    console = _console(request)
    who = _principal(request)
    session: Session = request.state.session
    base = {
        "me": who,
        "may_change": who is not None and who.role == "approve" and not console.config.read_only,
        "read_only": console.config.read_only,
        "auth_mode": console.config.auth,
        "csrf": session.csrf,
        "refresh": console.config.refresh,
        "path": request.url.path,
        "note": NOTES.get(request.query_params.get("done", "")),
    }
    response: Response = console.templates.TemplateResponse(
        request, name, {**base, **context}, status_code=status
    )
    return response


def _unauthenticated(request: Request) -> Response:
    console = _console(request)
    if console.config.auth == "token":
        if request.headers.get("hx-request"):
            return Response(status_code=401, headers={"HX-Redirect": "/login"})
        return RedirectResponse("/login", status_code=303)
    return _render(
        request,
        "error.html",
        {
            "title": "Not authenticated",
            "message": "This console takes its users from an authenticating proxy, and this "
            "request did not come through it.",
        },
        401,
    )


async def _form(request: Request) -> dict[str, str]:
    form = await request.form()
    return {k: v for k, v in form.items() if isinstance(v, str)}


async def _checked_form(request: Request) -> dict[str, str] | Response:
    """The POSTed form, once its CSRF checks pass (else the 403 page)."""
    form = await _form(request)
    try:
        csrf.check(request, request.state.session, form.get(csrf.FIELD))
    except csrf.CsrfRefused as exc:
        return _render(request, "error.html", {"title": "Refused", "message": str(exc)}, 403)
    return form


# -- login ----------------------------------------------------------------------------------------


async def _home(request: Request) -> Response:
    return RedirectResponse("/approvals", status_code=303)


async def _login(request: Request) -> Response:
    console = _console(request)
    if console.config.auth != "token":
        return RedirectResponse("/approvals", status_code=303)
    if request.method == "GET":
        return _render(request, "login.html", {"error": None})
    form = await _checked_form(request)
    if isinstance(form, Response):
        return form
    entry = console.auth.tokens.verify(form.get("token", "").strip())
    if entry is None:
        return _render(request, "login.html", {"error": "That token is not valid."}, 401)
    # A new session (and CSRF token) on login: a session planted before it is worth nothing.
    request.state.session = Session(user=entry.user, role=entry.role, token_id=entry.id)
    request.state.session_changed = True
    return RedirectResponse("/approvals", status_code=303)


async def _logout(request: Request) -> Response:
    form = await _checked_form(request)
    if isinstance(form, Response):
        return form
    request.state.session_ended = True
    return RedirectResponse("/login", status_code=303)


# -- approvals ----------------------------------------------------------------------------------


def _status(request: Request) -> str:
    status = request.query_params.get("status", "pending")
    return status if status in _STATUSES else "pending"


async def _rows(request: Request) -> dict[str, Any]:
    rt = _console(request).rt
    status = _status(request)
    requests = await views.approvals(rt, None if status == "all" else status)
    now = rt.clock()
    return {"rows": [views.approval_row(a, now) for a in requests], "status": status}


async def _approvals(request: Request) -> Response:
    if _principal(request) is None:
        return _unauthenticated(request)
    return _render(request, "approvals.html", await _rows(request))


async def _approval_rows(request: Request) -> Response:
    if _principal(request) is None:
        return _unauthenticated(request)
    return _render(request, "approval_rows.html", await _rows(request))


async def _approval_page(request: Request, request_id: str, **extra: Any) -> Response:
    rt = _console(request).rt
    status = extra.pop("status_code", 200)
    try:
        page = await views.approval(rt, request_id)
    except tether.ApprovalNotFound:
        return _render(
            request, "error.html", {"title": "No such request", "message": request_id}, 404
        )
    return _render(request, "approval.html", {**page, **extra}, status)


async def _approval(request: Request) -> Response:
    if _principal(request) is None:
        return _unauthenticated(request)
    return await _approval_page(request, request.path_params["request_id"])


async def _approval_live(request: Request) -> Response:
    """The parts of a request's page that change while a person reads it: its status,
    quorum and version (a newer version than the page was drawn with is announced)."""
    if _principal(request) is None:
        return _unauthenticated(request)
    rt = _console(request).rt
    try:
        request_view = await rt.approvals.get(request.path_params["request_id"])
    except tether.ApprovalNotFound:
        return Response(status_code=404)
    seen = request.query_params.get("v", "")
    return _render(
        request,
        "approval_live.html",
        {
            "row": views.approval_row(request_view, rt.clock()),
            "req": request_view,
            "stale": seen.isdigit() and int(seen) != request_view.version,
        },
    )


def _version(form: dict[str, str]) -> int | None:
    text = form.get("version", "")
    return int(text) if text.isdigit() else None


def _json(text: str, what: str = "the arguments are") -> Any:
    """``text`` decoded as JSON, or the 422 refusal saying ``what`` is not JSON."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise Refusal(422, "invalid_json", f"{what} not valid JSON: {exc}") from exc
    except RecursionError:  # deeper than this Python's json parser goes (3.11, 3.12)
        value = None
        too_deep: str | None = TOO_DEEP
    else:
        # Python 3.13's parser goes far deeper: what it decodes is held to tether's own limit,
        # so the same text gets the same answer on every Python version.
        too_deep = nesting_problem(value)
    if too_deep is not None:
        raise Refusal(422, "invalid_json", f"{what} too deep to store: {too_deep}")
    return value


async def _check(request: Request) -> Response:
    """Validate a modification (htmx): the new call and its fingerprint, or the error."""
    if _principal(request) is None:
        return _unauthenticated(request)
    form = await _checked_form(request)
    if isinstance(form, Response):
        return form
    request_id = request.path_params["request_id"]
    try:
        checked = await actions.check_modification(
            _console(request).rt, request_id, _json(form.get("args", ""))
        )
    except Refusal as exc:
        return _render(request, "modify_check.html", {"error": exc.message}, 200)
    return _render(
        request,
        "modify_check.html",
        {
            "error": None,
            "args_json": json.dumps(checked["args"]),
            "args_pretty": views.pretty(checked["args"]),
            "fingerprint": checked["fingerprint"],
            "was": checked["was"],
            "request_id": request_id,
            "version": form.get("version", ""),
            "comment": form.get("comment", ""),
        },
    )


async def _decide(request: Request) -> Response:
    who = _principal(request)
    if who is None:
        return _unauthenticated(request)
    form = await _checked_form(request)
    if isinstance(form, Response):
        return form
    request_id, kind = request.path_params["request_id"], request.path_params["kind"]
    console = _console(request)
    try:
        args = _json(form.get("args", "")) if kind == "modify" else None
        if kind == "modify" and form.get("fingerprint"):
            checked = await actions.check_modification(console.rt, request_id, args)
            if checked["fingerprint"] != form["fingerprint"]:
                raise Refusal(422, "changed", "the arguments are not the ones checked: check again")
        await actions.decide(
            console.rt,
            who,
            "console",
            request_id,
            kind,
            comment=form.get("comment"),
            reason=form.get("reason"),
            args=args,
            version=_version(form),
            read_only=console.config.read_only,
        )
    except Refusal as exc:
        return await _approval_page(request, request_id, error=exc.message, status_code=exc.status)
    done = {"approve": "approved", "reject": "rejected", "modify": "modified"}[kind]
    return RedirectResponse(f"/approvals/{request_id}?done={done}", status_code=303)


# -- sessions and the tree ----------------------------------------------------------------------


async def _listing(
    request: Request, template: str, key: str, load: Callable[[Any], Awaitable[Any]]
) -> Response:
    """A page that shows one listing of the store (``load(rt)``) under ``key``."""
    if _principal(request) is None:
        return _unauthenticated(request)
    return _render(request, template, {key: await load(_console(request).rt)})


async def _sessions(request: Request) -> Response:
    return await _listing(request, "sessions.html", "sessions", views.sessions)


async def _session(request: Request) -> Response:
    if _principal(request) is None:
        return _unauthenticated(request)
    actor_id = request.path_params["actor_id"]
    try:
        page = await views.session(_console(request).rt, actor_id)
    except tether.ActorNotFound:
        return _render(
            request, "error.html", {"title": "No such session", "message": actor_id}, 404
        )
    return _render(request, "session.html", page)


async def _tree(request: Request) -> Response:
    return await _listing(request, "tree.html", "roots", views.tree)


# -- quarantine and dead letters ------------------------------------------------------------------


async def _quarantine(request: Request) -> Response:
    return await _listing(request, "quarantine.html", "effects", views.quarantine)


async def _change(
    request: Request,
    make: Callable[[Any, Principal, dict[str, str]], Awaitable[None]],
    done: str,
    page: tuple[str, str, Callable[[Any], Awaitable[Any]]],
) -> Response:
    """A form POST that changes something: authenticated, CSRF-checked, made by ``make``
    (console, principal, form); the page ``done`` after it. A refusal draws the listing
    ``page`` (template, key, load) again with the reason above it, and its status: the
    person sees why where they were, their other choices beside it."""
    who = _principal(request)
    if who is None:
        return _unauthenticated(request)
    form = await _checked_form(request)
    if isinstance(form, Response):
        return form
    try:
        await make(_console(request), who, form)
    except Refusal as exc:
        template, key, load = page
        listing = await load(_console(request).rt)
        return _render(request, template, {key: listing, "error": exc.message}, exc.status)
    return RedirectResponse(done, status_code=303)


async def _resolve(request: Request) -> Response:
    async def make(console: Any, who: Principal, form: dict[str, str]) -> None:
        how = form.get("how", "")
        given = form.get("result", "").strip()
        result = _json(given, "the result is") if how == "done" and given else None
        await actions.resolve(
            console.rt,
            who,
            request.path_params["key"],
            how,
            result=result,
            reason=form.get("reason"),
            read_only=console.config.read_only,
        )

    page = ("quarantine.html", "effects", views.quarantine)
    return await _change(request, make, "/quarantine?done=resolved", page)


async def _dead_letters(request: Request) -> Response:
    return await _listing(request, "dead_letters.html", "letters", views.dead_letters)


async def _dead_letter(request: Request) -> Response:
    how = request.path_params["how"]

    async def make(console: Any, who: Principal, form: dict[str, str]) -> None:
        msg_id = request.path_params["msg_id"]
        await actions.dead_letter(console.rt, who, msg_id, how, read_only=console.config.read_only)

    done = "retried" if how == "retry" else "discarded"
    page = ("dead_letters.html", "letters", views.dead_letters)
    return await _change(request, make, f"/dead-letters?done={done}", page)


# -- audit ----------------------------------------------------------------------------------------


async def _audit(request: Request) -> Response:
    """The audit log, newest first, 50 rows a page; ``?target=`` (a request id, an effect's
    key, a dead letter) or ``?actor=`` keeps one trail."""
    if _principal(request) is None:
        return _unauthenticated(request)
    query = request.query_params
    before_text = query.get("before", "")
    before = int(before_text) if before_text.isdigit() else None
    target, actor = query.get("target") or None, query.get("actor") or None
    rows = await views.audit(_console(request).rt, before, AUDIT_PAGE, target=target, actor=actor)
    older = None
    if len(rows) == AUDIT_PAGE:
        kept = {k: v for k, v in (("target", target), ("actor", actor)) if v}
        older = "/audit?" + urlencode({**kept, "before": rows[-1]["seq"]})
    return _render(
        request, "audit.html", {"rows": rows, "older": older, "target": target, "actor": actor}
    )
