"""``open_store(url)``: a store by URL, its backend found by scheme.

=====================================================  ===========================================
URL                                                    store
=====================================================  ===========================================
``agents.db``, ``data/agents.db``, ``/abs/agents.db``  SQLite file (any ``os.PathLike`` too)
``sqlite:///relative.db``, ``sqlite:////abs/path.db``  SQLite file (``sqlite:///:memory:``: an
                                                       in-memory SQLite database)
``:memory:``, ``memory://``                            memory store (in process, non-durable)
``postgresql://…``, ``postgres://…``                  PostgreSQL (``PostgresStore``), from the
                                                       ``tether[postgres]`` extra
``<scheme>://…``                                       the backend registered under ``scheme``
=====================================================  ===========================================

Writing a backend. A backend is a factory called as ``factory(url, clock=…, create=…,
**options)`` that returns a ``Store`` (``tether.store.protocol``), built but not connected
(the ``Runtime`` calls ``await store.open()``). It gets the whole URL and parses it itself.
``clock`` is the caller's clock (a callable returning seconds since the epoch, or None: the
system's); a store with a clock of its own (a database server's) judges leases on that one
and may ignore it. ``create``: False when the caller only administers existing stores (the
CLI): then a store that does not exist yet is an error, never created. Every other keyword
parameter of the factory is an option it takes; one it does not take is refused by name
before it is called. Register it under its scheme::

    tether.store.register_backend("mystore", make_my_store)

or, from another package, as an entry point in the ``tether.stores`` group (name: the
scheme; value: ``package.module:factory``), found when a URL of that scheme is first opened.
Then run the conformance suite against it (``tether.testing.conformance``).
"""

from __future__ import annotations

import inspect
import os
import re
import urllib.parse
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, cast

from tether.errors import ConfigError
from tether.store.protocol import Store
from tether.store.urls import shown as shown

if TYPE_CHECKING:
    from tether.store.sqlite import Durability

#: ``factory(url, *, clock, create, **options) -> Store``: see the module docstring.
BackendFactory = Callable[..., Store]
Clock = Callable[[], float]

ENTRY_POINT_GROUP = "tether.stores"
_STANDARD = ("clock", "create")  # what every factory is given, besides the URL
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_INSTALL_POSTGRES = "pip install 'tether[postgres]'"

_backends: dict[str, BackendFactory] = {}


def register_backend(scheme: str, factory: BackendFactory, *, replace: bool = False) -> None:
    """Open URLs ``scheme://…`` with ``factory`` (see the module docstring). A scheme that is
    taken is refused unless ``replace``."""
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme):
        raise ConfigError(
            f"a store URL scheme is a letter, then letters, digits, +, - or ., not {scheme!r}"
        )
    _check_factory(scheme, factory)
    key = scheme.lower()
    if key in _backends and not replace and _backends[key] is not factory:
        raise ConfigError(
            f"the store URL scheme {scheme!r} has a backend already (replace=True replaces it)"
        )
    _backends[key] = factory


def open_store(
    url: str | os.PathLike[str],
    *,
    clock: Clock | None = None,
    create: bool = True,
    **options: Any,
) -> Store:
    """The store ``url`` names, built with ``options`` but not connected: ``await
    store.open()`` connects (the ``Runtime`` does it in ``async with``).

    ``clock``: the lease clock of a store that has none of its own (``Store`` docstring);
    ``create``: False refuses to create a store that does not exist. ``ConfigError`` for a
    malformed URL, an unknown scheme, a backend that is not installed, or an option the
    backend does not take, each by name."""
    text = _text_of(url)
    scheme = _scheme_of(text)
    factory = _backend(scheme, text)
    _check_options(scheme, factory, options)
    return factory(text, clock=clock, create=create, **options)


def scheme_of(url: str | os.PathLike[str]) -> str:
    """The scheme a store URL is opened by: ``sqlite`` for a path, ``memory`` for
    ``:memory:``."""
    return _scheme_of(_text_of(url))


def _text_of(url: object) -> str:
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if not isinstance(url, str):
        raise ConfigError(f"a store URL is a string or a path, not {url!r}")
    if not url.strip():
        raise ConfigError("the store URL is empty: give a path, sqlite:///file.db or :memory:")
    return url


def _scheme_of(url: str) -> str:
    if url == ":memory:":
        return "memory"
    if "://" not in url:
        return "sqlite"  # a path
    scheme = url.split("://", 1)[0]
    if not _SCHEME.fullmatch(scheme):
        raise ConfigError(
            f"malformed store URL {shown(url)!r}: {scheme!r} is not a URL scheme "
            "(a letter, then letters, digits, +, - or .)"
        )
    return scheme.lower()


def _backend(scheme: str, url: str) -> BackendFactory:
    factory = _backends.get(scheme) or _from_entry_points(scheme)
    if factory is not None:
        return factory
    known = ", ".join(sorted(_backends))
    raise ConfigError(
        f"unknown store URL scheme {scheme!r} in {shown(url)!r}: known are {known} (and plain "
        f"paths); a backend registers its scheme with tether.store.register_backend or the "
        f"{ENTRY_POINT_GROUP!r} entry point group"
    )


