"""Why a broker or name server would not start, in one line an operator can act on.

docs/cli.md promises one line and exit code 1 for an error, never a traceback; a refused start
used to print 45 lines of Python (issue 29 item 12). A damaged store names the file and offset
and the commands to run next with this broker's own ``--data-dir`` (and ``--config``: the store
settings must match the data); a port already taken names the option that sets it and what
usually holds it; a data directory locked by another process says so.
"""

from __future__ import annotations

import errno
import re
import shlex
from collections.abc import Mapping

from pocketmq.errors import PocketMQError, StoreCorruptedError

__all__ = ["REFUSALS", "port_taken", "refusal"]

# what a refused start may raise: the store and the broker's own errors, the operating system's
# (ports, files, permissions), and the data directory's lock (RuntimeError)
REFUSALS = (PocketMQError, OSError, RuntimeError, ValueError)

_BOUND_PORT = re.compile(r"\('[^']*', (\d+)\)")


def port_taken(exc: BaseException, ports: Mapping[str, int | None]) -> str | None:
    """For an "address already in use" error, which listener it was, as ``"127.0.0.1:5557
    (the HTTP port, --http-port)"``-like text; None for any other error. ``ports`` maps a
    description ("the HTTP port, --http-port") to the port configured for it."""
    if not isinstance(exc, OSError) or exc.errno != errno.EADDRINUSE:
        return None
    found = _BOUND_PORT.search(str(exc))
    if found is None:
        return "a port"
    port = int(found.group(1))
    named = [what for what, configured in ports.items() if configured == port]
    return f"port {port} ({named[0]})" if named else f"port {port}"


def refusal(
    exc: BaseException,
    *,
    what: str,
    data_dir: str | None = None,
    config_file: str | None = None,
    ports: Mapping[str, int | None] | None = None,
) -> str:
    """The one line (after ``Error: ``) that says why ``what`` ("the broker") did not start and
    what to do next."""
    head = f"cannot start {what}"
    taken = port_taken(exc, ports or {})
    if taken is not None:
        return (
            f"{head}: {taken} is already in use: another broker or name server (the quickstart's "
            "`make run`?) or another program listens there; stop it, or give this one another "
            "port"
        )
    if isinstance(exc, StoreCorruptedError):
        where = ["--data-dir", data_dir or "./data"]
        if config_file:
            where += ["--config", config_file]
        options = shlex.join(where)
        return (
            f"{head}: {exc}. Next: `pocketmq store check {options}` (it lists the damage and "
            f"what it costs), then, with the broker stopped, `pocketmq store repair {options}`"
        )
    if isinstance(exc, RuntimeError) and "in use by another pocketmq process" in str(exc):
        return f"{head}: {exc}: stop that broker first, or give this one another --data-dir"
    return f"{head}: {exc}"
