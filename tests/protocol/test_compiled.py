"""The compiled frame codec against its pure-Python source (docs/design.md, "Compiled hot paths"):
the same random streams, cut at random places, with the size limit changed and frames abandoned
at random, give identical frames, identical buffered sizes and identical errors; and
``POCKETMQ_NO_EXTENSIONS=1`` really runs the pure module.

Without a compiled build (a machine without a C compiler, ``POCKETMQ_NO_EXTENSIONS`` at install)
the comparison is skipped, unless ``POCKETMQ_REQUIRE_EXTENSIONS=1`` says the build must be there
(``make test`` sets it for its compiled run)."""

from __future__ import annotations

import functools
import itertools
import logging
import os
import random
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pocketmq import compiled
from pocketmq.protocol import _framecodec as pure
from pocketmq.protocol.codes import FrameKind
from tests.twins import compiled_twin

PURE = "pocketmq.protocol._framecodec"


def _compiled() -> ModuleType:
    return compiled_twin(PURE)


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """What a call gave, comparable across implementations (their Frame classes differ)."""
    try:
        result = call()
    except Exception as exc:
        return "error", (type(exc).__name__, str(exc))
    if isinstance(result, list):
        return "frames", [(f.kind, f.code, f.request_id, f.body) for f in result]
    if result is not None and hasattr(result, "body_size"):
        return "header", tuple(result)
    return "value", result


def _frame(rng: random.Random) -> bytes:
    kinds = [int(k) for k in FrameKind]
    body = rng.randbytes(rng.choice([0, 1, 7, 100, 1024, 5000]))
    kind = rng.choice(kinds) if rng.random() > 0.02 else rng.randrange(256)
    header = struct.pack(
        "<IBBHI", len(body) + 8, kind, 0, rng.randrange(65536), rng.getrandbits(32)
    )
    frame = header + body
    if rng.random() < 0.03:  # a corrupt length
        frame = struct.pack("<I", rng.choice([0, 3, 7, 1 << 31, rng.getrandbits(32)])) + frame[4:]
    return frame


def _stream(rng: random.Random) -> bytes:
    return b"".join(_frame(rng) for _ in range(rng.randrange(1, 40)))


def _chunks(rng: random.Random, data: bytes) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randrange(0, 12))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def test_the_same_random_streams_give_the_same_frames_and_errors() -> None:
    fast = _compiled()
    rng = random.Random(32)
    for _ in range(400):
        seed = rng.getrandbits(32)
        decoders = [pure.FrameDecoder(), fast.FrameDecoder()]
        script = random.Random(seed)
        data = _stream(script)
        for chunk in _chunks(script, data):
            max_frames = script.choice([0, 0, 0, 1, 2])
            limit = script.choice([None, None, 64, 1024, 4096])
            abandon = script.random() < 0.1
            results = []
            for decoder in decoders:
                if limit is not None:
                    decoder.max_body = limit
                steps = [_outcome(functools.partial(decoder.feed, chunk, max_frames))]
                steps.append(_outcome(functools.partial(decoder.feed, b"", max_frames)))
                if abandon:
                    steps.append(_outcome(decoder.abandon_partial))
                steps.append(("buffered", decoder.buffered))
                results.append(steps)
            assert results[0] == results[1], f"seed {seed}"
            if any(kind == "error" for kind, _ in results[0]):
                break  # the stream is unusable after a ProtocolError (both agree on that)


def test_encoding_gives_the_same_bytes_and_the_same_refusals() -> None:
    fast = _compiled()
    rng = random.Random(7)
    for _ in range(2000):
        kind = rng.choice([0, 1, 2, 255, 256, -1])
        code = rng.choice([0, 10, 65535, 65536])
        request_id = rng.choice([0, 1, rng.getrandbits(32), 1 << 32])
        body = rng.randbytes(rng.choice([0, 3, 64]))
        args = (kind, code, request_id, body)
        mine = _outcome(functools.partial(pure.encode_frame, *args))
        assert mine == _outcome(functools.partial(fast.encode_frame, *args)), args
    huge = b"\0" * (pure.MAX_FRAME_BODY + 1)
    assert _outcome(lambda: pure.encode_frame(1, 1, 1, huge)) == _outcome(
        lambda: fast.encode_frame(1, 1, 1, huge)
    )


def _implementation(env: dict[str, str]) -> list[str]:
    """The frame codec module a fresh interpreter uses, and the codec modules it imported."""
    script = (
        "import sys, pocketmq.protocol.frames as f; "
        "print(f.IMPLEMENTATION, *sorted(m for m in sys.modules if 'framecodec' in m))"
    )
    environment = {**os.environ, **env}
    result = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, check=True
    )
    return result.stdout.split()


