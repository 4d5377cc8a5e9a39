"""Type-checking as a test: mypy --strict on ``fail_effects.py`` says exactly what its comments
expect (``# E:`` errors and ``# N:`` notes such as ``reveal_type``), and nothing else, and
``typed_effects.py`` checks clean."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
_EXPECTED = re.compile(r"#\s*([EN]): (.*?)(?=\s+#\s*[EN]: |$)")
_REPORTED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): (?P<kind>error|note): (?P<text>.*)$")

pytestmark = pytest.mark.slow  # mypy takes seconds, more on a cold cache


def mypy(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--hide-error-context",
            "--no-pretty",
            "--no-color-output",
            str(path.relative_to(ROOT)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def expected(path: Path) -> list[tuple[int, str, str]]:
    found = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        for kind, text in _EXPECTED.findall(line):
            found.append((number, "error" if kind == "E" else "note", text.strip()))
    return found


def test_effect_calls_that_do_not_fit_the_tool_fail_type_checking_as_expected() -> None:
    path = HERE / "fail_effects.py"
    done = mypy(path)
    reported = []
    for line in done.stdout.splitlines():
        m = _REPORTED.match(line)
        assert m is not None, f"unexpected mypy output: {line}\n{done.stderr}"
        reported.append((int(m["line"]), m["kind"], m["text"].strip()))
    assert reported == expected(path)
    assert done.returncode == 1  # the file fails type-checking, as it must
    assert any(kind == "error" for _, kind, _ in reported)


def test_the_inferred_types_of_tools_and_effects_check_clean() -> None:
    done = mypy(HERE / "typed_effects.py")
    assert done.returncode == 0, done.stdout + done.stderr
