"""Every module and every public class, function and method of ``src/pocketmq`` has a docstring.

The project's rule (docs/testing.md, "Layout"): a docstring says *why* the thing exists, so the
next reader does not have to reverse-engineer it. What counts as public:

- a module-level class or function whose name does not start with ``_`` (in any module, private
  modules included: their names are shared across the package);
- a method or nested class of such a class, by the same rule; properties count;
- not: dunder methods (``__init__`` and friends are described by their class), functions nested
  in functions, ``@overload`` stubs, and property setters and deleters (the property's docstring
  covers them).

Wire structures (``protocol/structs.py``) are no exception: each says what the request or
answer is for, not only what its fields are. The test only reads source files with ``ast``, so
it costs a fraction of a second.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pocketmq

SRC = Path(pocketmq.__file__).resolve().parent
Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _is_exempt(node: Definition) -> bool:
    if node.name.startswith("_"):
        return True
    for decorator in node.decorator_list:
        name = decorator.attr if isinstance(decorator, ast.Attribute) else None
        if isinstance(decorator, ast.Name):
            name = decorator.id
        if name in ("overload", "setter", "deleter"):
            return True
    return False


def _public(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, Definition]]:
    for node in body:
        if isinstance(node, Definition) and not _is_exempt(node):
            yield prefix + node.name, node
            if isinstance(node, ast.ClassDef):
                yield from _public(node.body, f"{prefix}{node.name}.")


def missing_docstrings(root: Path) -> list[str]:
    """``path:line: name`` for every module and public definition below ``root`` without one."""
    missing: list[str] = []
    for path in sorted(root.rglob("*.py")):
        module = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(root.parent)
        if ast.get_docstring(module) is None:
            missing.append(f"{where}:1: (module)")
        for name, node in _public(module.body, ""):
            if ast.get_docstring(node) is None:
                missing.append(f"{where}:{node.lineno}: {name}")
    return missing


def test_every_public_definition_has_a_docstring() -> None:
    missing = missing_docstrings(SRC)
    assert not missing, "public definitions without a docstring (say why it exists):\n" + (
        "\n".join(missing)
    )


def test_the_rule_sees_what_it_should(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text(
        '"""A module."""\n'
        "from typing import overload\n"
        "class Public:\n"
        "    def method(self): pass\n"
        "    def _private(self): pass\n"
        "    def __init__(self): pass\n"
        "    @property\n"
        "    def value(self):\n"
        '        """Documented."""\n'
        "    @value.setter\n"
        "    def value(self, v): pass\n"
        "    class Inner: pass\n"
        "class _Hidden:\n"
        "    def method(self): pass\n"
        "def function():\n"
        "    def helper(): pass\n"
        "@overload\n"
        "def typed(x: int) -> int: ...\n"
        "def typed(x):\n"
        '    """Documented."""\n'
    )
    (package / "bare.py").write_text("X = 1\n")
    assert missing_docstrings(package) == [
        "pkg/bare.py:1: (module)",
        "pkg/mod.py:3: Public",
        "pkg/mod.py:4: Public.method",
        "pkg/mod.py:12: Public.Inner",
        "pkg/mod.py:15: function",
    ]
