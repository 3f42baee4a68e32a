"""No function or method of ``src/pocketmq`` is longer than 80 lines (issue 30).

A long function does several things; split it along its concepts (a step, an inner loop, the
handlers of one request family as a class with a ``table()``) so each part can be read and
tested on its own. On hot paths split per batch, not per message: a helper called once per
read is free, one called once per record is not.

How a function is measured: from its ``def`` line to its last line (``end_lineno - lineno + 1``
as :mod:`ast` gives them), so its docstring, comments and blank lines count and its decorators
do not. A nested function counts inside the function that holds it and is also measured on its
own. There is no allowlist: every function of the package is under the limit. The test only
reads source files with ``ast`` (about a second).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pocketmq

SRC = Path(pocketmq.__file__).resolve().parent
LIMIT = 80

Function = ast.FunctionDef | ast.AsyncFunctionDef


def long_functions(root: Path, limit: int = LIMIT) -> list[str]:
    """``path:line: name (N lines)`` for every function below ``root`` longer than ``limit``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        module = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = path.relative_to(root.parent)
        functions = [node for node in ast.walk(module) if isinstance(node, Function)]
        for node in sorted(functions, key=lambda node: node.lineno):
            if node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    found.append(f"{where}:{node.lineno}: {node.name} ({length} lines)")
    return found


def test_no_function_is_longer_than_the_limit() -> None:
    found = long_functions(SRC)
    assert not found, f"functions over {LIMIT} lines (split them along their concepts):\n" + (
        "\n".join(found)
    )


def _body(lines: int, indent: str) -> str:
    return "".join(f"{indent}x{i} = {i}\n" for i in range(lines))


def test_the_rule_sees_what_it_should(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "sizes.py").write_text(
        # lines 1-80: exactly at the limit
        "def fits():\n"
        + _body(LIMIT - 1, "    ")
        # 81-161
        + "async def too_long():\n"
        + _body(LIMIT, "    ")
        # 162-244: the decorator does not count
        + "class Holder:\n    @staticmethod\n    def method():\n"
        + _body(LIMIT, "        ")
        # 245-325: the nested function fits, the one holding it does not
        + "def outer():\n    def inner():\n"
        + _body(LIMIT - 2, "        ")
        + "    return inner\n"
        # 326-407: defined under an if
        + "if True:\n    def guarded():\n"
        + _body(LIMIT, "        ")
    )
    assert long_functions(package) == [
        "pkg/sizes.py:81: too_long (81 lines)",
        "pkg/sizes.py:164: method (81 lines)",
        "pkg/sizes.py:245: outer (81 lines)",
        "pkg/sizes.py:327: guarded (81 lines)",
    ]
