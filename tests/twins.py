"""The compiled twin of a pure module, for the differential tests (docs/design.md, "Compiled hot
paths"): skipped without a compiled build, unless ``POCKETMQ_REQUIRE_EXTENSIONS=1`` says it must
be there (``make test`` sets it for its compiled run)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def compiled_twin(pure: str) -> ModuleType:
    """``pure + "_c"``, imported directly (whatever ``POCKETMQ_NO_EXTENSIONS`` says)."""
    try:
        return importlib.import_module(pure + "_c")
    except ImportError:
        if os.environ.get("POCKETMQ_REQUIRE_EXTENSIONS") == "1":
            raise
        pytest.skip(f"no compiled build of {pure} (pure-Python install)")
