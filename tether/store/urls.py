"""A store URL as it may be shown: in logs, banners and error messages, never its password.

Below both ``open.py`` and the backends, which all name the URL they were given.
"""

from __future__ import annotations

import urllib.parse


def shown(url: str) -> str:
    """``url`` with any password in it replaced, for error messages."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
