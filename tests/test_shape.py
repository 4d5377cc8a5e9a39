"""tether's modules and classes stay small enough to be read whole.

A module over ``MAX_MODULE_LINES`` lines, or a class over ``MAX_CLASS_LINES``, mixes concepts
that each deserve a module (and a name) of their own. Sizes are read with ``ast`` as
``tests/test_layers.py`` reads imports: a module's lines are its source lines; a class's run
from its ``class`` line (or its first decorator) to its last line, docstring and comments
included.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_layers import PACKAGE

MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 400


def module_sizes(root: Path = PACKAGE) -> dict[str, int]:
    """Every module under ``root`` (its path from ``root``'s parent) by its line count."""
    return {
        str(path.relative_to(root.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(root.rglob("*.py"))
    }


def class_sizes(source: str, filename: str = "<source>") -> dict[str, int]:
    """Every class in ``source`` (nested ones as ``Outer.Inner``) by its line count."""
    sizes: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}"
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                sizes[name] = (child.end_lineno or child.lineno) - first + 1
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source, filename), "")
    return sizes


def oversized_modules(root: Path = PACKAGE, limit: int = MAX_MODULE_LINES) -> list[str]:
    return [f"{path}: {n} lines" for path, n in module_sizes(root).items() if n > limit]


def oversized_classes(root: Path = PACKAGE, limit: int = MAX_CLASS_LINES) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for name, n in class_sizes(source, str(path)).items():
            if n > limit:
                found.append(f"{path.relative_to(root.parent)}: class {name}: {n} lines")
    return found


def test_no_module_of_tether_is_over_500_lines() -> None:
    found = oversized_modules()
    assert not found, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(found)


def test_no_class_of_tether_is_over_400_lines() -> None:
    found = oversized_classes()
    assert not found, f"classes over {MAX_CLASS_LINES} lines:\n" + "\n".join(found)


def test_a_class_is_measured_from_its_decorator_to_its_last_line_nested_ones_by_name() -> None:
    source = (
        "import dataclasses\n"
        "@dataclasses.dataclass\n"
        "class Outer:\n"
        "    x: int = 0\n"
        "\n"
        "    class Inner:\n"
        "        y: int = 0\n"
        "\n"
        "    def f(self) -> None:\n"
        "        pass\n"
        "def g() -> None:\n"
        "    class Local:\n"
        "        pass\n"
    )
    assert class_sizes(source) == {"Outer": 9, "Outer.Inner": 2, "Local": 2}


def test_the_checks_name_each_offender_with_its_size(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "short.py").write_text("class Small:\n    x = 1\n", encoding="utf-8")
    (package / "sub" / "long.py").write_text(
        "class Big:\n" + "    x = 1\n" * 6 + "y = 2\n", encoding="utf-8"
    )
    assert oversized_modules(package, limit=5) == ["pkg/sub/long.py: 8 lines"]
    assert oversized_classes(package, limit=5) == ["pkg/sub/long.py: class Big: 7 lines"]
    assert oversized_modules(package, limit=8) == oversized_classes(package, limit=7) == []
