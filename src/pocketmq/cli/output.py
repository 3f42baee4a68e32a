"""Tables on the terminal and in pipes.

rich sizes a console to the terminal; without one (``pocketmq topic list | grep``, a script, a
log file) it falls back to 80 columns and wraps every wider cell, so a piped table was cut into
pieces no ``grep`` or ``awk`` could read. Piped, a table takes the width it needs (``COLUMNS``
still wins when set); ``--json`` remains the format meant for programs (docs/cli.md).
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["PIPED_WIDTH", "print_table"]

# wide enough for any table these commands print; rich pads nothing to it (no table expands)
PIPED_WIDTH = 100_000


def print_table(table: Any) -> None:
    """Print a rich ``Table`` (or any renderable) to stdout: the terminal's width on a
    terminal, the width it needs otherwise."""
    from rich.console import Console

    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPED_WIDTH
    Console(width=width).print(table)
