"""The package as it is published: the sdist holds the project's files and none of a working
copy's local state, the wheel holds the package, and both carry the license and metadata.

The tracked files are copied into a scratch checkout beside the things a developer's checkout
accumulates (caches, a virtualenv, stores and their WAL files, logs, benchmark data), and the
sdist and wheel are built from it with hatchling, as ``python -m build`` would."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from pathlib import Path

import pytest

import tether

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
LOCAL_STATE = [
    ".hypothesis/examples/0a1b/2c3d",
    ".venv/bin/python3",
    ".mypy_cache/3.11/cache.db",
    ".pytest_cache/v/cache/lastfailed",
    ".ruff_cache/0.6.0/123",
    "tether/__pycache__/cli.cpython-311.pyc",
    "tests/__pycache__/conftest.cpython-311.pyc",
    "agents.db",
    "agents.db-wal",
    "agents.db-shm",
    "tether-demo.db",
    "examples/counter.db",
    "benchmarks/_data/run-1.json",
    "tether-demo.log",
    "tether-demo-payments.db",
    "dist/tether-0.0.1.tar.gz",
    "build/lib/tether/__init__.py",
    "tether.egg-info/PKG-INFO",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[str]]:
    checkout = tmp_path_factory.mktemp("checkout")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    files = sorted(name.decode() for name in tracked if name)
    for name in files:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, checkout / name)
    for name in LOCAL_STATE:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text("local state, never published\n")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-t", "wheel", "-d", str(out)],
        cwd=checkout,
        capture_output=True,
        check=True,
        timeout=300,
    )
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return sdist, wheel, files


def sdist_members(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as tar:
        return sorted(m.name.partition("/")[2] for m in tar.getmembers() if m.isfile())


def test_the_sdist_holds_the_projects_files_and_no_local_state(
    built: tuple[Path, Path, list[str]],
) -> None:
    sdist, _, tracked = built
    members = sdist_members(sdist)
    print("\n".join(members))  # the listing, for the CI log
    assert not set(members) & set(LOCAL_STATE)
    assert {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "PKG-INFO"} <= set(members)
    assert "tether/py.typed" in members
    # everything it holds is a tracked file (or the metadata hatchling writes)
    assert set(members) - set(tracked) == {"PKG-INFO"}
    # and every tracked file of the project is in it; only CI's own script stays home
    assert {f for f in tracked if not f.startswith(".")} <= set(members)


def test_the_wheel_holds_the_package_and_its_license(built: tuple[Path, Path, list[str]]) -> None:
    _, wheel, _ = built
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        dist_info = next(n.split("/")[0] for n in names if ".dist-info/" in n)
        license_text = whl.read(f"{dist_info}/licenses/LICENSE").decode()
        metadata = email.message_from_bytes(whl.read(f"{dist_info}/METADATA"))
    assert {n.split("/")[0] for n in names} == {"tether", dist_info}
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".db"))]
    assert "Apache License\n                           Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text  # the full text, not a stub
    check_metadata(metadata)


def test_the_sdist_metadata_names_the_license_urls_classifiers_and_version(
    built: tuple[Path, Path, list[str]],
) -> None:
    sdist, _, _ = built
    with tarfile.open(sdist) as tar:
        [info] = [m for m in tar.getmembers() if m.name.endswith("/PKG-INFO")]
        handle = tar.extractfile(info)
        assert handle is not None
        metadata = email.message_from_bytes(handle.read())
    check_metadata(metadata)


def check_metadata(metadata: Message) -> None:
    assert metadata["Name"] == "tether"
    assert metadata["Version"] == tether.__version__  # one source of truth
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Issues", "Changelog"} <= set(urls)
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "agents" in (metadata["Keywords"] or "")
    requires = metadata.get_all("Requires-Dist") or []
    assert any(r.startswith("pydantic") and "extra ==" in r for r in requires)
    assert not any(r.startswith("pydantic") and "extra ==" not in r for r in requires)


def test_git_ignores_what_a_checkout_accumulates() -> None:
    """What the examples, the demo (``tether-demo.db``, ``tether-demo.log``), a store's WAL
    files, the tools' caches and the benchmarks leave behind never shows in ``git status``."""
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *LOCAL_STATE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    not_ignored = [line for line in done.stdout.splitlines() if line.startswith("::")]
    assert not_ignored == []
    assert (
        "tether-demo.log"
        not in subprocess.run(
            ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    )
