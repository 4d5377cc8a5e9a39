"""The fake payments service: keys, faults by call number, and counts that outlive the process."""

from __future__ import annotations

import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.testing import payments
from tether.testing.payments import (
    PaymentsClient,
    PaymentsError,
    PaymentsService,
    refund_count,
    refunds,
)
from tether.testing.payments import service as payments_service


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "payments.db"


@pytest.fixture
def service(db: Path) -> Iterator[PaymentsService]:
    with PaymentsService.start(db) as svc:
        yield svc


@pytest.mark.anyio
async def test_same_key_twice_records_one_refund(service: PaymentsService, db: Path) -> None:
    client = PaymentsClient(service.url)
    first = await client.refund("order-1", 500, idempotency_key="refund-order-1")
    second = await client.refund("order-1", 500, idempotency_key="refund-order-1")
    assert first["replayed"] is False
    assert second == {**first, "replayed": True}
    assert refund_count(db, "order-1") == 1
    assert [r["refund_id"] for r in await client.refunds()] == [first["refund_id"]]


@pytest.mark.anyio
async def test_key_reused_for_another_order_is_rejected(service: PaymentsService) -> None:
    client = PaymentsClient(service.url)
    await client.refund("order-1", 500, idempotency_key="k")
    with pytest.raises(PaymentsError) as info:
        await client.refund("order-2", 500, idempotency_key="k")
    assert info.value.status_code == 422
    assert not info.value.transient


@pytest.mark.anyio
async def test_ignore_keys_records_every_call(db: Path) -> None:
    with PaymentsService.start(db, honor_keys=False) as service:
        client = PaymentsClient(service.url)
        first = await client.refund("order-1", 500, idempotency_key="k")
        second = await client.refund("order-1", 500, idempotency_key="k")
    assert first["refund_id"] != second["refund_id"]
    assert not first["replayed"]
    assert not second["replayed"]
    assert refund_count(db, "order-1") == 2


@pytest.mark.anyio
async def test_fault_by_call_number_then_success(service: PaymentsService, db: Path) -> None:
    service.set_faults(fail_calls=[1, 2], status=503)
    client = PaymentsClient(service.url)
    for _ in range(2):
        with pytest.raises(PaymentsError) as info:
            await client.refund("order-1", 500, idempotency_key="k")
        assert info.value.status_code == 503
        assert info.value.transient
        assert "call" in info.value.message
    assert refund_count(db, "order-1") == 0  # a failed call records nothing
    answer = await client.refund("order-1", 500, idempotency_key="k")
    assert answer["replayed"] is False
    assert service.calls() == 3
    assert [r["call"] for r in refunds(db)] == [3]


@pytest.mark.anyio
async def test_delay_after_record_leaves_a_refund_when_the_client_gives_up(
    service: PaymentsService, db: Path
) -> None:
    service.set_faults(delay_calls={1: 2.0})
    client = PaymentsClient(service.url)
    with anyio.move_on_after(0.3) as scope:
        await client.refund("order-1", 500, idempotency_key="k")
    assert scope.cancelled_caught
    assert refund_count(db, "order-1") == 1  # the ambiguous case: recorded, never answered
    # a retry with the same key is answered at once from the stored refund
    again = await client.refund("order-1", 500, idempotency_key="k")
    assert again["replayed"] is True
    assert refund_count(db, "order-1") == 1


@pytest.mark.anyio
async def test_delay_before_record_and_client_timeout(service: PaymentsService, db: Path) -> None:
    service.set_faults(delay_before_calls={1: 2.0})
    client = PaymentsClient(service.url, timeout=0.3)
    with pytest.raises(TimeoutError):
        await client.refund("order-1", 500)
    assert refund_count(db, "order-1") == 0  # nothing recorded yet


@pytest.mark.anyio
async def test_unreachable_service_is_a_connection_error(service: PaymentsService) -> None:
    url = service.url
    service.stop()
    with pytest.raises(ConnectionRefusedError):
        await PaymentsClient(url, timeout=2.0).refund("order-1", 500)


