"""Fixtures of the console's tests: a store with refunds waiting for approval (made by a real
runtime, then closed), a token file, and the console app under Starlette's test client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

import tether
from tests.console.agents import GOAL, CarefulRefundAgent, RefundAgent
from tether.console import ConsoleConfig, create_app
from tether.console.tokens import TokenFile

BASE = "http://console.test"
LOOPBACK = "http://127.0.0.1:8470"  # a console without authentication answers loopback names only


@dataclass
class Store:
    db: Path | str  # an SQLite file, or a PostgreSQL store's URL
    requests: dict[str, str]  # session id -> its pending request id


#: The sessions every console test's store holds: refund-42 and refund-43 wait for one approver
#: each, refund-44 for two.
ORDERS: dict[str, type[Any]] = {"42": RefundAgent, "43": RefundAgent, "44": CarefulRefundAgent}


def hold(db: Path | str, orders: dict[str, type[Any]]) -> Store:
    """Run an agent runtime on ``db`` until each session (``refund-<order>``, of the class
    given) holds its refund for approval; then close it. The requests, by session."""

    async def run() -> dict[str, str]:
        async with tether.Runtime(db, poll_interval=0.02) as rt:
            for order, cls in orders.items():
                ref = await rt.spawn(cls, f"refund-{order}", goal=GOAL)
                await ref.tell(tether.UserMessage(f"please refund order {order}"))
            sessions = [f"refund-{order}" for order in orders]
            held: dict[str, str] = {}
            with anyio.fail_after(20):
                while len(held) < len(sessions):
                    for session in sessions:
                        for request in await rt.store.find_approvals(actor_id=session):
                            held[session] = request.request_id
                    await anyio.sleep(0.02)
            return held

    return Store(db, anyio.run(run, backend="asyncio"))


@pytest.fixture(scope="session")
def _template(tmp_path_factory: pytest.TempPathFactory) -> Store:
    db = tmp_path_factory.mktemp("console") / "agents.db"
    return hold(db, ORDERS)


def copy_of(template: Store, folder: Path) -> Store:
    """A fresh copy of the template's SQLite file in ``folder``."""
    db = folder / "agents.db"
    db.write_bytes(Path(template.db).read_bytes())
    return Store(db, dict(template.requests))


@pytest.fixture
def store(_template: Store, tmp_path: Path) -> Store:
    """A fresh copy of a store where refund-42 and refund-43 (one approver each) and
    refund-44 (two approvers) wait for approval."""
    return copy_of(_template, tmp_path)


@dataclass
class Tokens:
    path: Path
    alice: str
    bob: str
    victor: str  # role view


@pytest.fixture
def tokens(tmp_path: Path) -> Tokens:
    path = tmp_path / "tokens.json"
    file = TokenFile(path)
    return Tokens(
        path,
        alice=file.add("alice", "approve"),
        bob=file.add("bob", "approve"),
        victor=file.add("victor", "view"),
    )


Client = Callable[..., TestClient]


@pytest.fixture
def console(store: Store, tokens: Tokens) -> Iterator[Client]:
    """``console(**config)``: a started console on ``store`` (token mode unless told), as a
    test client; closed after the test."""
    started: list[TestClient] = []

    def make(
        client: tuple[str, int] = ("127.0.0.1", 50000), base_url: str = BASE, **config: Any
    ) -> TestClient:
        settings: dict[str, Any] = {
            "db": str(store.db),
            "auth": "token",
            "tokens": str(tokens.path),
        }
        settings.update(config)
        app = create_app(ConsoleConfig(**settings))
        test_client = TestClient(app, base_url=base_url, client=client, follow_redirects=False)
        test_client.__enter__()
        started.append(test_client)
        return test_client

    yield make
    for c in started:
        c.__exit__(None, None, None)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def audit_of(db: Path | str) -> list[tether.AuditRecord]:
    async with tether.Runtime(db, serve=False) as rt:
        return list(reversed(await rt.store.list_audit(limit=1000)))


def audit(db: Path | str) -> list[tether.AuditRecord]:
    """The store's audit log, oldest first."""
    return anyio.run(audit_of, db, backend="asyncio")
