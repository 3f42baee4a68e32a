"""Tests are findable from the module they test: a file named after it, or the map in
docs/testing.md ("Where a module's tests are")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "pocketmq"
TESTS = ROOT / "tests"
_ROW = re.compile(r"^\| `([^`]+)`[^|]* \| (.+) \|$")


def _map() -> dict[str, list[str]]:
    text = (ROOT / "docs" / "testing.md").read_text()
    section = text.split("### Where a module's tests are", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        found = _ROW.match(line)
        if found:
            rows[found[1]] = re.findall(r"`([^`]+)`", found[2])
    return rows


def test_every_module_has_a_test_file_or_a_mapped_package() -> None:
    mapped = _map()
    unfindable = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        package = "/".join(rel.parts[:-1]) or "pocketmq"
        own = TESTS.joinpath(*rel.parts[:-1]) / f"test_{path.stem.lstrip('_')}.py"
        if path.name == "__init__.py" or own.exists() or package in mapped:
            continue
        unfindable.append(str(rel))
    assert unfindable == []


def test_the_map_names_real_folders_and_every_test_folder() -> None:
    mapped = _map()
    assert mapped, "the map's table was not found in docs/testing.md"
    named = {folder for folders in mapped.values() for folder in folders}
    for package in mapped:
        assert package == "pocketmq" or (SRC / package).is_dir(), package
    for folder in named:
        assert (ROOT / folder).is_dir(), folder
    test_folders = {
        str(p.relative_to(ROOT))
        for p in TESTS.rglob("*")
        if p.is_dir() and "node_modules" not in p.parts and any(p.glob("test_*.py"))
    }
    assert test_folders - named == set()