@pytest.mark.anyio
async def test_counts_read_offline_after_the_service_stopped(db: Path) -> None:
    with PaymentsService.start(db) as service:
        client = PaymentsClient(service.url)
        await client.refund("order-1", 500, idempotency_key="a")
        await client.refund("order-1", 500, idempotency_key="b")
        await client.refund("order-2", 700)
    assert service.proc.poll() is not None
    assert refund_count(db, "order-1") == 2
    assert refund_count(db, "order-2") == 1
    assert refund_count(db) == 3
    rows = refunds(db)
    assert [(r["order_id"], r["amount_cents"], r["idempotency_key"]) for r in rows] == [
        ("order-1", 500, "a"),
        ("order-1", 500, "b"),
        ("order-2", 700, None),
    ]
    # a restarted service keeps the refunds and the keys it has seen
    with PaymentsService.start(db) as service:
        again = await PaymentsClient(service.url).refund("order-1", 500, idempotency_key="a")
    assert again["replayed"] is True
    assert refund_count(db) == 3


def test_offline_reader_of_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        refund_count(tmp_path / "missing.db")


def test_bad_fault_plan_is_a_400(service: PaymentsService) -> None:
    with pytest.raises(PaymentsError) as info:
        service.set_faults(status=200)
    assert info.value.status_code == 400


@pytest.mark.parametrize(
    "plan",
    [{"fail_calls": [0]}, {"hang_calls": [-1]}, {"delay_calls": {0: 1.0}}],
)
def test_a_fault_plan_for_call_number_zero_or_less_is_a_400_naming_it(
    service: PaymentsService, plan: dict[str, Any]
) -> None:
    # calls are numbered from 1: such a plan was accepted and never fired
    with pytest.raises(PaymentsError, match=">= 1") as info:
        service.set_faults(**plan)
    assert info.value.status_code == 400


@pytest.mark.parametrize("delay", [-1.0, float("nan"), float("inf")])
def test_a_bad_delay_is_refused_before_the_service_starts(tmp_path: Path, delay: float) -> None:
    with pytest.raises(ValueError, match="delay must be a finite number of seconds"):
        PaymentsService.start(tmp_path / "p.db", delay=delay)
    assert not (tmp_path / "p.db").exists()
    with pytest.raises(SystemExit) as exit_info:
        payments.main(["serve", "--db", str(tmp_path / "p.db"), "--delay", str(delay)])
    assert exit_info.value.code == 2


def test_clear_error_when_the_child_dies(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"(?s)exited with code .*unable to open database"):
        PaymentsService.start(tmp_path / "no-such-dir" / "payments.db")


def test_clear_error_when_the_port_line_never_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def silent(*args: object, **kwargs: object) -> list[str]:
        code = "import sys, time; print('booting', file=sys.stderr, flush=True); time.sleep(30)"
        return [sys.executable, "-c", code]

    monkeypatch.setattr(payments_service, "_serve_argv", silent)
    with pytest.raises(RuntimeError, match=r"(?s)did not print its listening line.*booting"):
        PaymentsService.start(tmp_path / "payments.db", startup_timeout=0.5)


@pytest.mark.anyio
async def test_hang_after_record_times_out_and_stops_cleanly(db: Path) -> None:
    with PaymentsService.start(db) as service:
        service.set_faults(hang_calls=[1], hang_before_calls=[2])
        client = PaymentsClient(service.url, timeout=0.3)
        with pytest.raises(TimeoutError):
            await client.refund("order-1", 500)
        with pytest.raises(TimeoutError):
            await client.refund("order-2", 500)
    assert service.proc.returncode == 0  # SIGTERM is a clean shutdown, even with calls hanging
    assert refund_count(db, "order-1") == 1
    assert refund_count(db, "order-2") == 0


def test_the_service_listens_with_a_backlog_a_burst_of_calls_does_not_overflow(
    service: PaymentsService,
) -> None:
    """Several runtimes' calls arrive in bursts: a backlog of 5 (the standard library's)
    overflows on a loaded machine and the kernel resets the calls it had half-accepted."""
    port = urllib.parse.urlsplit(service.url).port
    found = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert found[0] == "LISTEN", found
    assert int(found[2]) >= 128, found  # Send-Q of a listening socket: its backlog
