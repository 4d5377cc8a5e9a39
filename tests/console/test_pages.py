"""The console's pages under Starlette's test client: logging in with a token, the session
cookie, CSRF refusals (no token, a wrong one, another origin), security headers, every page
rendering what a reviewer needs, roles, revocation, and decisions made from forms."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.console.conftest import BASE, Client, Store, Tokens, audit

ORIGIN = {"Origin": BASE}


def login(c: TestClient, token: str) -> str:
    """Log in through the form; the CSRF token of the new session."""
    page = c.get("/login")
    assert page.status_code == 200
    r = c.post("/login", data={"token": token, "csrf": csrf_of(page.text)}, headers=ORIGIN)
    assert (r.status_code, r.headers["location"]) == (303, "/approvals")
    return csrf_of(c.get("/approvals").text)


def submit(c: TestClient, path: str, token: str, **fields: str) -> Any:  # httpx's Response
    """POST a form of the console as its own page does: this browser's CSRF token, from the
    console's origin."""
    return c.post(path, data={"csrf": token, **fields}, headers=ORIGIN)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf-token" content="([^"]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


def test_pages_send_an_unauthenticated_browser_to_the_login_page(console: Client) -> None:
    c = console()
    for path in ("/approvals", "/sessions", "/tree", "/audit", "/quarantine", "/dead-letters"):
        r = c.get(path)
        assert (r.status_code, r.headers["location"]) == (303, "/login"), path
    r = c.get("/approvals/rows", headers={"HX-Request": "true"})
    assert (r.status_code, r.headers["hx-redirect"]) == (401, "/login")


def test_a_token_logs_in_with_a_strict_httponly_session_cookie(
    console: Client, tokens: Tokens
) -> None:
    c = console()
    page = c.get("/login")
    bad = c.post("/login", data={"token": "tct_x_y", "csrf": csrf_of(page.text)}, headers=ORIGIN)
    assert bad.status_code == 401
    assert "not valid" in bad.text
    r = c.post("/login", data={"token": tokens.alice, "csrf": csrf_of(page.text)}, headers=ORIGIN)
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert tokens.alice not in cookie  # the session names the token's id, never the token
    assert "alice" in c.get("/approvals").text


def test_every_response_carries_the_security_headers(console: Client, tokens: Tokens) -> None:
    c = console()
    login(c, tokens.alice)
    for path in ("/approvals", "/login", "/api/approvals", "/static/console.css"):
        h = c.get(path).headers
        assert "default-src 'self'" in h["content-security-policy"], path
        assert "frame-ancestors 'none'" in h["content-security-policy"]
        assert h["x-content-type-options"] == "nosniff"
        assert h["x-frame-options"] == "DENY"
        assert h["referrer-policy"] == "same-origin"
        assert h["cache-control"] == "no-store"


def test_htmx_is_served_from_the_package_and_no_page_loads_anything_from_elsewhere(
    console: Client, tokens: Tokens, store: Store
) -> None:
    c = console()
    login(c, tokens.alice)
    js = c.get("/static/htmx.min.js")
    assert js.status_code == 200
    assert "htmx" in js.text[:2000]
    for path in ("/approvals", f"/approvals/{store.requests['refund-42']}", "/sessions/refund-42"):
        html = c.get(path).text
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources, path
        assert all(not s.startswith(("http:", "https:", "//")) for s in sources), sources
        assert "<script>" not in html  # no inline script: the CSP forbids it
        assert 'style="' not in html  # nor inline styles


@pytest.mark.parametrize(
    ("headers", "token", "why"),
    [
        (ORIGIN, None, "security token does not match"),
        (ORIGIN, "forged", "security token does not match"),
        ({"Origin": "https://evil.example"}, "good", "another origin"),
        ({"Origin": "null"}, "good", "does not say where it comes from"),
        ({}, "good", "does not say where it comes from"),
    ],
)
def test_a_form_post_without_this_browsers_token_or_from_elsewhere_is_refused(
    console: Client,
    tokens: Tokens,
    store: Store,
    headers: dict[str, str],
    token: str | None,
    why: str,
) -> None:
    c = console()
    good = login(c, tokens.alice)
    rid = store.requests["refund-42"]
    form = {"version": "0"}
    if token is not None:
        form["csrf"] = good if token == "good" else token
    r = c.post(f"/approvals/{rid}/approve", data=form, headers=headers)
    assert r.status_code == 403
    assert why in r.text
    assert audit(store.db) == []  # refused before it reached the desk: nothing happened


def test_approving_from_the_page_records_the_logged_in_person(
    console: Client, tokens: Tokens, store: Store
) -> None:
    c = console()
    token = login(c, tokens.alice)
    rid = store.requests["refund-42"]
    r = submit(
        c,
        f"/approvals/{rid}/approve",
        token,
        version="0",
        comment="customer verified",
        by="mallory",
    )
    assert (r.status_code, r.headers["location"]) == (303, f"/approvals/{rid}?done=approved")
    page = c.get(r.headers["location"]).text
    assert "Approval recorded." in page
    assert "customer verified" in page
    [row] = audit(store.db)
    assert (row.identity, row.via, row.outcome, row.remote) == (
        "alice",
        "console",
        "allowed",
        "127.0.0.1",
    )


def test_a_refused_decision_shows_why_with_its_status(
    console: Client, tokens: Tokens, store: Store
) -> None:
    c = console()
    token = login(c, tokens.alice)
    rid = store.requests["refund-42"]
    stale = c.post(
        f"/approvals/{rid}/approve", data={"csrf": token, "version": "7"}, headers=ORIGIN
    )
    assert stale.status_code == 409
    assert "changed since it was read" in stale.text
    no_reason = c.post(
        f"/approvals/{rid}/reject", data={"csrf": token, "version": "0"}, headers=ORIGIN
    )
    assert no_reason.status_code == 422
    assert "needs a reason" in no_reason.text


def test_the_approval_page_shows_the_call_its_context_and_the_session(
    console: Client, tokens: Tokens, store: Store
) -> None:
    c = console()
    login(c, tokens.alice)
    rid = store.requests["refund-43"]
    page = c.get(f"/approvals/{rid}").text
    for expected in (
        "refund",
        "&#34;amount_cents&#34;: 90000",  # the pretty arguments
        "fingerprint",
        "tool refund requires approval",  # why it waits
        "Resolve the customer&#39;s refund request",  # the session's goal
        "order 43: asked for a refund by email",  # the context the agent gave
        "at the deadline the request is rejected",
        "Approve this call",
        "Reject",
        "Modify the arguments",
        "lookup_order",  # the ledger
        "model: call lookup_order",  # the journal, as a person reads it
        "amount_cents",  # the tool's schema
    ):
        assert expected in page, expected
    listing = c.get("/approvals").text
    assert rid in listing
    assert "1 of 1" not in listing
    assert "0 of 1" in listing
    assert "0 of 2" in listing  # refund-44 needs two people


def test_a_modification_is_checked_before_it_is_confirmed(
    console: Client, tokens: Tokens, store: Store
) -> None:
    c = console()
    token = login(c, tokens.alice)
    rid = store.requests["refund-42"]
    bad = c.post(
        f"/approvals/{rid}/check",
        data={"csrf": token, "version": "0", "args": '{"order_id": "42", "amount_cents": "all"}'},
        headers=ORIGIN,
    )
    assert "invalid arguments" in bad.text
    assert "amount_cents" in bad.text
    broken = c.post(f"/approvals/{rid}/check", data={"csrf": token, "args": "{"}, headers=ORIGIN)
    assert "not valid JSON" in broken.text
    deep = "[" * 1000 + "]" * 1000  # deeper than json's parser goes: it was a bare 500
    deeper = c.post(f"/approvals/{rid}/check", data={"csrf": token, "args": deep}, headers=ORIGIN)
    assert "more than 256 levels deep" in deeper.text
    good = c.post(
        f"/approvals/{rid}/check",
        data={"csrf": token, "version": "0", "args": '{"order_id": "42", "amount_cents": 900}'},
        headers=ORIGIN,
    )
    assert "new fingerprint" in good.text
    fingerprint = re.search(r'name="fingerprint" value="([0-9a-f]+)"', good.text)
    assert fingerprint is not None
    assert audit(store.db) == []  # a check decides nothing
    r = c.post(
        f"/approvals/{rid}/modify",
        data={
            "csrf": token,
            "version": "0",
            "args": '{"order_id": "42", "amount_cents": 900}',
            "fingerprint": fingerprint.group(1),
        },
        headers=ORIGIN,
    )
    assert r.status_code == 303
    page = c.get(f"/approvals/{rid}").text
    assert fingerprint.group(1) in page
    assert "Modified." in page


def test_a_modifications_new_arguments_are_listed_with_its_decision(
    console: Client, tokens: Tokens, store: Store
) -> None:
    c = console()
    token = login(c, tokens.alice)
    rid = store.requests["refund-44"]
    r = submit(
        c,
        f"/approvals/{rid}/modify",
        token,
        version="0",
        args='{"order_id": "44", "amount_cents": 4321}',
        comment="half now, half when it is back",
    )
    assert r.status_code == 303
    page = c.get(f"/approvals/{rid}").text
    decisions = page[page.index("Decisions so far") :]
    assert "modify" in decisions
    assert "half now, half when it is back" in decisions
    assert "4321" in decisions  # what the call became, beside who made it so


def test_a_person_who_already_counts_is_not_offered_approve_again(
    console: Client, tokens: Tokens, store: Store
) -> None:
    c = console()
    token = login(c, tokens.alice)
    rid = store.requests["refund-44"]  # two people must approve
    assert submit(c, f"/approvals/{rid}/approve", token, version="0").status_code == 303
    page = c.get(f"/approvals/{rid}").text
    assert 'id="approve"' not in page
    assert "You approved this call" in page
    assert "1 more person" in page
    assert 'id="reject"' in page  # she may still change her mind and reject it
    bob = console()
    login(bob, tokens.bob)
    assert 'id="approve"' in bob.get(f"/approvals/{rid}").text


def test_a_viewer_is_not_asked_to_decide(console: Client, tokens: Tokens, store: Store) -> None:
    c = console()
    login(c, tokens.victor)
    page = c.get(f"/approvals/{store.requests['refund-42']}").text
    assert "Approve <span" not in page  # the heading asks nothing of a viewer
    assert "waits for approval" in page


def test_the_browser_finds_the_consoles_icon(console: Client, tokens: Tokens) -> None:
    c = console()
    page = c.get("/login").text
    icon = re.search(r'<link rel="icon" href="([^"]+)"', page)
    assert icon is not None
    assert c.get(icon.group(1)).headers["content-type"].startswith("image/svg+xml")
    assert c.get("/favicon.ico").status_code in (200, 301, 302, 307, 308)


def test_a_viewer_sees_no_buttons_and_is_refused_403(
    console: Client, tokens: Tokens, store: Store
) -> None:
    c = console()
    token = login(c, tokens.victor)
    rid = store.requests["refund-42"]
    page = c.get(f"/approvals/{rid}").text
    assert "Approve this call" not in page
    assert "may only look" in page
    r = c.post(f"/approvals/{rid}/approve", data={"csrf": token, "version": "0"}, headers=ORIGIN)
    assert r.status_code == 403
    [row] = audit(store.db)
    assert (row.identity, row.outcome) == ("victor", "refused")


def test_a_revoked_token_ends_its_sessions(console: Client, tokens: Tokens) -> None:
    from tether.console.tokens import TokenFile

    c = console()
    login(c, tokens.bob)
    assert c.get("/approvals").status_code == 200
    assert TokenFile(tokens.path).revoke("bob") == 1
    assert c.get("/approvals").status_code == 303


def test_logging_out_ends_the_session(console: Client, tokens: Tokens) -> None:
    c = console()
    token = login(c, tokens.alice)
    r = c.post("/logout", data={"csrf": token}, headers=ORIGIN)
    assert (r.status_code, r.headers["location"]) == (303, "/login")
    assert c.get("/approvals").status_code == 303


def test_the_other_pages_render_what_they_hold(
    console: Client, tokens: Tokens, store: Store
) -> None:
    c = console()
    login(c, tokens.alice)
    sessions = c.get("/sessions").text
    assert all(s in sessions for s in ("refund-42", "refund-43", "refund-44"))
    session = c.get("/sessions/refund-42").text
    assert "<svg" in session
    assert "Timeline" in session
    for lane in ("Tasks", "Steps", "Model", "Tools", "Approvals"):
        assert f">{lane}</text>" in session
    assert "held for approval" in session
    tree = c.get("/tree").text
    assert "tether.guards" in tree
    assert "refund-42" in tree
    assert "No effect is quarantined." in c.get("/quarantine").text
    assert "No dead letters." in c.get("/dead-letters").text
    assert "Nothing audited yet." in c.get("/audit").text
    assert c.get("/sessions/nobody").status_code == 404
    assert c.get("/approvals/apr-none").status_code == 404


def test_a_requests_audit_trail_is_one_click_from_its_page(
    console: Client, tokens: Tokens, store: Store
) -> None:
    c = console()
    token = login(c, tokens.alice)
    mine, other = store.requests["refund-42"], store.requests["refund-43"]
    for rid in (mine, other):
        assert submit(c, f"/approvals/{rid}/approve", token, version="0").status_code == 303
    link = f'href="/audit?target={mine}"'
    assert link in c.get(f"/approvals/{mine}").text
    trail = c.get(f"/audit?target={mine}").text
    assert mine in trail
    assert other not in trail
    assert "refund-42" in c.get("/audit?actor=refund-42").text
    assert other not in c.get("/audit?actor=refund-42").text
    everything = c.get("/audit").text
    assert mine in everything
    assert other in everything


def test_the_shipped_htmx_is_the_documented_release_with_its_license() -> None:
    import hashlib
    from pathlib import Path

    import tether.console

    static = Path(tether.console.__file__).parent / "static"
    digest = hashlib.sha256((static / "htmx.min.js").read_bytes()).hexdigest()
    assert digest in (static / "README.md").read_text()
    assert "htmx 2.0.11" in (static / "README.md").read_text()
    assert "Zero-Clause BSD" in (static / "htmx.LICENSE").read_text()
