"""``open_store(url)``: stores by URL, backends by scheme, and the layer the seam is.

The runtime imports no backend: every store, ours or another package's, is opened through the
registry (``register_backend``, or the ``tether.stores`` entry point group).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tether
from tests import sample_actors as s
from tether.errors import ConfigError, StoreOpenError
from tether.store import open as registry
from tether.store.memory import MemoryStore
from tether.store.open import open_store, register_backend
from tether.store.protocol import Store
from tether.store.sqlite import SqliteStore
from tether.testing import FakeClock

TETHER = Path(tether.__file__).resolve().parent


@pytest.fixture(autouse=True)
def _registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backends a test registers are gone after it."""
    monkeypatch.setattr(registry, "_backends", dict(registry._backends))


# -- built-in schemes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("agents.db", "agents.db"),
        ("data/agents.db", "data/agents.db"),
        ("/abs/agents.db", "/abs/agents.db"),
        ("sqlite:///relative.db", "relative.db"),
        ("sqlite:///data/relative.db", "data/relative.db"),
        ("sqlite:////abs/path.db", "/abs/path.db"),
        ("SQLITE:////abs/path.db", "/abs/path.db"),
        ("sqlite:///with%20space.db", "with space.db"),
        ("sqlite:///:memory:", ":memory:"),
    ],
)
def test_a_path_or_a_sqlite_url_opens_an_sqlite_store_on_that_file(url: str, path: str) -> None:
    store = open_store(url)
    assert isinstance(store, SqliteStore)
    assert store.path == path


def test_a_path_object_opens_an_sqlite_store(tmp_path: Path) -> None:
    store = open_store(tmp_path / "a.db", durability="normal")
    assert isinstance(store, SqliteStore)
    assert (store.path, store.durability) == (str(tmp_path / "a.db"), "normal")


@pytest.mark.anyio
async def test_relative_and_absolute_sqlite_urls_create_their_files_where_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    for url, made in (
        ("sqlite:///rel.db", tmp_path / "rel.db"),
        (f"sqlite:///{tmp_path / 'sub' / 'abs.db'}", tmp_path / "sub" / "abs.db"),
    ):
        async with tether.Runtime(url) as rt:
            await rt.spawn(s.Account, "acct")
        assert made.is_file()
        async with tether.Runtime(f"sqlite:///{made}") as rt:
            assert (await rt.store.get_actor("acct")) is not None


@pytest.mark.parametrize("url", [":memory:", "memory://"])
def test_memory_urls_open_a_memory_store(url: str) -> None:
    assert isinstance(open_store(url), MemoryStore)


