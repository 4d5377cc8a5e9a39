"""Approval notices: ``ApprovalPolicy(notify=Webhook(url, secret))`` posts each new request
and its outcome, signed (``Tether-Signature: t=…,v1=…``), through the effects ledger, to a
real HTTP receiver on 127.0.0.1 that verifies every signature. Crash cases (SIGKILL between
the POST and its receipt) are in tests/chaos/test_notify_crash.py."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tests.runtime import effect_actors as fx
from tests.runtime.effect_actors import NotifiedBanker, Wire
from tests.runtime.test_approvals import one_pending, outcomes
from tests.webhook_receiver import SECRET, Receiver
from tether.actors.guards.webhook import sign

pytestmark = pytest.mark.anyio

FAST = tether.RetryPolicy(max_attempts=4, initial_delay=0.01, max_delay=0.05)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    fx.reset()
    yield
    fx.reset()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def runtime(path: Path, hook: tether.Webhook, **kw: Any) -> tether.Runtime:
    policy = tether.ApprovalPolicy(timeout=3600, notify=hook)
    return tether.Runtime(path / "agents.db", approval_policy=policy, poll_interval=0.02, **kw)


async def arrived(receiver: Receiver, count: int) -> list[Any]:
    with anyio.fail_after(20):
        while len(receiver.got()) < count:
            await anyio.sleep(0.02)
    return receiver.got()


# -- signatures ---------------------------------------------------------------------------------


def test_a_signature_verifies_and_every_tampering_is_refused() -> None:
    body = b'{"id": "ntf-1", "type": "approval.requested"}'
    now = 1_700_000_000
    header = sign(SECRET, body, now)
    mac = hmac.new(SECRET.encode(), f"{now}.".encode() + body, hashlib.sha256).hexdigest()
    assert header == f"t={now},v1={mac}"  # Stripe's scheme, computed independently
    tether.verify_webhook(SECRET, body, header, now=now + 10)
    tether.verify_webhook(SECRET, body, f"t={now},v1=00ff,v1={mac}", now=now)  # a rotation
    refused = {
        "body changed": (SECRET, body + b" ", header, now),
        "another secret": ("another-secret-0123456789", body, header, now),
        "too old": (SECRET, body, header, now + 301),
        "from the future": (SECRET, body, header, now - 301),
    }
    for why, (secret, data, signature, at) in refused.items():
        with pytest.raises(tether.WebhookSignatureError):  # noqa: PT012 - the case is named
            tether.verify_webhook(secret, data, signature, now=at)
            pytest.fail(f"accepted a signature with its {why}")
    for bad in (None, "", "v1=abc", f"t={now}", "t=soon,v1=abc"):
        with pytest.raises(tether.WebhookSignatureError, match=r"no Tether-Signature|malformed"):
            tether.verify_webhook(SECRET, body, bad, now=now)


def test_a_webhook_is_checked_when_declared_and_never_shows_its_secret() -> None:
    for bad, problem in [
        ({"url": "ftp://x", "secret": SECRET}, "http:// or https://"),
        ({"url": "http://", "secret": SECRET}, "http:// or https://"),
        ({"url": "http://h", "secret": "short"}, "16 characters"),
        ({"url": "http://h", "secret": SECRET, "timeout": 0}, "timeout must be > 0"),
    ]:
        with pytest.raises(tether.ConfigError, match=re.escape(problem)):
            tether.Webhook(**bad)  # type: ignore[arg-type]
    hook = tether.Webhook(url="https://hooks.example/t", secret=SECRET)
    assert SECRET not in repr(hook)
    policy = tether.ApprovalPolicy(notify=[hook])
    assert SECRET not in repr(policy)
    assert policy.webhooks() == (hook,)
    with pytest.raises(tether.ConfigError, match="names a URL twice"):
        tether.ApprovalPolicy(notify=[hook, hook])
    with pytest.raises(tether.ConfigError, match=r"notify must be a tether\.Webhook"):
        tether.ApprovalPolicy(notify="https://hooks.example/t")  # type: ignore[arg-type]


# -- delivery ---------------------------------------------------------------------------------


async def test_each_new_request_and_its_outcome_are_posted_signed(
    tmp_path: Path, receiver: Receiver
) -> None:
    hook = tether.Webhook(url=receiver.url, secret=SECRET, retry=FAST)
    async with runtime(tmp_path, hook) as rt:
        b = await rt.spawn(NotifiedBanker, "b1")
        await b.tell(Wire(to="acme", cents=500))
        request = await one_pending(rt)
        [asked] = await arrived(receiver, 1)
        assert asked.verified is None, asked.verified
        assert asked.event == "approval.requested"
        assert asked.json["type"] == "approval.requested"
        assert asked.json["id"] == asked.delivery_id
        sent = asked.json["request"]
        assert (sent["request_id"], sent["session_id"], sent["tool"]) == (
            request.request_id,
            "b1",
            "wire",
        )
        assert sent["args"] == {"to": "acme", "cents": 500}
        assert sent["fingerprint"] == request.fingerprint
        assert sent["status"] == "pending"

        alice = tether.Identity(name="alice", via="console")
        await rt.approvals.decide(request.request_id, tether.Approve(by="alice"), identity=alice)
        assert await outcomes(rt, "b1") == [["wired 500 to acme"]]
        _, told = await arrived(receiver, 2)
        assert told.verified is None
        assert told.event == "approval.decided"
        assert told.delivery_id != asked.delivery_id
        assert told.json["request"]["status"] == "approved"
        [decision] = told.json["request"]["decisions"]
        assert (decision["by"], decision["via"], decision["authenticated"]) == (
            "alice",
            "console",
            True,
        )
    assert len(receiver.got()) == 2  # each once
    assert SECRET.encode() not in (tmp_path / "agents.db").read_bytes()


async def test_a_receiver_that_fails_gets_the_notice_again_under_the_same_delivery_id(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.fail_first = 2  # two 503s, then it takes it
    hook = tether.Webhook(url=receiver.url, secret=SECRET, retry=FAST)
    async with runtime(tmp_path, hook) as rt:
        b = await rt.spawn(NotifiedBanker, "b1")
        await b.tell(Wire(to="acme", cents=500))
        await one_pending(rt)
        got = await arrived(receiver, 3)
        assert len({d.delivery_id for d in got}) == 1
        assert all(d.verified is None for d in got)
        stamps = [d.headers["tether-signature"] for d in got]
        assert len(set(stamps)) >= 1  # each attempt is signed when it is sent
        await anyio.sleep(0.2)
        assert len(receiver.got()) == 3  # taken: not posted again


async def test_a_notice_whose_rounds_all_fail_is_dead_lettered_and_retried_under_its_id(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Every attempt of every round refused: the notice ends in dead letters (a record, with
    the errors). Retried once the receiver is back, it is posted with the same delivery id."""
    receiver.fail_first = 10_000
    one_try = tether.RetryPolicy(max_attempts=2, initial_delay=0.01, max_delay=0.01)
    hook = tether.Webhook(url=receiver.url, secret=SECRET, retry=one_try)
    async with runtime(tmp_path, hook, max_attempts=2) as rt:
        b = await rt.spawn(NotifiedBanker, "b1")
        await b.tell(Wire(to="acme", cents=500))
        await one_pending(rt)
        with anyio.fail_after(20):
            while not (letters := await rt.dead_letters.list()):
                await anyio.sleep(0.05)
        [letter] = letters
        assert letter.type == "WebhookNotice"
        assert "503" in " ".join(letter.errors)
        failed = receiver.got()
        assert len(failed) == 4  # two rounds of two attempts
        assert len({d.delivery_id for d in failed}) == 1

        receiver.fail_first = 0
        await rt.dead_letters.retry(letter.msg_id)
        got = await arrived(receiver, 5)
        assert got[-1].delivery_id == failed[0].delivery_id
        with anyio.fail_after(10):
            while await rt.store.find_effects(actor_id=letter.actor_id, status="pending"):
                await anyio.sleep(0.05)
        rows = await rt.store.find_effects(actor_id=letter.actor_id)
        assert [r.status for r in rows] == ["failed", "failed", "done"]
        await anyio.sleep(0.2)
        assert len(receiver.got()) == 5