def _from_entry_points(scheme: str) -> BackendFactory | None:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name.lower() != scheme:
            continue
        where = f"{ep.value!r} (entry point {ep.name!r} of group {ENTRY_POINT_GROUP!r})"
        try:
            factory: BackendFactory = ep.load()
        except Exception as exc:
            raise ConfigError(
                f"the store backend for {scheme}:// cannot be loaded from {where}: {exc!r}"
            ) from exc
        _check_factory(scheme, factory, where)
        _backends[scheme] = factory
        return factory
    return None


def _parameters(factory: Callable[..., Any]) -> tuple[set[str], bool]:
    """The keyword parameters of ``factory``, and whether it takes any (``**kwargs``)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: it says what it takes
        return set(), True
    named = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }
    return named, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _check_factory(scheme: str, factory: object, where: str = "") -> None:
    if not callable(factory):
        raise ConfigError(f"the store backend for {scheme}:// {where}is not callable: {factory!r}")
    named, takes_any = _parameters(factory)
    missing = [p for p in _STANDARD if p not in named]
    if missing and not takes_any:
        raise ConfigError(
            f"the store backend for {scheme}:// {where}must take the keyword argument(s) "
            f"{', '.join(missing)} (factory(url, *, clock, create, **options))"
        )


def _check_options(scheme: str, factory: BackendFactory, options: dict[str, Any]) -> None:
    named, takes_any = _parameters(factory)
    if takes_any:
        return
    takes = sorted(named - {*_STANDARD, "url"})
    for name in options:
        if name not in takes:
            offer = f"it takes: {', '.join(takes)}" if takes else "it takes none"
            raise ConfigError(f"the {scheme} store takes no option {name!r} ({offer})")


# -- the built-in backends ---------------------------------------------------------------------


def _sqlite(
    url: str,
    *,
    clock: Clock | None,
    create: bool,
    durability: str = "full",
    quick_check: bool = True,
) -> Store:
    from tether.store.sqlite import SqliteStore

    if durability not in ("full", "normal"):
        raise ConfigError(f"durability must be 'full' or 'normal', not {durability!r}")
    if not isinstance(quick_check, bool):
        raise ConfigError(f"quick_check must be True or False, not {quick_check!r}")
    checked = cast("Durability", durability)
    return SqliteStore(
        sqlite_path(url), durability=checked, clock=clock, create=create, quick_check=quick_check
    )


def sqlite_path(url: str) -> str:
    """The file a path or ``sqlite://`` URL names (``sqlite:///:memory:``: ``":memory:"``)."""
    if "://" not in url:
        return url
    parts = urllib.parse.urlsplit(url)
    example = "sqlite:///relative.db or sqlite:////absolute/path.db"
    if parts.netloc:
        raise ConfigError(f"a sqlite URL names a file, not a host ({url!r}): {example}")
    if parts.query or parts.fragment:
        raise ConfigError(
            f"a sqlite URL takes no query or fragment ({url!r}): pass options as keywords"
        )
    path = urllib.parse.unquote(parts.path)[1:]  # the third slash ends the empty host
    if not path:
        raise ConfigError(f"the sqlite URL {url!r} names no file: {example}")
    return path


def _memory(url: str, *, clock: Clock | None, create: bool) -> Store:
    from tether.store.memory import MemoryStore

    if url not in (":memory:", "memory://"):
        raise ConfigError(f"a memory store URL is ':memory:' or 'memory://', not {url!r}")
    if not create:
        raise ConfigError(
            f"{url!r} names a memory store: it exists only inside the process that made it, "
            "so there is no existing one to open here"
        )
    return MemoryStore(clock=clock)


def _postgres(
    url: str,
    *,
    clock: Clock | None,
    create: bool,
    schema: str | None = None,
    readers: int = 2,
    writers: int | None = None,
    statement_timeout: float = 30.0,
    idle_in_transaction_timeout: float = 10.0,
    retry_for: float = 30.0,
) -> Store:
    """A ``PostgresStore`` (it judges leases on the server's clock: ``clock`` is not used)."""
    try:
        from tether.store.postgres import PostgresStore
    except ImportError as exc:  # psycopg is not installed
        raise ConfigError(
            f"the PostgreSQL store for {shown(url)!r} needs psycopg ({exc}): {_INSTALL_POSTGRES}"
        ) from exc
    return PostgresStore(
        url,
        schema=schema,
        readers=readers,
        writers=writers,
        statement_timeout=statement_timeout,
        idle_in_transaction_timeout=idle_in_transaction_timeout,
        retry_for=retry_for,
        create=create,
    )


register_backend("sqlite", _sqlite)
register_backend("memory", _memory)
register_backend("postgresql", _postgres)
register_backend("postgres", _postgres)
