"""The build of the compiled hot paths (hatch_build.py, docs/design.md "Compiled hot paths"): a
compile that fails, or POCKETMQ_NO_EXTENSIONS at install, leaves a pure-Python build and never
fails the install."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_data() -> dict[str, Any]:
    return {"force_include": {}, "pure_python": True, "infer_tag": False}


def test_no_extensions_at_install_builds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POCKETMQ_NO_EXTENSIONS", "1")
    data = _build_data()
    assert _hook().compile_for(ROOT, "standard", data, tmp_path) is False
    assert data == _build_data()
    assert "POCKETMQ_NO_EXTENSIONS is set: pure Python" in capsys.readouterr().err


def test_a_failing_compiler_leaves_a_pure_build_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("POCKETMQ_NO_EXTENSIONS", raising=False)
    monkeypatch.setenv("CC", "false")  # a C compiler that fails every file
    data = _build_data()
    assert _hook().compile_for(ROOT, "standard", data, tmp_path) is False  # it did not raise
    assert data == _build_data()  # pure-Python wheel: no files, no platform tag
    assert (
        "WARNING: compiling the hot paths failed, installing pure Python" in capsys.readouterr().err
    )


def test_a_built_file_replaces_a_loaded_one_under_a_new_inode(tmp_path: Path) -> None:
    # a process with the old library mapped keeps it: the file it mapped is not rewritten
    target = tmp_path / "twin.so"
    target.write_bytes(b"old build")
    before = target.stat().st_ino
    held = target.open("rb")  # as a loaded library holds the old file
    built = tmp_path / "out" / "twin.so"
    built.parent.mkdir()
    built.write_bytes(b"new build")
    _hook().install_file(built, target)
    assert target.read_bytes() == b"new build"
    assert target.stat().st_ino != before
    assert held.read() == b"old build"
    held.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "twin.so"]
