"""The ``pocketmq`` command (DESIGN §4 is its contract: options and output are stable).

Each command family lives in its own module and registers itself on :data:`main`; this module
only assembles them.
"""

from pocketmq.cli import bench as _bench  # noqa: F401  (bench)
from pocketmq.cli import commands as _commands  # noqa: F401  (topic, group, send, consume)
from pocketmq.cli import deadletter as _deadletter  # noqa: F401  (message, dlq)
from pocketmq.cli import export as _export  # noqa: F401  (export)
from pocketmq.cli import outbox as _outbox  # noqa: F401  (outbox)
from pocketmq.cli import pipeline as _pipeline  # noqa: F401  (pipeline)
from pocketmq.cli import serve as _serve  # noqa: F401  (serve, namesrv)
from pocketmq.cli import store as _store  # noqa: F401  (store check, store repair)
from pocketmq.cli._app import main

__all__ = ["main"]
