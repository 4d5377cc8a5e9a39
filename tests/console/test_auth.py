"""The console's other ways to know who is asking — a trusted proxy's header, and none at all
(loopback only) — the refusal to listen beyond loopback without authentication, and the
``tether console token`` commands."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import tether
from tests.console.conftest import BASE, LOOPBACK, Client, Store, audit
from tether.cli import main
from tether.console import ConsoleConfig
from tether.console.tokens import TokenFile

PROXY = ("10.0.0.5", 40000)


def proxied(console: Client, **config: object) -> object:
    return console(
        client=PROXY,
        auth="proxy",
        tokens=None,
        trusted_proxies=("10.0.0.0/29",),
        trusted_header="X-Forwarded-User",
        **config,
    )


def test_a_trusted_proxys_header_names_the_user(console: Client, store: Store) -> None:
    c = proxied(console)
    rid = store.requests["refund-42"]
    as_carol = {"X-Forwarded-User": "carol", "X-Forwarded-For": "192.0.2.44, 10.0.0.5"}
    assert "carol" in c.get("/approvals", headers=as_carol).text  # type: ignore[attr-defined]
    r = c.post(  # type: ignore[attr-defined]
        f"/api/approvals/{rid}/approve", headers=as_carol, json={"comment": "via the proxy"}
    )
    assert r.status_code == 200
    [row] = audit(store.db)
    assert (row.identity, row.authenticated, row.remote) == ("carol", True, "192.0.2.44")


def test_the_audited_address_is_the_one_the_proxy_saw_not_one_the_client_wrote(
    console: Client, store: Store
) -> None:
    """A proxy appends the address it saw to ``X-Forwarded-For``; whatever stands before it
    the client wrote itself. The audit log names the last address no trusted proxy added."""
    c = proxied(console)
    rid = store.requests["refund-42"]
    forged = {"X-Forwarded-User": "carol", "X-Forwarded-For": "203.0.113.66, 192.0.2.44, 10.0.0.4"}
    r = c.post(f"/api/approvals/{rid}/approve", headers=forged, json={})  # type: ignore[attr-defined]
    assert r.status_code == 200
    [row] = audit(store.db)
    assert row.remote == "192.0.2.44"


def test_the_proxy_header_from_any_other_address_is_ignored(console: Client, store: Store) -> None:
    c = console(
        client=("10.0.9.9", 40000),
        auth="proxy",
        tokens=None,
        trusted_proxies=("10.0.0.0/29",),
    )
    forged = {"X-Forwarded-User": "carol"}
    assert c.get("/approvals", headers=forged).status_code == 401
    rid = store.requests["refund-42"]
    assert c.post(f"/api/approvals/{rid}/approve", headers=forged, json={}).status_code == 401
    trusted = proxied(console)
    assert trusted.get("/approvals").status_code == 401  # type: ignore[attr-defined]  # no header
    assert audit(store.db) == []


def test_a_proxied_viewer_may_only_look(console: Client, store: Store) -> None:
    c = proxied(console, proxy_viewers=frozenset({"dan"}))
    rid = store.requests["refund-42"]
    r = c.post(  # type: ignore[attr-defined]
        f"/api/approvals/{rid}/approve", headers={"X-Forwarded-User": "dan"}, json={}
    )
    assert r.status_code == 403
    [row] = audit(store.db)
    assert (row.identity, row.outcome) == ("dan", "refused")


def test_a_cross_site_json_post_through_the_proxy_is_refused(console: Client, store: Store) -> None:
    """Behind a proxy the browser's credentials are ambient: a page elsewhere that makes the
    browser POST to the API is refused by its origin."""
    c = proxied(console)
    rid = store.requests["refund-42"]
    r = c.post(  # type: ignore[attr-defined]
        f"/api/approvals/{rid}/approve",
        headers={"X-Forwarded-User": "carol", "Origin": "https://evil.example"},
        json={},
    )
    assert (r.status_code, r.json()["error"]) == (403, "cross_origin")
    ok = c.post(  # type: ignore[attr-defined]
        f"/api/approvals/{rid}/approve",
        headers={"X-Forwarded-User": "carol", "Origin": BASE},
        json={},
    )
    assert ok.status_code == 200


def test_without_authentication_everyone_is_local_a_name_nobody_checked(
    console: Client, store: Store
) -> None:
    """On loopback without authentication, decisions are recorded as ``local``, not
    authenticated: two of them cannot meet a quorum of two."""
    c = console(auth="none", tokens=None, base_url=LOOPBACK)
    page = c.get("/approvals")
    assert page.status_code == 200
    assert "No authentication" in page.text
    rid = store.requests["refund-44"]
    first = c.post(f"/api/approvals/{rid}/approve", json={})
    assert first.json()["status"] == "pending"
    again = c.post(f"/api/approvals/{rid}/approve", json={})
    assert (again.status_code, again.json()["error"]) == (409, "already_approved")
    rows = audit(store.db)
    assert [(r.identity, r.authenticated, r.outcome) for r in rows] == [
        ("local", False, "allowed"),
        ("local", False, "refused"),
    ]


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8470", "10.0.0.9:8470"])
def test_without_authentication_a_request_for_another_host_name_is_refused(
    console: Client, store: Store, host: str
) -> None:
    """A page elsewhere whose name is made to resolve to 127.0.0.1 (DNS rebinding) is, to the
    browser, its own origin: it could read the CSRF token and approve. A console without
    authentication answers only requests that name a loopback host."""
    c = console(auth="none", tokens=None, base_url=LOOPBACK)
    rid = store.requests["refund-42"]
    elsewhere = {"Host": host}
    assert c.get("/approvals", headers=elsewhere).status_code == 421
    r = c.post(f"/api/approvals/{rid}/approve", headers=elsewhere, json={})
    assert r.status_code == 421
    assert "loopback" in r.text
    assert audit(store.db) == []
    for name in ("127.0.0.1:8470", "localhost:8470", "[::1]:8470", "localhost"):
        assert c.get("/approvals", headers={"Host": name}).status_code == 200, name


def test_a_missing_store_is_a_clear_error_before_the_console_listens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing-here.db"
    code = main(["console", "--db", str(missing), "--bind", "127.0.0.1:0"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"no store at '{missing}'" in err
    assert "Traceback" not in err
    assert "serving" not in err  # it never said it was serving
    assert not missing.exists()


@pytest.mark.parametrize("bind", ["0.0.0.0:8470", "192.0.2.10:80", "[::]:8470", "example.com:80"])
def test_listening_beyond_loopback_without_authentication_is_refused(
    bind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(tether.ConfigError, match="without authentication"):
        ConsoleConfig(db=str(tmp_path / "a.db"), auth="none", bind=bind)
    code = main(["console", "--db", str(tmp_path / "a.db"), "--bind", bind])
    assert code == 1
    assert "refusing to listen" in capsys.readouterr().err


@pytest.mark.parametrize("bind", ["127.0.0.1:8470", "localhost:9000", "[::1]:8470"])
def test_loopback_may_be_served_without_authentication(bind: str) -> None:
    assert ConsoleConfig(db="a.db", auth="none", bind=bind).auth == "none"


def test_a_console_needs_what_its_authentication_needs(tmp_path: Path) -> None:
    with pytest.raises(tether.ConfigError, match="needs --tokens"):
        ConsoleConfig(db="a.db", auth="token")
    with pytest.raises(tether.ConfigError, match="needs --trusted-proxies"):
        ConsoleConfig(db="a.db", auth="proxy")
    with pytest.raises(tether.ConfigError, match="--trusted-proxies"):
        ConsoleConfig(db="a.db", auth="proxy", trusted_proxies=("not-a-net",))
    with pytest.raises(tether.ConfigError, match="HOST:PORT"):
        ConsoleConfig(db="a.db", auth="none", bind="8470")


def test_token_add_prints_the_token_once_and_stores_only_its_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.json"
    argv = ["console", "token", "add", "alice", "--role", "approve", "--tokens", str(path)]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    token = out.strip()
    assert token.startswith("tct_")
    assert "shown this once" in err
    assert token not in path.read_text()
    assert token.rsplit("_", 1)[-1] not in path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    entry = TokenFile(path).verify(token)
    assert entry is not None
    assert (entry.user, entry.role) == ("alice", "approve")
    assert TokenFile(path).verify(token[:-1] + ("a" if token[-1] != "a" else "b")) is None

    assert main(["console", "token", "list", "--tokens", str(path)]) == 0
    assert capsys.readouterr().out.startswith("alice\tapprove\t")
    assert main(["console", "token", "revoke", "alice", "--tokens", str(path)]) == 0
    assert TokenFile(path).verify(token) is None
    assert json.loads(path.read_text()) == {"tokens": []}
    assert main(["console", "token", "revoke", "alice", "--tokens", str(path)]) == 1
    bad_role = ["console", "token", "add", "eve", "--role", "admin", "--tokens", str(path)]
    assert main(bad_role) == 2
