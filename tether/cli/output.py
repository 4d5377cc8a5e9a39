"""How the commands print: JSON for ``--json``, aligned tables and ``key  value`` pairs for
people."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from tether.render.text import cut, enc_hook


def print_json(value: Any) -> None:
    data = msgspec.json.encode(value, enc_hook=enc_hook)
    sys.stdout.write(msgspec.json.format(data, indent=2).decode() + "\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under their headers, columns aligned, each cell cut short."""
    cells = [[cut(str(c)) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [list(headers), *cells]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def pairs(items: Sequence[tuple[str, str]]) -> str:
    """``key  value`` lines, the values aligned."""
    width = max(len(k) for k, _ in items)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in items)


def indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())
