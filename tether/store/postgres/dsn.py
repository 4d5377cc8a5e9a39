"""The store's URL: a libpq URL or key=value string, plus tether's own ``?schema=NAME``."""

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
