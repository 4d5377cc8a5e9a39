"""The console in a real browser, used as people use it: Debian's Chromium driven by Playwright
(``executable_path="/usr/bin/chromium"``, no browser download).

An agent runtime runs in a process of its own (``tests.console.agent_program``) and asks to
refund two orders; both refunds wait for approval. The console runs in another process
(``tether console``). Alice logs in, reads the request with its context, tries an invalid
modification and sees the validation error, modifies validly (the new fingerprint shown
before she confirms); Bob, the second of the two approvers the refund needs, approves it. The
agent's answer shows that the modified refund ran, once (the refunds log, the world's own
record, has one line). Bob rejects the other refund with a reason, which reaches its agent.
The audit page lists it all. Screenshots of every page are saved to ``$TETHER_ARTIFACTS``
(else the test's temporary directory) and the directory is printed.

Without Chromium or Playwright the test is skipped, unless ``TETHER_REQUIRE_BROWSER=1``
(CI sets it; ``.ci/run`` installs Chromium when it is missing): then it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.harness import ROOT, Child
from tether.console.tokens import TokenFile

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
WAIT = 30.0

pytestmark = pytest.mark.slow


def _browser_missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; never playwright install)"
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = _browser_missing()
    if missing is not None:
        if os.environ.get("TETHER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"TETHER_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(what: str, check: Any, timeout: float = WAIT, *children: Child) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(
        f"timed out waiting for {what}\n" + "\n".join(c.describe() for c in children)
    )


class Shots:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.n = 0

    def take(self, page: Any, name: str) -> None:
        self.n += 1
        page.screenshot(path=str(self.folder / f"{self.n:02d}-{name}.png"), full_page=True)


def test_people_decide_refunds_in_a_browser_and_the_agent_hears_each_decision(
    browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shots = Shots(Path(os.environ.get("TETHER_ARTIFACTS") or tmp_path) / "console-screenshots")
    print(f"\nconsole screenshots: {shots.folder}")
    db, log = tmp_path / "agents.db", tmp_path / "refunds.jsonl"
    tokens = TokenFile(tmp_path / "tokens.json")
    alice, bob = tokens.add("alice", "approve"), tokens.add("bob", "approve")
    monkeypatch.setenv("REFUNDS_LOG", str(log))

    agent = Child(
        tmp_path, "agent", str(db), "44:careful", "43", module="tests.console.agent_program"
    )
    console: Child | None = None
    try:
        agent.wait_report("ready", WAIT)
        port = _free_port()
        console = Child(
            tmp_path,
            "console",
            "console",
            *("--db", db, "--auth", "token", "--tokens", tokens.path),
            *("--bind", f"127.0.0.1:{port}", "--app-dir", ROOT, "--refresh", "1"),
            module="tether",
        )
        base = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        _wait_for("the console to listen", healthy, WAIT, console)

        def pending() -> list[dict[str, Any]] | None:
            req = urllib.request.Request(
                f"{base}/api/approvals", headers={"Authorization": f"Bearer {alice}"}
            )
            with urllib.request.urlopen(req, timeout=2) as r:
                rows: list[dict[str, Any]] = json.loads(r.read())
            return rows if len(rows) == 2 else None

        requests = {r["session_id"]: r for r in _wait_for("two refunds held", pending, WAIT, agent)}
        big, other = requests["refund-44"], requests["refund-43"]

        # -- alice: logs in, reads the request, modifies it ----------------------------------
        a = browser.new_context(viewport={"width": 1360, "height": 900}).new_page()
        a.goto(f"{base}/approvals")
        assert a.url.endswith("/login")
        shots.take(a, "login")
        a.fill("#token", alice)
        a.click("button[type=submit]")
        a.wait_for_url(f"{base}/approvals")
        a.wait_for_selector(f"a[href='/approvals/{big['request_id']}']")
        assert "0 of 2" in a.inner_text("#rows")
        shots.take(a, "approvals")

        a.click(f"a[href='/approvals/{big['request_id']}']")
        a.wait_for_selector("#args")
        assert json.loads(a.inner_text("#args")) == {"order_id": "44", "amount_cents": 7250}
        body = a.inner_text("main")
        assert "order 44: asked for a refund by email" in body  # the context
        assert "Resolve the customer's refund request" in body  # the session's goal
        assert "tool refund requires approval" in body
        assert big["fingerprint"] in body
        shots.take(a, "approval")

        a.click("#modify summary")
        a.fill("#new-args", '{"order_id": "44", "amount_cents": "half"}')
        a.click("#check-button")
        a.wait_for_selector("#check-error")
        assert "amount_cents" in a.inner_text("#check-error")
        shots.take(a, "modify-invalid")

        a.fill("#new-args", '{"order_id": "44", "amount_cents": 5000}')
        a.click("#check-button")
        a.wait_for_selector("#check-ok")
        checked = a.inner_text("#check-ok")
        assert "new fingerprint" in checked
        assert big["fingerprint"] in checked  # what it was, beside what it becomes
        shots.take(a, "modify-checked")
        a.click("#confirm-modify")
        a.wait_for_selector("text=Modification recorded")
        assert "1 of 2" in a.inner_text("#live")
        assert json.loads(a.inner_text("#args")) == {"order_id": "44", "amount_cents": 5000}
        assert "You approved this call" in a.inner_text("#counted")  # not offered it again
        assert a.query_selector("#approve") is None
        assert '"amount_cents": 5000' in a.inner_text("text=Decisions so far >> xpath=..")
        shots.take(a, "modified")

        # -- bob: approves the modified refund, rejects the other -----------------------------
        b = browser.new_context(viewport={"width": 1360, "height": 900}).new_page()
        b.goto(f"{base}/login")
        b.fill("#token", bob)
        b.click("button[type=submit]")
        b.wait_for_url(f"{base}/approvals")
        b.goto(f"{base}/approvals/{big['request_id']}")
        assert "Modified." in b.inner_text("main")
        b.click("#approve")
        b.wait_for_selector("text=Approval recorded")
        assert "approved" in b.inner_text("#live")
        shots.take(b, "approved")

        b.goto(f"{base}/approvals/{other['request_id']}")
        b.click("#reject")  # the reason is required: the browser keeps the form
        assert b.url.endswith(other["request_id"])
        b.fill("#reason", "Order 43 was already refunded by phone")
        b.click("#reject")
        b.wait_for_selector("text=Rejection recorded")
        shots.take(b, "rejected")

        # -- the agent hears both ----------------------------------------------------------
        def answers() -> dict[str, Any] | None:
            found = {
                line.split(" ", 1)[0]: json.loads(line.split(" ", 1)[1])
                for line in (
                    x.removeprefix("answer=") for x in agent.lines() if x.startswith("answer=")
                )
            }
            return found if len(found) == 2 else None

        told = _wait_for("the agent's answers", answers, WAIT, agent)
        assert told["refund-44"]["answer"] == "Done: refunded 5000 cents on order 44."
        assert "Order 43 was already refunded by phone" in told["refund-43"]["answer"]
        assert "bob" in told["refund-43"]["answer"]
        refunds = [json.loads(x) for x in log.read_text().splitlines()]
        assert [(r["order_id"], r["cents"]) for r in refunds] == [("44", 5000)]  # once, modified
        assert agent.wait(WAIT) == 0

        # -- what everyone can look at afterwards ---------------------------------------------
        a.goto(f"{base}/approvals/{other['request_id']}")
        a.click("text=audit trail")
        a.wait_for_url(f"{base}/audit?target={other['request_id']}")
        assert "Order 43 was already refunded by phone" in a.inner_text("table")
        a.goto(f"{base}/audit")
        audit = a.inner_text("table")
        for row in ("modify", "approve", "reject"):
            assert row in audit
        assert "alice" in audit
        assert "bob" in audit
        assert "Order 43 was already refunded by phone" in audit
        shots.take(a, "audit")
        a.goto(f"{base}/sessions/refund-44")
        a.wait_for_selector("svg.timeline")
        assert "refunded 5000 cents" in a.inner_text("main")
        shots.take(a, "session-timeline")
        a.goto(f"{base}/sessions")
        shots.take(a, "sessions")
        a.goto(f"{base}/tree")
        assert "refund-44" in a.inner_text("main")
        shots.take(a, "tree")
        a.goto(f"{base}/approvals?status=all")
        shots.take(a, "approvals-all")

        # no secret reached a log: the console's access log names paths, never tokens
        logs = console.out.read_text() + console.err.read_text()
        assert "GET /approvals" in logs
        for token in (alice, bob):
            assert token not in logs
            assert token.rsplit("_", 1)[-1] not in logs
    finally:
        agent.reap()
        if console is not None:
            console.reap()
