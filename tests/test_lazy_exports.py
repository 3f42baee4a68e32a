"""A package whose names load on first use (pocketmq/lazy.py) lists them twice: in its
``TYPE_CHECKING`` block and in its name → module map. Both lists, and ``__all__``, must agree,
and every name must load."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LAZY_PACKAGES = ["pocketmq", "pocketmq.client", "pocketmq.reliability"]


def _type_checking_imports(package: str) -> dict[str, str]:
    """name → module (relative to ``package``) of the imports under ``if TYPE_CHECKING:``."""
    path = SRC / package.replace(".", "/") / "__init__.py"
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for item in node.body:
                assert isinstance(item, ast.ImportFrom), ast.unparse(item)
                assert item.module, ast.unparse(item)
                module = item.module.removeprefix(package + ".")
                found.update({alias.asname or alias.name: module for alias in item.names})
    return found


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_the_type_checking_block_names_what_the_runtime_map_loads(package: str) -> None:
    module = importlib.import_module(package)
    runtime = module._MODULES
    assert _type_checking_imports(package) == runtime
    assert set(runtime) <= set(module.__all__)
    assert set(module.__all__) <= set(dir(module))
    for name, where in runtime.items():
        assert getattr(module, name) is getattr(importlib.import_module(f"{package}.{where}"), name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pocketmq.client

    with pytest.raises(AttributeError, match=r"pocketmq.client.*Nope"):
        pocketmq.client.Nope  # noqa: B018
