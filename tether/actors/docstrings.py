"""A tool's docstring read as a model needs it: the description, and one line per parameter.

Three styles are read, as the OpenAI Agents SDK reads them (through griffe) and as tools are
written in practice:

* Google: an ``Args:`` section (or ``Arguments:``, ``Parameters:``, ``Params:``, ``Keyword
  Args:``), each entry ``name (type): text`` with continuation lines indented under it;
* NumPy: a ``Parameters`` header underlined with dashes, each entry ``name : type`` with its
  text indented on the lines below (``a, b : int`` describes both);
* Sphinx: ``:param name: text`` (or ``:param type name: text``).

The description is the text before the first section of any kind (``Returns:``, ``Raises:``,
``Examples``...): the sections say what the parameters are, and they reach the model through
the input schema instead of being sent twice.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Docstring(NamedTuple):
    description: str
    params: dict[str, str]


# Google section headers: a whole line "Word:" or "Two words:" at the docstring's left margin.
_GOOGLE_HEADER = re.compile(r"^([A-Z][A-Za-z]*(?: [A-Za-z]+)?):\s*$")
_GOOGLE_PARAM_SECTIONS = frozenset(
    {
        "args",
        "arguments",
        "params",
        "parameters",
        "keyword args",
        "keyword arguments",
        "other parameters",
    }
)
_GOOGLE_SECTIONS = _GOOGLE_PARAM_SECTIONS | {
    "attributes",
    "example",
    "examples",
    "note",
    "notes",
    "raises",
    "references",
    "return",
    "returns",
    "see also",
    "todo",
    "warning",
    "warnings",
    "warns",
    "yield",
    "yields",
}
# "name (type, optional): text" or "name: text"; *args/**kwargs keep their stars in docs.
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_RULE = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_PARAM_SECTIONS = frozenset({"parameters", "other parameters", "keyword arguments"})
_NUMPY_ENTRY = re.compile(r"^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::.*)?$")
_SPHINX_FIELD = re.compile(r"^:(\w+)(?:\s+([^:]*?))?\s*:\s*(.*)$")


def parse(doc: str | None) -> Docstring:
    """Split a cleaned docstring (``inspect.getdoc``) into its description and parameter texts."""
    if not doc:
        return Docstring("", {})
    lines = doc.splitlines()
    first_section = len(lines)
    params: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        google = _GOOGLE_HEADER.match(line)
        if google and google.group(1).lower() in _GOOGLE_SECTIONS:
            first_section = min(first_section, i)
            end = _indented_block_end(lines, i + 1)
            if google.group(1).lower() in _GOOGLE_PARAM_SECTIONS:
                params.update(_google_entries(lines[i + 1 : end]))
            i = end
            continue
        if i + 1 < len(lines) and line.strip() and _NUMPY_RULE.match(lines[i + 1]):
            first_section = min(first_section, i)
            end = i + 2
            while end < len(lines) and not (
                end + 1 < len(lines) and lines[end].strip() and _NUMPY_RULE.match(lines[end + 1])
            ):
                end += 1
            if line.strip().lower() in _NUMPY_PARAM_SECTIONS:
                params.update(_numpy_entries(lines[i + 2 : end]))
            i = end
            continue
        sphinx = _SPHINX_FIELD.match(line)
        if sphinx:
            first_section = min(first_section, i)
            end = _indented_block_end(lines, i + 1)
            if sphinx.group(1) in ("param", "parameter", "arg", "argument", "key", "keyword"):
                name = (sphinx.group(2) or "").split()[-1:]
                if name:
                    params[name[0].lstrip("*")] = _join([sphinx.group(3), *lines[i + 1 : end]])
            i = end
            continue
        i += 1
    description = "\n".join(lines[:first_section]).strip()
    return Docstring(description, {k: v for k, v in params.items() if v})


def _indented_block_end(lines: list[str], start: int) -> int:
    """The index after the block of indented (or blank) lines that starts at ``start``."""
    end = start
    while end < len(lines) and (not lines[end].strip() or lines[end][:1] in (" ", "\t")):
        end += 1
    return end


def _google_entries(block: list[str]) -> dict[str, str]:
    entries: dict[str, list[str]] = {}
    indent: int | None = None  # the entries' own indentation: deeper lines continue an entry
    current: list[str] | None = None
    for line in block:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        entry = _GOOGLE_ENTRY.match(line.strip()) if depth <= indent else None
        if entry:
            current = entries.setdefault(entry.group(1), [])
            current.append(entry.group(2))
        elif current is not None:
            current.append(line)
    return {name: _join(text) for name, text in entries.items()}


def _numpy_entries(block: list[str]) -> dict[str, str]:
    entries: dict[str, str] = {}
    names: list[str] = []
    text: list[str] = []

    def close() -> None:
        for name in names:
            entries[name] = _join(text)

    for line in block:
        entry = _NUMPY_ENTRY.match(line) if line[:1] not in (" ", "\t") else None
        if entry and line.strip():
            close()
            names = [n.strip().lstrip("*") for n in entry.group(1).split(",")]
            text = []
        elif names:
            text.append(line)
    close()
    return entries


def _join(lines: list[str]) -> str:
    """One paragraph: the lines stripped and joined by single spaces."""
    return " ".join(part.strip() for part in lines if part.strip())
