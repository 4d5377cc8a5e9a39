"""tether's modules import each other in layers, and never in a circle.

Every ``import`` of every module under ``tether/`` counts, wherever it is written: at the top,
inside ``if TYPE_CHECKING:``, or inside a function. A circle is refused even when Python would
survive it (a ``TYPE_CHECKING`` import, a function-local one): a module in a circle cannot be
read, tested or changed without the others. An import from a lower layer to a higher one is
refused too, and so is one between two areas of the same layer: those stay independent.

A package's ``__init__`` is the module ``tether.x``; importing ``tether.x.y`` counts as an
import of ``tether.x.y`` only (that Python runs ``tether/x/__init__.py`` first is not a
dependency the importing module chose).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

import tether

PACKAGE = Path(tether.__file__).parent

#: The layers, lowest first. An area is a top-level module or subpackage of ``tether``
#: (``tether`` itself is the package's ``__init__``: the public API, above the runtime).
#:
#: * ``models`` (the provider SDKs) implement the actors' ``Model`` protocol: beside the
#:   supervisor, under the runtime, which never imports them.
#: * ``testing`` (the fakes, the store conformance suite), ``bridges`` (brokers feeding a
#:   runtime) and ``mcp`` (MCP servers' tools, whose connections the runtime supervises) use
#:   the runtime: above it, beside the public API.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "deprecation", "otel", "logs"),
    ("telemetry", "app_dir"),
    ("actors", "store"),
    ("supervisor", "models"),
    ("runtime",),
    ("tether", "testing", "bridges", "mcp"),
    ("render", "demo_agent"),
    ("console", "demo"),
    ("cli",),
    ("__main__",),
)
RANK = {area: rank for rank, areas in enumerate(LAYERS) for area in areas}


def module_names() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__``)."""
    names: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["tether", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """The tether modules ``name`` imports, each with the line of its import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _known(alias.name, node.lineno, modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from tether.x import y`` imports the module ``tether.x.y`` if there is one.
                target = f"{source}.{alias.name}"
                yield from _known(target if target in modules else source, node.lineno, modules)


def _known(target: str, line: int, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    while target and target not in modules:
        target = target.rpartition(".")[0]
    if target:
        yield target, line


def import_graph() -> dict[str, dict[str, int]]:
    """``{module: {imported module: line}}`` over the whole package, self-imports left out."""
    modules = module_names()
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for target, line in imported(name, path, modules):
            if target != name:
                edges.setdefault(target, line)
    return graph


def area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "tether"


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One circle per strongly connected group of modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(one_circle(graph, set(group)))
    return found


def one_circle(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child == start:
                    return [*paths[node], start]
                if child in group and child not in paths:
                    paths[child] = [*paths[node], child]
                    following.append(child)
        frontier = following
    raise AssertionError(f"no circle through {start} in {sorted(group)}")


def describe(graph: dict[str, dict[str, int]], circle: list[str]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(circle)]
    return " -> ".join([*steps, circle[-1]])


def test_no_module_of_tether_imports_itself_through_others() -> None:
    graph = import_graph()
    found = [describe(graph, circle) for circle in circles(graph)]
    assert not found, "import circles:\n" + "\n".join(found)


def test_every_area_of_tether_has_a_layer() -> None:
    unplaced = sorted({area(m) for m in import_graph()} - set(RANK))
    assert not unplaced, f"areas with no layer in tests/test_layers.py LAYERS: {unplaced}"


def test_no_module_imports_from_its_own_layer_or_above() -> None:
    graph = import_graph()
    wrong = []
    for module, edges in sorted(graph.items()):
        for target, line in sorted(edges.items()):
            here, there = area(module), area(target)
            if here != there and RANK.get(there, -1) >= RANK.get(here, -1):
                wrong.append(
                    f"{module} (line {line}) imports {target}: {here} is not above {there}"
                )
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_check_finds_a_circle_and_names_it() -> None:
    graph = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7, "d": 1}, "d": {}}
    assert [describe(graph, c) for c in circles(graph)] == [
        "a (line 3) -> b (line 5) -> c (line 7) -> a"
    ]


def test_imports_inside_type_checking_and_functions_count(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from tether.runtime.runtime import Runtime\n"
        "def f() -> None:\n"
        "    from . import cell\n",
        encoding="utf-8",
    )
    modules = {"tether.runtime.runtime": source, "tether.runtime.cell": source}
    found = sorted(imported("tether.runtime.mod", source, modules))
    assert found == [("tether.runtime.cell", 5), ("tether.runtime.runtime", 3)]
