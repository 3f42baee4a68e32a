"""The ``pocketmq`` command (docs/cli.md is its contract: options and output are stable).

Each command family lives in its own module and registers itself on :data:`main` when one of
its commands is first used (``pocketmq.cli._app.COMMAND_MODULES``).
"""

from pocketmq.cli._app import main

__all__ = ["main"]
