"""Cross-site request forgery: every form POST carries this browser's synchronizer token,
and comes from the console's own origin.

The token lives in the signed session cookie (``auth.Session.csrf``) and in each form the
console renders (a hidden ``csrf`` field, or the ``X-CSRF-Token`` header htmx sends); a POST
whose token does not match the cookie's is refused, and so is one whose ``Origin`` (or, when
a browser sends none, ``Referer``) is not the console's own host. The JSON API takes no
cookies for POSTs in token mode (``Authorization: Bearer`` only) and requires
``Content-Type: application/json`` in every mode, which a cross-site form cannot send.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from starlette.requests import Request

from tether.console.auth import Session

HEADER = "x-csrf-token"
FIELD = "csrf"


class CsrfRefused(Exception):
    """A form POST that may have been forged: refused (403), nothing done."""


def same_origin(request: Request) -> None:
    """Refuse a POST from another origin: its ``Origin`` (or ``Referer``) host must be the
    ``Host`` the console was asked on."""
    host = request.headers.get("host", "")
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        referer = request.headers.get("referer")
        if origin is None and referer:
            origin = referer
        else:
            raise CsrfRefused("the request does not say where it comes from (no Origin)")
    if urlsplit(origin).netloc != host:
        raise CsrfRefused(f"the request comes from another origin ({origin})")


def check(request: Request, session: Session | None, token: str | None) -> None:
    """Refuse a form POST without this browser's synchronizer token, or from elsewhere."""
    same_origin(request)
    if session is None:
        raise CsrfRefused("no console session in this browser: reload the page")
    sent = token or request.headers.get(HEADER)
    if not sent or not hmac.compare_digest(sent, session.csrf):
        raise CsrfRefused("the form's security token does not match: reload the page")
