"""The ``tether`` command run in-process, its output captured (the CLI tests' helpers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    """Run ``tether *argv``: its exit code, stdout and stderr."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> Any:
    """Run ``tether *argv --json``, which must succeed quietly: its output, decoded."""
    code, out, err = cli(capsys, *argv, "--json")
    assert (code, err) == (0, "")
    return json.loads(out)
