"""What every bridge decides, with no broker: which messages are stored (under the broker's id
as dedup key, in order per session), which are poison and why, and which failures are not the
message's and so must leave it unacknowledged."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

import tether
from tests.bridges.programs import Add, Tally, decode, envelope, journal, payload
from tether.bridges import Inbound, Routed, json_envelope
from tether.bridges.ingest import Ingest, Poison, Stored


def inbound(data: bytes, broker_id: str, **kw: Any) -> Inbound:
    fields: dict[str, Any] = {
        "source": "orders",
        "broker_id": broker_id,
        "data": data,
        "headers": {},
        "published_at": time.time(),
        "redelivered": False,
        **kw,
    }
    return Inbound(**fields)


def test_json_envelope_decodes_a_message_for_a_session() -> None:
    routed = decode(inbound(payload("s-0", 7), "1-0"))
    assert routed == Routed("s-0", Add(i=7))
    one_type = json_envelope(Add)
    assert one_type(inbound(b'{"session": "s", "message": {"i": 1}}', "1")) == Routed("s", Add(i=1))


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"{not json", "malformed"),
        (b'{"message": {"type": "Add", "i": 1}}', "missing required field `session`"),
        (b'{"session": "s", "message": {"type": "Nope"}}', "Invalid value 'Nope'"),
        (b'{"session": "s", "message": {"type": "Add", "i": "x"}}', "Expected `int`"),
        (b'{"session": "s", "extra": 1, "message": {"type": "Add", "i": 1}}', "unknown field"),
    ],
)
def test_json_envelope_refuses_a_bad_payload_naming_the_problem(data: bytes, problem: str) -> None:
    with pytest.raises(msgspec.DecodeError, match=problem):
        decode(inbound(data, "1"))


def test_json_envelope_needs_message_classes() -> None:
    with pytest.raises(tether.ConfigError, match="Message classes"):
        json_envelope()
    with pytest.raises(tether.ConfigError, match="Message classes"):
        json_envelope(dict)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_stored_messages_keep_broker_order_per_session_and_carry_the_broker_id(
    rt: tether.Runtime,
) -> None:
    """Interleaved sessions in one batch: each session gets its messages in broker order, and
    each is stored under ``<prefix>:<stream>:<broker id>``."""
    ingest = Ingest(rt, decode, key_prefix="redis")
    batch = [inbound(payload(f"s-{i % 2}", i), f"{i}-0") for i in range(10)]

    outcomes = await ingest.batch(batch)

    assert outcomes == [Stored(f"s-{i % 2}", f"redis:orders:{i}-0") for i in range(10)]
    assert await journal(rt, "s-0") == [0, 2, 4, 6, 8]
    assert await journal(rt, "s-1") == [1, 3, 5, 7, 9]
    for i in range(10):
        assert await rt.store.find_dedup(f"s-{i % 2}", f"redis:orders:{i}-0") is not None


@pytest.mark.anyio
async def test_a_message_delivered_again_is_stored_once(rt: tether.Runtime) -> None:
    ingest = Ingest(rt, decode, key_prefix="redis")
    first = inbound(payload("s-0", 1), "5-0")
    again = inbound(payload("s-0", 1), "5-0", redelivered=True)
    other_stream = inbound(payload("s-0", 1), "5-0", source="refunds")

    assert await ingest.batch([first]) == [Stored("s-0", "redis:orders:5-0")]
    assert await ingest.batch([again, again]) == [Stored("s-0", "redis:orders:5-0")] * 2
    # The same id in another stream is another message.
    assert await ingest.batch([other_stream]) == [Stored("s-0", "redis:refunds:5-0")]

    assert await journal(rt, "s-0") == [1, 1]
    assert (ingest.stats.received, ingest.stats.redelivered, ingest.stats.stored) == (4, 2, 4)


@pytest.mark.anyio
async def test_messages_that_can_never_be_stored_are_poison_with_the_reason(
    rt: tether.Runtime,
) -> None:
    """Bad JSON, an unknown session, a type the session refuses, a stopped session, a session
    id no actor can have, a decoder that returns nonsense: each is poison, naming why, and the
    good message among them is stored."""
    await rt.spawn(Tally, "gone")
    await rt.ref("gone").stop("closed account")

    cases = [
        (b"{oops", "cannot decode: DecodeError: JSON is malformed"),
        (envelope("nobody", {"type": "Add", "i": 1}), "no actor with id 'nobody'"),
        (envelope("s-0", {"type": "Unwanted"}), "actor 's-0' does not accept Unwanted"),
        (envelope("gone", {"type": "Add", "i": 1}), "actor 'gone' is stopped (closed account)"),
        (envelope("", {"type": "Add", "i": 1}), "actor id must be a non-empty string"),
        (payload("s-0", 42), None),
    ]
    ingest = Ingest(rt, decode, key_prefix="redis")

    outcomes = await ingest.batch([inbound(data, f"{n}-0") for n, (data, _) in enumerate(cases)])

    for (_, reason), outcome in zip(cases, outcomes, strict=True):
        if reason is None:
            assert outcome == Stored("s-0", "redis:orders:5-0")
        else:
            assert isinstance(outcome, Poison), outcome
            assert reason in outcome.reason, outcome
    assert await journal(rt, "s-0") == [42]

    def nonsense(_: Inbound) -> Any:
        return ("s-0", {"type": "Add"})

    (returned,) = await Ingest(rt, nonsense, key_prefix="x").batch([inbound(b"", "1")])
    assert isinstance(returned, Poison)
    assert "not Routed(session_id, message)" in returned.reason


@pytest.mark.anyio
async def test_a_redelivery_older_than_the_dedup_retention_is_poison_not_stored_again(
    tmp_path: Path,
) -> None:
    """Its dedup key may be purged: storing it again could apply it twice, so it is held. A
    first delivery of an old message, or a redelivery within the retention, is stored."""
    async with tether.Runtime(tmp_path / "store.db", retention=3600.0) as rt:
        await rt.spawn(Tally, "s-0")
        ingest = Ingest(rt, decode, key_prefix="redis")
        day_old = time.time() - 86_400
        outcomes = await ingest.batch(
            [
                inbound(payload("s-0", 1), "1-0", published_at=day_old),
                inbound(payload("s-0", 2), "2-0", published_at=day_old, redelivered=True),
                inbound(payload("s-0", 3), "3-0", published_at=time.time() - 60, redelivered=True),
            ]
        )

        assert outcomes[0] == Stored("s-0", "redis:orders:1-0")
        assert isinstance(outcomes[1], Poison)
        assert "beyond the runtime's dedup retention (3600 s)" in outcomes[1].reason
        assert outcomes[1].session_id == "s-0"
        assert outcomes[2] == Stored("s-0", "redis:orders:3-0")
        assert await journal(rt, "s-0") == [1, 3]


@pytest.mark.anyio
async def test_a_failure_that_is_not_the_messages_propagates_as_itself(tmp_path: Path) -> None:
    """A closed runtime (like a failing store) says nothing about the message: it is raised,
    not turned into poison, so the adapter acknowledges nothing."""
    async with tether.Runtime(tmp_path / "store.db") as rt:
        await rt.spawn(Tally, "s-0")
        await rt.spawn(Tally, "s-1")
    ingest = Ingest(rt, decode, key_prefix="redis")
    batch = [inbound(payload(f"s-{i % 2}", i), f"{i}-0") for i in range(4)]

    with pytest.raises(tether.RuntimeClosed):
        await ingest.batch(batch)
    with pytest.raises(tether.RuntimeClosed):  # one session's failure, as itself
        await ingest.batch(batch[:1])


def test_decode_must_be_callable(tmp_path: Path) -> None:
    with pytest.raises(tether.ConfigError, match="decode must be a callable"):
        Ingest(tether.Runtime(tmp_path / "x.db"), "json", key_prefix="x")  # type: ignore[arg-type]
