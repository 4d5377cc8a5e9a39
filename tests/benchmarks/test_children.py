"""The benchmarks' child processes (``benchmarks/children.py``): a round's sample comes back,
and a child that fails says why, in its own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.modules import BENCHMARKS, bench

children = bench("children")

CHILD = f"""
import sys
sys.path.insert(0, {str(BENCHMARKS)!r})
from children import serve

def ready():
    if sys.argv[1:] == ["die"]:
        print("dying: the database is gone", file=sys.stderr)
        sys.exit(3)
    print("a stray print goes to stderr, not into the protocol")
    return {{"hello": 1}}

def handle(cmd):
    if cmd.get("boom"):
        raise ValueError("the child's own words")
    return {{"sample": {{"x": [cmd["n"], 0.5]}}}}

serve(ready, handle)
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "child.py"
    path.write_text(CHILD)
    return path


def test_each_round_comes_back_as_a_sample(script: Path) -> None:
    child = children.PipeChild("test child", [str(script)])
    try:
        assert child.ready == {"hello": 1}
        assert child.sample({"n": 3}) == {"x": (3, 0.5)}
        assert child.sample({"n": 4}) == {"x": (4, 0.5)}
    finally:
        child.close()
    assert child.proc.returncode == 0


def test_a_failed_round_names_the_error_and_the_child_serves_the_next(script: Path) -> None:
    child = children.PipeChild("test child", [str(script)])
    try:
        with pytest.raises(children.ChildFailed, match="ValueError: the child's own words"):
            child.sample({"boom": True})
        assert child.sample({"n": 5}) == {"x": (5, 0.5)}
    finally:
        child.close()


def test_a_child_that_dies_is_named_with_its_exit_status_and_last_words(script: Path) -> None:
    with pytest.raises(children.ChildFailed) as failed:
        children.PipeChild("test child", [str(script), "die"])
    assert "exited (3)" in str(failed.value)
    assert "dying: the database is gone" in str(failed.value)
