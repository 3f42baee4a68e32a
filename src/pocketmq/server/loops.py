"""Which event loop a pocketmq process runs on (``pocketmq serve --loop``, docs/semantics.md).

The default is ``auto``: uvloop when it is installed (``pip install pocketmq[uvloop]``), stock
asyncio otherwise. Measured side by side, a uvloop broker is as fast as an asyncio one on every
workload and faster on the default producer's pipelined sends, now that a connection yields the
loop after a large read (docs/benchmarks.md, "Event loops"). ``uvloop`` forces libuv's loop
(failing clearly when it is not installed); ``asyncio`` forces stock asyncio.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from pocketmq.errors import InvalidArgumentError

__all__ = ["LOOPS", "loop_factory", "run"]

LOOPS = ("auto", "asyncio", "uvloop")


def loop_factory(name: str) -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    """The loop actually used for ``name`` and its factory (None: asyncio's own)."""
    if name not in LOOPS:
        raise InvalidArgumentError(f"--loop must be one of {', '.join(LOOPS)}, not {name!r}")
    if name == "asyncio":
        return "asyncio", None
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise InvalidArgumentError(
                "--loop uvloop: uvloop is not installed (pip install uvloop)"
            ) from None
        return "asyncio", None
    return "uvloop", uvloop.new_event_loop


def run(main: Coroutine[Any, Any, None], loop: str = "asyncio") -> str:
    """Run ``main`` to completion on the chosen loop; returns the loop's name."""
    used, factory = loop_factory(loop)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)
    return used
