"""tether's checks hold under ``python -O``: no runtime path relies on an ``assert`` statement
(they vanish there), and a small scenario runs the same with asserts stripped."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tether"


# A test suite shipped in the package: its asserts are its checks, run under pytest (which
# rewrites them), never a runtime path.
TEST_SUITES = (PACKAGE / "testing" / "conformance",)


def test_no_assert_statement_on_any_path_of_the_package() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not any(path.is_relative_to(suite) for suite in TEST_SUITES)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Assert)
    ]
    assert found == []


def test_a_session_through_its_guards_runs_the_same_under_python_O(tmp_path: Path) -> None:
    root = PACKAGE.parent
    done = subprocess.run(
        [sys.executable, "-O", "-m", "tests.optimized_program", str(tmp_path / "o.db")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {
        "debug": False,  # asserts were stripped
        "answer": "Done: refunded 90000 on 43 (approved).",
        "calls": ["lookup_order", "big_refund"],
        "loop": "stopped",
        "dead_letter": 3,  # two attempts, then the reason
        "reserved": True,
        "guards": [
            "breaker:big_refund",
            "breaker:lookup_order",
            "breaker:model",
            "looping/loops",  # (no gate: it never held a call)
            "refunds/gate",
            "refunds/loops",
        ],
    }
