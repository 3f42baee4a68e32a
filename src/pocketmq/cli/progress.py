"""Progress bars for the long commands (``dlq resend``, ``export``), on stderr and only on a
terminal: piped or scripted output stays exactly as docs/cli.md promises."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["progress_bar"]


@contextmanager
def progress_bar(description: str, total: int | None) -> Iterator[Callable[[int, str], None]]:
    """A bar of ``total`` steps (None: unknown); yields ``advance(steps, note)``."""
    console = Console(stderr=True)
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    with bar:
        task = bar.add_task(description, total=total, note="")

        def advance(steps: int, note: str = "") -> None:
            bar.update(task, advance=steps, note=note)

        yield advance
