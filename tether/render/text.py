"""Values and times as one line of text: stored msgpack decoded, JSON compact or indented,
long text cut short, wall-clock times with how far they are from now."""

from __future__ import annotations

import time
from typing import Any

import msgspec

#: The longest cell in a table, or value on a line, before it is cut short.
CELL_WIDTH = 60


def decode(blob: bytes) -> Any:
    """A stored msgpack value, untyped (Messages and Events carry their type tag)."""
    try:
        return msgspec.msgpack.decode(blob)
    except msgspec.DecodeError:
        return {"(undecodable)": blob.hex()}


def enc_hook(obj: Any) -> Any:
    """JSON for what msgpack decoding can leave that JSON has no word for."""
    if isinstance(obj, msgspec.msgpack.Ext):
        return {"(msgpack ext)": obj.code, "data": bytes(obj.data).hex()}
    return repr(obj)


def compact(value: Any, *, cut_at: int | None = CELL_WIDTH) -> str:
    """``value`` as compact JSON, cut to ``cut_at`` characters (None: whole)."""
    text = msgspec.json.encode(value, enc_hook=enc_hook).decode()
    return text if cut_at is None else cut(text, cut_at)


def pretty(value: Any) -> str:
    """``value`` as JSON indented by two spaces."""
    return msgspec.json.format(msgspec.json.encode(value, enc_hook=enc_hook), indent=2).decode()


def cut(text: str, width: int = CELL_WIDTH) -> str:
    """``text`` on one line (runs of whitespace made one space), at most ``width`` long."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def one_line(text: str) -> str:
    """An error message on one line (never empty)."""
    return " ".join(text.split()) or "failed"


def clock(ts: float) -> str:
    """A wall-clock time in this machine's zone."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def when(ts: float, now: float) -> str:
    """A wall-clock time in this machine's zone, with how far it is from now."""
    delta = ts - now
    distance = span(abs(delta))
    return f"{clock(ts)} ({'in ' + distance if delta > 0 else distance + ' ago'})"


def span(seconds: float) -> str:
    """A duration, rounded to the unit that reads best: 42s, 5m, 1.5h, 2.0d."""
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
