"""``make run`` installs what running a broker needs, and ``make test`` the rest (issue 29 item
14: ``make run`` installed the test extras, PySpark, Selenium and mypy, a 1.3 GB venv, before
starting a broker). ``make -n`` prints what each target would run in a copy of the Makefile."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    for name in ("Makefile", "pyproject.toml", "hatch_build.py", *COMPILED_SOURCES):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def _hatch_modules() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(f"src/{name}" for name in module.MODULES)


COMPILED_SOURCES = _hatch_modules()  # hatch_build.py's GROUPS, in order


def test_the_makefile_rebuilds_when_any_compiled_source_changes() -> None:
    """The stamp ``make install`` checks is made of every module hatch_build.py compiles: a
    module left out (the store's, once) was not rebuilt after an edit, and its stale twin was
    refused at run time, so the broker ran it as pure Python."""
    text = (ROOT / "Makefile").read_text()
    listed = text.split("COMPILED_SOURCES := ", 1)[1].split("\nCOMPILED_STAMP", 1)[0]
    assert tuple(listed.replace("\\", " ").split()) == COMPILED_SOURCES


def _would_run(checkout: Path, target: str) -> str:
    # run as a user would: not as a sub-make of `make test` (no "Entering directory" lines)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=checkout, capture_output=True, text=True, check=True, env=environment,
    )  # fmt: skip
    return done.stdout


def test_make_run_installs_the_runtime_only(checkout: Path) -> None:
    commands = _would_run(checkout, "run")
    assert "pip install --quiet -e .\n" in commands
    assert "[test]" not in commands
    assert commands.rstrip().endswith(".venv/bin/pocketmq serve")
    assert "hatch_build.py" in commands  # the hot paths are compiled for `make run` too


def test_make_test_installs_the_runtime_then_the_test_extra(checkout: Path) -> None:
    commands = _would_run(checkout, "test")
    runtime = commands.index("pip install --quiet -e .\n")
    assert runtime < commands.index("pip install --quiet -e '.[test]'")


def test_after_make_run_make_test_adds_only_the_test_extra(checkout: Path) -> None:
    digest = hashlib.sha1((checkout / "pyproject.toml").read_bytes()).hexdigest()[:12]
    (checkout / ".venv").mkdir()
    source = b"".join((checkout / name).read_bytes() for name in COMPILED_SOURCES)
    compiled = hashlib.sha1(source).hexdigest()[:12]
    later = time.time() + 5
    for name in (f".installed-run-{digest}", f".compiled-{compiled}"):
        stamp = checkout / ".venv" / name
        stamp.touch()
        os.utime(stamp, (later, later))  # newer than their sources, as after an install
    assert _would_run(checkout, "run").strip() == ".venv/bin/pocketmq serve"
    commands = _would_run(checkout, "test")
    assert "pip install --quiet -e '.[test]'" in commands
    assert "pip install --quiet -e .\n" not in commands
