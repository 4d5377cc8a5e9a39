"""Quarantined effects (done / retry / abort) and dead letters (retry / discard) resolved from
the console's pages by role ``approve``; refused for a viewer and on a read-only console;
every attempt audited."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from starlette.testclient import TestClient

import tether
from tests.console.conftest import BASE, Tokens, audit
from tests.console.test_pages import ORIGIN, login
from tests.runtime import effect_actors as fx
from tests.test_cli import _build
from tether.console import ConsoleConfig, create_app


@pytest.fixture
def held(tmp_path: Path) -> Iterator[Path]:
    """A store with a quarantined effect (a1's email) and a dead letter (acct's Fail)."""
    db = tmp_path / "held.db"
    anyio.run(_build, db, backend="asyncio")
    yield db
    fx.reset()


def client(db: Path, tokens: Tokens, **config: object) -> TestClient:
    app = create_app(ConsoleConfig(db=str(db), auth="token", tokens=str(tokens.path), **config))  # type: ignore[arg-type]
    return TestClient(app, base_url=BASE, client=("127.0.0.1", 5000), follow_redirects=False)


async def _quarantined(db: Path) -> list[tether.QuarantinedEffect]:
    async with tether.Runtime(db, serve=False) as rt:
        return await rt.quarantine.list()


async def _letters(db: Path) -> list[tether.DeadLetter]:
    async with tether.Runtime(db, serve=False) as rt:
        return await rt.dead_letters.list()


@pytest.mark.parametrize(
    ("how", "extra", "status"),
    [
        ("retry", {}, "retry"),
        ("done", {"result": '"sent"'}, "done"),
        ("abort", {"reason": "the customer called"}, "aborted"),
    ],
)
def test_a_quarantined_effect_is_resolved_from_its_page(
    held: Path, tokens: Tokens, how: str, extra: dict[str, str], status: str
) -> None:
    [effect] = anyio.run(_quarantined, held, backend="asyncio")
    with client(held, tokens) as c:
        token = login(c, tokens.alice)
        page = c.get("/quarantine").text
        assert effect.key in page
        assert effect.tool in page
        r = c.post(
            f"/quarantine/{effect.key}", data={"csrf": token, "how": how, **extra}, headers=ORIGIN
        )
        assert (r.status_code, r.headers["location"]) == (303, "/quarantine?done=resolved")
        again = c.post(
            f"/quarantine/{effect.key}", data={"csrf": token, "how": how, **extra}, headers=ORIGIN
        )
        assert again.status_code == 404
    assert anyio.run(_quarantined, held, backend="asyncio") == []
    allowed, refused = audit(held)
    assert (allowed.identity, allowed.via, allowed.action, allowed.outcome) == (
        "alice",
        "console",
        f"effect.{how}",
        "allowed",
    )
    assert allowed.actor_id == "a1"
    assert refused.outcome == "refused"


def test_a_result_that_is_not_json_is_refused_on_the_quarantine_page(
    held: Path, tokens: Tokens
) -> None:
    [effect] = anyio.run(_quarantined, held, backend="asyncio")
    with client(held, tokens) as c:
        token = login(c, tokens.alice)
        r = c.post(
            f"/quarantine/{effect.key}",
            data={"csrf": token, "how": "done", "result": "sent it by hand"},
            headers=ORIGIN,
        )
        assert r.status_code == 422
        said = re.search(r'<div class="error" id="error">([^<]*)</div>', r.text)
        assert said is not None
        assert said.group(1).startswith("the result is not valid JSON")
        assert effect.key in r.text  # the quarantine page again, its forms and the effect
        assert "Mark done" in r.text
    assert [e.key for e in anyio.run(_quarantined, held, backend="asyncio")] == [effect.key]


def test_a_dead_letter_is_retried_or_discarded_from_its_page(held: Path, tokens: Tokens) -> None:
    [letter] = anyio.run(_letters, held, backend="asyncio")
    with client(held, tokens) as c:
        token = login(c, tokens.alice)
        assert letter.msg_id in c.get("/dead-letters").text
        r = c.post(f"/dead-letters/{letter.msg_id}/retry", data={"csrf": token}, headers=ORIGIN)
        assert (r.status_code, r.headers["location"]) == (303, "/dead-letters?done=retried")
        assert "back in its actor" in c.get(r.headers["location"]).text
        gone = c.post(
            f"/dead-letters/{letter.msg_id}/discard", data={"csrf": token}, headers=ORIGIN
        )
        assert gone.status_code == 404
    assert [(a.action, a.outcome) for a in audit(held)] == [
        ("dead_letter.retry", "allowed"),
        ("dead_letter.discard", "refused"),
    ]


def test_a_viewer_and_a_read_only_console_resolve_nothing(held: Path, tokens: Tokens) -> None:
    [effect] = anyio.run(_quarantined, held, backend="asyncio")
    [letter] = anyio.run(_letters, held, backend="asyncio")
    with client(held, tokens) as c:
        token = login(c, tokens.victor)
        page = c.get("/quarantine").text
        assert "Mark done" not in page
        r = c.post(
            f"/quarantine/{effect.key}", data={"csrf": token, "how": "retry"}, headers=ORIGIN
        )
        assert r.status_code == 403
        r = c.post(f"/dead-letters/{letter.msg_id}/discard", data={"csrf": token}, headers=ORIGIN)
        assert r.status_code == 403
    assert [(a.identity, a.outcome) for a in audit(held)] == [
        ("victor", "refused"),
        ("victor", "refused"),
    ]
    with client(held, tokens, read_only=True) as c:
        token = login(c, tokens.alice)
        assert "Read-only console" in c.get("/quarantine").text
        r = c.post(
            f"/quarantine/{effect.key}", data={"csrf": token, "how": "retry"}, headers=ORIGIN
        )
        assert r.status_code == 403
        assert "read-only" in r.text
    assert len(audit(held)) == 2  # a read-only console writes nothing
    assert [e.key for e in anyio.run(_quarantined, held, backend="asyncio")] == [effect.key]
