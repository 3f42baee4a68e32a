"""Compiles pocketmq's measured hot paths with mypyc at install (docs/design.md, "Compiled hot
paths"); a hatchling build hook, also runnable alone (``python hatch_build.py``: build in place;
``--if-stale``: only when a module is not built from its current sources).

Each module of :data:`GROUPS` is copied to ``<name>_c.py``, its imports of the other modules of
its group pointed at their twins and the SHA-256 of the group's sources appended, compiled with
mypyc, and shipped beside the pure module, which stays importable (:mod:`pocketmq.compiled`
picks one at run time). An editable install (``make install``) builds in place, into ``src/``.
Nothing here may fail an install: with ``POCKETMQ_NO_EXTENSIONS=1``, without a C compiler, or
when mypyc fails, the build says why and the wheel is pure Python.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: The modules compiled, chosen from profiles (docs/benchmarks.md, "Where the time goes"), in
#: groups: the modules of a group call each other natively and are used or not together.
GROUPS = [
    ["pocketmq/protocol/_framecodec.py"],
    [  # a push consumer's receive -> listener -> commit path
        "pocketmq/client/_views.py",
        "pocketmq/client/consumer/_work.py",
        "pocketmq/client/consumer/_process_queue.py",
        "pocketmq/client/consumer/_listener.py",
        "pocketmq/client/consumer/_reports.py",
        "pocketmq/client/consumer/_consumption.py",
        "pocketmq/client/consumer/_concurrent.py",
    ],
    ["pocketmq/store/_readpass.py"],  # a pull's per-record decode and verification
    [  # a send's per-request store work: the append, queue entries and log segments
        "pocketmq/store/_consumequeue.py",
        "pocketmq/store/_commitlog.py",
        "pocketmq/store/_writer.py",
    ],
]
MODULES = [module for group in GROUPS for module in group]

_MYPYC = """
import sys
from mypyc.build import mypycify
from setuptools import Distribution
from setuptools.command.build_ext import build_ext

