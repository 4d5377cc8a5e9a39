"""tether's log events: through structlog when the application configured it, else through
the standard library's ``logging``.

Every event is a name and fields (``approval_requested``, ``session_id=…``, ``tool=…``), with
the actor, session, message and trace bound by the runtime (``structlog.contextvars``).

* An application that configured structlog gets them through its own configuration: its
  processors, renderer and level filter, untouched.
* One that did not gets them as ``logging`` records of the logger ``tether``, so its own
  handlers, formatters and levels decide what is shown and where: with none configured,
  Python prints warnings and errors on stderr, and a library never prints its info lines
  into someone's program unasked. A record's message is the event and its fields as
  ``key=value`` pairs (logfmt); the record also carries them as attributes, for structured
  handlers: ``record.event`` (the name) and ``record.tether`` (the fields, with
  ``timestamp``, when it happened, in ISO 8601, UTC).

Levels: ``info`` for what happens by design (an approval requested, an actor started or
restarted by its supervisor), ``warning`` for what an operator may need to look at (a breaker
opened, a loop detected, a failed attempt), ``error`` for what failed. Times among the fields
are ISO 8601 too (``iso_time``).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import MutableMapping
from typing import Any

import structlog

LOGGER = "tether"

_timestamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
_logfmt = structlog.processors.LogfmtRenderer(bool_as_flag=False)


def iso_time(seconds: float) -> str:
    """A time in seconds since the epoch (the runtime clock's), as ISO 8601 in UTC."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _to_record(
    logger: Any, method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[str], dict[str, Any]]:
    """The last processor: the arguments of the ``logging.Logger`` call (see the docstring)."""
    exc_info = event_dict.pop("exc_info", None)
    event = str(event_dict.pop("event", ""))
    fields = dict(event_dict)
    shown = {k: v for k, v in fields.items() if k != "timestamp"}
    text = _logfmt(logger, method, shown) if shown else ""
    message = f"{event} {text}" if text else event
    return (message,), {"exc_info": exc_info, "extra": {"event": event, "tether": fields}}


_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


class _LevelFirst(structlog.stdlib.BoundLogger):
    """structlog's stdlib logger, that asks the logger's level before anything else: an event
    the application does not show costs one ``isEnabledFor``, not a pass through processors."""

    def _proxy_to_logger(
        self, method_name: str, event: str | None = None, *event_args: str, **event_kw: Any
    ) -> Any:
        level = _LEVELS.get(method_name)
        if level is not None and not self._logger.isEnabledFor(level):
            return None
        return super()._proxy_to_logger(method_name, event, *event_args, **event_kw)


class TetherLogger:
    """``log``: structlog's logger when the application configured structlog, else one bound
    to ``logging.getLogger("tether")`` (decided again at each call: an application may
    configure structlog after importing tether)."""

    __slots__ = ("_stdlib",)

    def __init__(self) -> None:
        self._stdlib: Any = None

    def _target(self) -> Any:
        if structlog.is_configured():
            return structlog.get_logger(LOGGER)
        if self._stdlib is None:
            # The bound logger itself, not wrap_logger's lazy proxy (which builds one per call).
            self._stdlib = _LevelFirst(
                logging.getLogger(LOGGER),
                processors=[structlog.contextvars.merge_contextvars, _timestamp, _to_record],
                context={},
            )
        return self._stdlib

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)
