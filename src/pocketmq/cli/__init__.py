"""The ``pocketmq`` command (DESIGN §4 is its contract: options and output are stable).

Each command family lives in its own module and registers itself on :data:`main`; this module
only assembles them.
"""

from pocketmq.cli import pipeline as _pipeline  # noqa: F401  (registers ``pocketmq pipeline``)
from pocketmq.cli._app import main

__all__ = ["main"]