@pytest.mark.anyio
@pytest.mark.parametrize("url", [":memory:", "memory://", "sqlite:///a.db"])
async def test_the_runtime_opens_every_url_through_the_registry(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Runtime(url)`` is ``Runtime(store=open_store(url))``: a store that works."""
    monkeypatch.chdir(tmp_path)
    async with tether.Runtime(url) as rt:
        acct = await rt.spawn(s.Account, "acct")
        await acct.tell(s.Deposit(amount=3))
        assert await acct.ask(s.GetBalance(), timeout=5) == 3
        assert rt.path == url


# -- what is refused, by name -------------------------------------------------------------------


def test_postgresql_without_its_driver_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without psycopg (the ``postgres`` extra), opening a PostgreSQL URL says which extra to
    install, and never shows the URL's password."""
    monkeypatch.setitem(sys.modules, "tether.store.postgres", None)  # as if not importable
    for url in ("postgresql://me:s3cret@db.example/agents", "postgres://db/agents"):
        with pytest.raises(ConfigError, match=r"pip install 'tether\[postgres\]'") as caught:
            open_store(url)
        assert "s3cret" not in str(caught.value)
    with pytest.raises(ConfigError, match="postgres"):
        tether.Runtime("postgresql://db/agents")


def test_a_postgresql_url_opens_a_postgres_store_with_its_options() -> None:
    """``postgresql://`` and ``postgres://`` build a ``PostgresStore`` (not connected yet);
    ``?schema=`` names its schema; an option it does not take is refused by name."""
    from tether.store.postgres import PostgresStore

    store = open_store("postgres://me:s3cret@db.example/agents?schema=team1", readers=3)
    assert isinstance(store, PostgresStore)
    assert (store.schema, len(store._readers.all)) == ("team1", 3)
    assert "s3cret" not in store.where
    with pytest.raises(ConfigError, match="takes no option 'durability'"):
        open_store("postgresql://db.example/agents", durability="full")
    with pytest.raises(ConfigError, match="two schemas"):
        open_store("postgresql://db.example/agents?schema=a", schema="b")


def test_an_unknown_scheme_is_refused_naming_it_and_the_known_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown store URL scheme 'mysql'.*memory, postgres, postgresql, sqlite"
    ):
        open_store("mysql://db/agents")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("", "the store URL is empty"),
        ("   ", "the store URL is empty"),
        ("://agents.db", "malformed store URL"),
        ("1db://x", "malformed store URL"),
        ("my store://x", "malformed store URL"),
        (5, "a store URL is a string or a path, not 5"),
        (None, "a store URL is a string or a path, not None"),
        ("sqlite://host/agents.db", "names a file, not a host"),
        ("sqlite:///a.db?mode=ro", "takes no query or fragment"),
        ("sqlite://", "names no file"),
        ("sqlite:///", "names no file"),
        ("memory://named", "':memory:' or 'memory://'"),
    ],
)
def test_a_malformed_url_is_refused_naming_it(url: Any, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        open_store(url)


@pytest.mark.parametrize(
    ("url", "option", "takes"),
    [
        (":memory:", "durability", "it takes none"),
        ("agents.db", "pool_size", "it takes: durability, quick_check"),
    ],
)
def test_an_option_the_backend_does_not_take_is_refused_naming_it(
    url: str, option: str, takes: str
) -> None:
    options: dict[str, Any] = {option: "x"}
    with pytest.raises(ConfigError, match=rf"takes no option '{option}' \({takes}\)"):
        open_store(url, **options)


def test_a_memory_store_cannot_be_opened_as_an_existing_store() -> None:
    """``create=False`` (a tool that only administers stores): a memory store never exists
    before the process that makes it."""
    with pytest.raises(ConfigError, match="exists only inside the process that made it"):
        open_store(":memory:", create=False)


@pytest.mark.anyio
async def test_an_sqlite_store_opened_as_existing_is_never_created(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    store = open_store(missing, create=False)
    with pytest.raises(StoreOpenError, match="no store at"):
        await store.open()
    assert not missing.exists()
    (tmp_path / "empty.db").write_bytes(b"")
    with pytest.raises(StoreOpenError, match="empty file"):
        await open_store(tmp_path / "empty.db", create=False).open()


# -- other backends -----------------------------------------------------------------------------


class _Made:
    """What a test backend was called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Callable[[], float] | None, bool, dict[str, Any]]] = []

    def factory(
        self, url: str, *, clock: Callable[[], float] | None, create: bool, flavour: str = "plain"
    ) -> Store:
        self.calls.append((url, clock, create, {"flavour": flavour}))
        return MemoryStore(clock=clock)


@pytest.mark.anyio
async def test_a_registered_backend_serves_its_scheme_to_the_runtime() -> None:
    """A backend registered under a scheme gets the whole URL, the runtime's clock and its own
    options, and the runtime runs on the store it returns."""
    made = _Made()
    register_backend("fake", made.factory)
    clock = FakeClock(start=500.0)
    store = open_store("fake://anything/here?x=1", clock=clock.now, flavour="sour")
    assert isinstance(store, MemoryStore)
    assert made.calls == [("fake://anything/here?x=1", clock.now, True, {"flavour": "sour"})]
    async with tether.Runtime("FAKE://db", clock=clock) as rt:
        acct = await rt.spawn(s.Account, "acct")
        await acct.tell(s.Deposit(amount=2))
        assert await acct.ask(s.GetBalance(), timeout=5) == 2
        assert await rt.store.store_time() == 500.0  # the runtime handed the store its clock
    with pytest.raises(ConfigError, match=r"takes no option 'colour' \(it takes: flavour\)"):
        open_store("fake://x", colour="red")


def test_a_scheme_is_registered_once_unless_replaced() -> None:
    made, other = _Made(), _Made()
    register_backend("fake", made.factory)
    with pytest.raises(ConfigError, match="has a backend already"):
        register_backend("fake", other.factory)
    register_backend("fake", other.factory, replace=True)
    open_store("fake://x")
    assert (len(made.calls), len(other.calls)) == (0, 1)


@pytest.mark.parametrize(
    ("scheme", "factory", "problem"),
    [
        ("no good", MemoryStore, "a store URL scheme is a letter"),
        ("fine", "not callable", "is not callable"),
        ("fine", lambda url: MemoryStore(), "must take the keyword argument.*clock, create"),
    ],
)
def test_a_bad_registration_is_refused_naming_what_is_wrong(
    scheme: str, factory: Any, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        register_backend(scheme, factory)


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed distribution with entry points in ``tether.stores`` (its dist-info and
    module on ``sys.path``, as ``pip install`` leaves them)."""
    (tmp_path / "plugstore.py").write_text(
        "from tether.store.memory import MemoryStore\n"
        "def make(url, *, clock, create):\n"
        "    store = MemoryStore(clock=clock)\n"
        "    store.made_from = url\n"
        "    return store\n"
    )
    info = tmp_path / "plugstore-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugstore\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[tether.stores]\nplug = plugstore:make\nbroken = plugstore:does_not_exist\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("plugstore", None)


def test_a_backend_installed_as_an_entry_point_is_found_by_its_scheme(plugin: Path) -> None:
    store = open_store("plug://somewhere")
    assert isinstance(store, MemoryStore)
    assert store.made_from == "plug://somewhere"  # type: ignore[attr-defined]


def test_an_entry_point_that_does_not_load_is_a_config_error_naming_it(plugin: Path) -> None:
    with pytest.raises(ConfigError, match=r"'plugstore:does_not_exist'.*tether\.stores"):
        open_store("broken://somewhere")


# -- the seam is a layer ------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
    return found


def test_the_store_package_imports_only_errors_and_itself() -> None:
    for path in sorted((TETHER / "store").rglob("*.py")):
        ours = {m for m in _imports(path) if m == "tether" or m.startswith("tether.")}
        outside = {m for m in ours if m != "tether.errors" and not m.startswith("tether.store")}
        assert not outside, f"{path.relative_to(TETHER)} imports {sorted(outside)}"


def test_the_runtime_imports_no_backend() -> None:
    for path in sorted((TETHER / "runtime").rglob("*.py")):
        backends = {
            m
            for m in _imports(path)
            if m.startswith(("tether.store.sqlite", "tether.store.memory"))
        }
        assert not backends, f"{path.relative_to(TETHER)} imports {sorted(backends)}"