def test_no_extensions_runs_the_pure_module_and_never_imports_the_compiled_one() -> None:
    assert _implementation({"POCKETMQ_NO_EXTENSIONS": "1"}) == [PURE, PURE]


def test_a_build_runs_compiled_by_default() -> None:
    _compiled()
    assert _implementation({"POCKETMQ_NO_EXTENSIONS": ""})[0] == PURE + "_c"


_PACKAGES = itertools.count()


def _package(tmp_path: Path, source: str, digest_of: str) -> str:
    """A package with a module and a "compiled" twin recording the digest of ``digest_of``."""
    name = f"twinpkg{next(_PACKAGES)}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(source)
    (tmp_path / "other.py").write_text(digest_of)
    digest = compiled.source_digest(str(tmp_path / "other.py"))
    (package / "mod_c.py").write_text(f'WHICH = "twin"\nSOURCE_DIGEST = "{digest}"\n')
    return f"{name}.mod"


def test_load_takes_a_twin_built_from_this_source_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(compiled, "COMPILED", [])
    monkeypatch.setattr(compiled, "NO_EXTENSIONS", False)  # whatever this run's environment
    source = 'WHICH = "pure"\n'
    current = _package(tmp_path, source, digest_of=source)
    assert compiled.load(current).WHICH == "twin"
    assert [current] == compiled.COMPILED
    stale = _package(tmp_path, source, digest_of='WHICH = "an older pure"\n')
    with caplog.at_level(logging.WARNING, logger="pocketmq"):
        assert compiled.load(stale).WHICH == "pure"  # never a stale build
    assert "built from another version of mod.py" in caplog.text
    monkeypatch.setattr(compiled, "NO_EXTENSIONS", True)
    assert compiled.load(current).WHICH == "pure"


def _group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    """A package ``name`` with modules ``a`` and ``b`` compiled as one group: a "twin" of ``a``
    recording the digest of both sources; loads may take twins from now on."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(compiled, "COMPILED", [])
    monkeypatch.setattr(compiled, "NO_EXTENSIONS", False)  # whatever this run's environment
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for module in ("a", "b"):
        (package / f"{module}.py").write_text(f'WHICH = "pure {module}"\n')
    digest = compiled.source_digest(str(package / "a.py"), str(package / "b.py"))
    group = (f"{name}.a", f"{name}.b")
    (package / "a_c.py").write_text(
        f'WHICH = "twin a"\nSOURCE_GROUP = {group!r}\nSOURCE_DIGEST = "{digest}"\n'
    )
    return package


def test_a_twin_of_a_group_is_stale_when_any_source_of_its_group_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twins compiled together import each other: one changed source makes them all pure, so a
    process never mixes a twin with the pure version of a module it was compiled against."""
    package = _group(tmp_path, monkeypatch, "grouppkg")
    assert compiled.load("grouppkg.a").WHICH == "twin a"
    (package / "b.py").write_text('WHICH = "pure b, changed"\n')
    assert compiled.load("grouppkg.a").WHICH == "pure a"


def test_a_twin_of_a_group_naming_a_source_no_longer_there_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module taken out of a group (its private source removed) leaves the group's older
    twins behind: they were compiled against that module's twin, so they must not run."""
    package = _group(tmp_path, monkeypatch, "leftpkg")
    assert compiled.load("leftpkg.a").WHICH == "twin a"
    (package / "b.py").unlink()
    assert compiled.load("leftpkg.a").WHICH == "pure a"
    (package / "a.py").rename(package / "a_kept.py")  # no source of the group at all
    sys.modules.pop("leftpkg.a_c", None)
    assert compiled.load("leftpkg.a").WHICH == "twin a"  # an install without sources


def test_a_twin_that_fails_as_it_loads_leaves_the_pure_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A build of older sources may raise as it loads (mypyc's "Reached allegedly unreachable
    code!" did, once): pure Python and a warning, not a process that cannot start."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(compiled, "COMPILED", [])
    monkeypatch.setattr(compiled, "NO_EXTENSIONS", False)
    name = _package(tmp_path, 'WHICH = "pure"\n', digest_of='WHICH = "pure"\n')
    twin = tmp_path / name.replace(".", "/").replace("/mod", "/mod_c.py")
    twin.write_text('raise RuntimeError("Reached allegedly unreachable code!")\n')
    with caplog.at_level(logging.WARNING, logger="pocketmq"):
        assert compiled.load(name).WHICH == "pure"
    assert "failed to load" in caplog.text
