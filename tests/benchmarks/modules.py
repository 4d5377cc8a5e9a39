"""The benchmark scripts, imported as the modules they import each other as (``run``,
``bench_scaling``, ...): ``benchmarks/`` is not a package, each script puts its own folder on
``sys.path``. Loaded by path, so that mypy does not type-check the scripts through the tests."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def bench(name: str) -> ModuleType:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)
