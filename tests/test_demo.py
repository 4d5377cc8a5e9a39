"""``tether demo`` end to end, as the README runs it: real processes, a real SIGKILL.

The demo is run once per module (about 2 s); the tests read its output, its files and the CLI
commands it prints.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tether.demo_agent import CUSTOMERS, VICTIM
from tether.testing.payments import refund_count, refunds

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``python -m tether demo`` in an empty directory: the store lands there."""
    cwd = tmp_path_factory.mktemp("demo")
    return _run([sys.executable, "-m", "tether", "demo"], cwd), cwd


def test_the_demo_exits_0_and_every_check_holds(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, _ = demo
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every check holds" in done.stdout
    assert "FAIL" not in done.stdout
    assert done.stderr == ""  # tether's logs go to the log file, not the terminal


def test_each_customer_is_refunded_exactly_once(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, cwd = demo
    payments = cwd / "tether-demo-payments.db"
    for c in CUSTOMERS:
        assert refund_count(payments, c.order_id) == 1, c
        row = re.search(rf"^  {c.session}\s+{c.order_id}\s+\S+\s+1\s.*finished$", done.stdout, re.M)
        assert row is not None, (c, done.stdout)
    assert len(refunds(payments)) == len(CUSTOMERS)
    assert "ok    each customer refunded exactly once" in done.stdout


def test_the_worker_is_killed_mid_refund_and_the_retry_is_replayed(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    out = demo[0].stdout
    assert "SIGKILL: the refund is made, and the worker dies before the store records it" in out
    assert "Worker 1 is gone: killed by SIGKILL." in out
    assert f"{VICTIM}'s refund call is an intent without a receipt (status pending)" in out
    assert "Worker 2 finished: exit code 0." in out
    assert "replayed by the service" in out
    assert re.search(rf"^  {VICTIM}\s.*yes, attempt 2\s+finished$", out, re.M), out


def test_one_refund_is_held_and_approved_from_the_demo_process(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    out = demo[0].stdout
    assert re.search(r"big_refund \$1,250\.00: held for approval apr-[0-9a-f]+", out), out
    assert "approved by demo-operator from the demo's process" in out
    assert "ok    one risky refund held for approval" in out


def test_the_flaky_fraud_check_trips_its_breaker(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    out = demo[0].stdout
    assert "fraud check: the scoring service answers 503 (call 2)" in out
    assert "rt.tree(): breaker:check_fraud_score [open until" in out
    assert "told: fraud check unavailable (breaker open, retry in" in out
    assert "ok    the flaky fraud check tripped its breaker" in out


def test_the_cli_commands_it_prints_work_on_the_store(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, cwd = demo
    store = (cwd / "tether-demo.db").resolve()
    assert f"store: {store}" in done.stdout
    footer = done.stdout.partition("\ninspect it:\n")[2]
    commands = re.findall(r"^  (tether .*)$", footer, re.M)
    assert len(commands) == 4, done.stdout
    outputs = {}
    for command in commands:
        argv = shlex.split(command)
        result = _run([sys.executable, "-m", "tether", *argv[1:]], cwd)
        assert result.returncode == 0, (command, result.stderr)
        outputs[argv[1]] = result.stdout
    for c in CUSTOMERS:
        assert re.search(
            rf"^{c.session}\s+tether\.demo_agent:RefundAgent\s+running\s+task 1 finished",
            outputs["sessions"],
            re.M,
        )
    assert "ambiguous (attempt 1 did not report back" in outputs["show"]
    assert re.search(r"carol\s+big_refund.*approved\s+1/1", outputs["approvals"])
    # `tether tree` runs no actor: guards describe their state from their journals. A loop
    # guard, whose recent calls are rebuilt from the ledger when it starts, says nothing.
    tree = outputs["tree"]
    # Open for 30 s: past that (a slow machine), it is half-open, never "open until" a past time.
    tripped = r"breaker:check_fraud_score \(Breaker\) running \[(open until |half-open: )"
    assert re.search(tripped, tree), tree
    assert re.search(r"breaker:refund \(Breaker\) running \[closed\]", tree), tree
    assert re.search(r"carol/gate \(Gate\) running \[0 pending; 1 approved", tree), tree
    assert re.search(r"^  alice/loops \(LoopGuard\) running$", tree, re.M), tree


def test_db_chooses_where_the_store_goes(tmp_path: Path) -> None:
    """``--db PATH``: a fresh store at PATH, its payments file and log beside it."""
    target = tmp_path / "sub" / "mine.db"
    target.parent.mkdir()
    target.write_bytes(b"an old file, replaced")
    done = _run([sys.executable, "-m", "tether.demo", "--db", str(target)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"store: {target}" in done.stdout
    assert refund_count(target.with_name("mine-payments.db")) == len(CUSTOMERS)
    assert target.with_name("mine.log").exists()
    assert not (tmp_path / "tether-demo.db").exists()