async def test_a_decision_made_in_another_process_posts_its_outcome(
    tmp_path: Path, receiver: Receiver
) -> None:
    """The outcome's notice is stored by whoever decides (here a runtime that serves
    nothing, as the CLI and the console are) and posted by the runtime that serves the
    notifier."""
    hook = tether.Webhook(url=receiver.url, secret=SECRET, retry=FAST)
    async with runtime(tmp_path, hook) as rt:
        b = await rt.spawn(NotifiedBanker, "b1")
        await b.tell(Wire(to="acme", cents=500))
        request = await one_pending(rt)
        await arrived(receiver, 1)
        async with tether.Runtime(tmp_path / "agents.db", serve=False) as desk:
            await desk.approvals.decide(
                request.request_id, tether.Reject(by="ops", reason="wrong payee")
            )
        _, told = await arrived(receiver, 2)
        assert told.json["request"]["status"] == "rejected"
        assert told.json["request"]["decisions"][0]["reason"] == "wrong payee"
        assert await outcomes(rt, "b1") == [["rejected by ops: wrong payee"]]


async def test_a_receiver_that_answers_a_4xx_is_not_asked_again_in_the_round(
    tmp_path: Path, receiver: Receiver
) -> None:
    """A 4xx is the receiver's refusal (a wrong secret, a wrong route): sending again at once
    will not change it. The round fails on it, and the notice is delivered again later."""
    receiver.fail_first = 1
    receiver.fail_status = 404
    hook = tether.Webhook(url=receiver.url, secret=SECRET, retry=FAST)
    async with runtime(tmp_path, hook) as rt:
        b = await rt.spawn(NotifiedBanker, "b1")
        await b.tell(Wire(to="acme", cents=500))
        await one_pending(rt)
        started = time.monotonic()
        got = await arrived(receiver, 2)  # the first round's single attempt, then the next
        assert len({d.delivery_id for d in got}) == 1
        assert time.monotonic() - started < 60
        rows = await rt.store.find_effects(status="failed")
        assert len(rows) == 1
        assert "404" in (rows[0].error or "")
