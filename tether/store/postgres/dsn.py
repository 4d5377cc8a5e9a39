"""The store's URL: a libpq URL or key=value string, plus tether's own ``?schema=NAME`` and
``?writers=N``."""

from __future__ import annotations

import urllib.parse

from tether.errors import ConfigError
from tether.store.urls import shown


def split_schema(dsn: str, schema: str | None) -> tuple[str, str | None]:
    """The libpq URL without tether's own ``schema`` query parameter, and the schema (the URL's,
    or ``schema``); ``ConfigError`` if both name one and they differ."""
    if "://" not in dsn:
        return dsn, schema
    parts = urllib.parse.urlsplit(dsn)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    named = [v for k, v in query if k == "schema"]
    if not named:
        return dsn, schema
    if len(named) > 1 or (schema is not None and schema != named[0]):
        raise ConfigError(f"the store URL {shown(dsn)!r} and schema={schema!r} name two schemas")
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "schema"])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), named[0]


def with_schema(dsn: str, schema: str) -> str:
    """The URL ``dsn`` naming ``schema`` (``?schema=``)."""
    parts = urllib.parse.urlsplit(dsn)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "schema"]
    return urllib.parse.urlunsplit(
        parts._replace(query=urllib.parse.urlencode([*query, ("schema", schema)]))
    )


DEFAULT_WRITERS = 1
"""Writer connections when neither the URL nor the caller says. One, because it measured
faster than two on a 2-core machine shared with the server (0.75x the 3-effect step's rate
with two: each lane's batches are half as large, and CPU, not commit latency, was short); a
server on another host, where every commit waits on the network, is where more can pay."""


def split_writers(dsn: str, writers: int | None) -> tuple[str, int]:
    """The URL without tether's own ``writers`` query parameter, and the number of writer
    connections (the URL's, or ``writers``, or 1: see ``DEFAULT_WRITERS``); ``ConfigError`` if both say and differ,
    or if it is not an integer >= 1."""
    named: list[str] = []
    if "://" in dsn:
        parts = urllib.parse.urlsplit(dsn)
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        named = [v for k, v in query if k == "writers"]
    if named:
        if len(named) > 1 or not named[0].isdigit():
            raise ConfigError(f"the store URL {shown(dsn)!r}: writers must be one integer >= 1")
        if writers is not None and writers != int(named[0]):
            raise ConfigError(
                f"the store URL {shown(dsn)!r} and writers={writers!r} name two numbers"
            )
        writers = int(named[0])
        rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "writers"])
        dsn = urllib.parse.urlunsplit(parts._replace(query=rest))
    if writers is None:
        writers = DEFAULT_WRITERS
    if type(writers) is not int or writers < 1:
        raise ConfigError(f"writers must be an integer >= 1, not {writers!r}")
    return dsn, writers
