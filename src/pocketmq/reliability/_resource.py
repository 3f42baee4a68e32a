"""``async with`` for the toolkit's long-lived objects: start on entry, ``aclose()`` on exit.

Why one mixin: backends hold connection pools, the relay and the scheduler hold a background
task, the outbox holds both workers; each must be released on every way out of a block, and
each is used the same way (docs/reliability.md "Resources"). Writing ``__aenter__`` and
``__aexit__`` once keeps them from drifting apart.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["AsyncResource"]


class AsyncResource:
    """An async context manager: ``await start()`` on entry, ``await aclose()`` on exit."""

    async def start(self) -> None:
        """Acquire or start what the resource needs (nothing by default)."""

    async def aclose(self) -> None:
        """Release what the resource holds. Idempotent."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