modules, out = sys.argv[1:-1], sys.argv[-1]
# the rest of the package is read for types only: its own third-party imports need not be here
options = ["--follow-imports=silent", "--ignore-missing-imports"]
# the sources passed mypy --strict as they are; a twin only differs in naming its group's twins
# where the pure modules around it name the pure classes (the same classes at run time)
options += ["--disable-error-code=arg-type"]
extensions = mypycify(
    options + modules,
    opt_level="3",
    debug_level="0",
    target_dir="build",
    group_name="pocketmq._compiled",  # the shared library: pocketmq/_compiled__mypyc.*.so
)
command = build_ext(Distribution({"ext_modules": extensions, "script_name": "hatch_build"}))
command.build_lib, command.build_temp = out, "build/temp"
command.ensure_finalized()
command.run()
"""


def _enabled() -> bool:
    return os.environ.get("POCKETMQ_NO_EXTENSIONS", "") in ("", "0")


def _dotted(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def twin_source(src: Path, group: list[str], module: str) -> str:
    """The source compiled for ``module`` of ``group``: the module with its imports of the
    group's modules pointed at their twins, and the group's names and digest appended (what
    :func:`pocketmq.compiled.load` checks)."""
    text = (src / module).read_text()
    for other in group:
        text = re.sub(rf"\b{re.escape(_dotted(other))}\b", _dotted(other) + "_c", text)
    digest = hashlib.sha256(b"".join((src / other).read_bytes() for other in group))
    names = tuple(_dotted(other) for other in group)
    return text + f"\nSOURCE_GROUP = {names!r}\nSOURCE_DIGEST = {digest.hexdigest()!r}\n"


def build(root: Path, out: Path) -> list[str]:
    """Compile :data:`MODULES` of the project at ``root``; returns the built files' paths
    relative to ``out`` (package paths). Raises when any step fails."""
    src = root / "src"
    with tempfile.TemporaryDirectory(prefix="pocketmq-mypyc-") as scratch:
        tree = Path(scratch) / "src"
        # the whole package, so mypy resolves what the compiled modules import
        shutil.copytree(src / "pocketmq", tree / "pocketmq", ignore=shutil.ignore_patterns("*.so"))
        names = []
        for group in GROUPS:
            for module in group:
                twin = tree / module.replace(".py", "_c.py")
                twin.write_text(twin_source(src, group, module))
                names.append(str(twin.relative_to(tree)))
        subprocess.run(
            [sys.executable, "-c", _MYPYC, *names, str(out)],
            cwd=tree,
            check=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    return sorted(str(p.relative_to(out)) for p in out.rglob("*.so"))


def _say(message: str) -> None:
    print(f"pocketmq build: {message}", file=sys.stderr, flush=True)


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run alone, outside a build
    BuildHookInterface = object  # type: ignore[assignment,misc]


def compile_for(root: Path, version: str, build_data: dict[str, Any], out: Path) -> bool:
    """Compile into ``out`` for a wheel (``version`` "standard": the files go into it) or an
    editable install ("editable": copied into ``src/``); True when compiled. Never raises: a
    failure is said and the build goes on in pure Python."""
    if not _enabled():
        _say("POCKETMQ_NO_EXTENSIONS is set: pure Python")
        return False
    started = time.monotonic()
    try:
        built = build(root, out)
    except Exception as exc:  # no compile failure may fail an install
        detail = exc.output.decode(errors="replace")[-2000:] if hasattr(exc, "output") else ""
        _say(f"WARNING: compiling the hot paths failed, installing pure Python: {exc}\n{detail}")
        return False
    _say(f"compiled {', '.join(MODULES)} in {time.monotonic() - started:.0f} s")
    for relative in built:
        if version == "editable":
            install_file(out / relative, root / "src" / relative)
        else:
            build_data["force_include"][str(out / relative)] = relative
    build_data["pure_python"] = False
    build_data["infer_tag"] = True
    return True


class CompiledHotPaths(BuildHookInterface):  # type: ignore[misc,valid-type]
    """hatchling's ``custom`` build hook for the wheel target (pyproject.toml)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Compile, and ship the result (in place for an editable install); never raise."""
        self._out = Path(tempfile.mkdtemp(prefix="pocketmq-ext-"))
        compile_for(Path(self.root), version, build_data, self._out)

    def finalize(self, version: str, build_data: dict[str, Any], artifact: str) -> None:
        """The wheel is written: drop the compiled files' scratch directory."""
        shutil.rmtree(self._out, ignore_errors=True)


def install_file(built: Path, target: Path) -> None:
    """Put ``built`` at ``target`` under a new inode: copied beside it, then renamed over it. A
    process that has the old shared library loaded (``--if-stale`` imports the twins to check
    them) keeps its mapping; copying over the file in place rewrote pages it had mapped, and
    such a process could crash (it did once, at exit, after a finished build)."""
    partial = target.with_name(target.name + ".partial")
    shutil.copy2(built, partial)
    os.replace(partial, target)


def stale(root: Path) -> list[str]:
    """The modules of :data:`GROUPS` that would run pure from ``root``'s sources: not built, or
    built from other sources (``make install`` then builds; a fresh build is left alone)."""
    sys.path.insert(0, str(root / "src"))
    from pocketmq import compiled

    names = [_dotted(module) for module in MODULES]
    return [name for name in names if compiled.load(name).__name__ != name + "_c"]


if __name__ == "__main__":
    if not _enabled():
        _say("POCKETMQ_NO_EXTENSIONS is set: nothing to build")
        sys.exit(0)
    if sys.argv[1:] == ["--if-stale"] and not stale(Path(__file__).resolve().parent):
        _say("the compiled hot paths are built from these sources")
        sys.exit(0)
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="pocketmq-ext-") as directory:
        for relative in build(here, Path(directory)):
            install_file(Path(directory) / relative, here / "src" / relative)
            _say(f"built src/{relative}")
