"""Testing only: make chosen file operations of the store fail with a chosen errno.

Disk faults (EIO on fsync, ENOSPC on write, EMFILE on open) are the failure paths a broker must
survive without losing acknowledged messages, and they cannot be produced on demand with a real
disk. Every system call of the store that can fail goes through :mod:`pocketmq.store.files`,
which asks the installed injector first. Nothing is installed in production: the check is one
``None`` test.

A broker process is controlled through a JSON *rules file* (``[store] fault_file`` in its config,
see docs/testing.md), re-read whenever it changes, so a test can arm a fault at the moment it
wants::

    {"rules": [{"op": "fsync", "target": "commitlog", "errno": "EIO", "count": 1}]}

``op`` is one of ``open``, ``write``, ``fsync``, ``allocate``; ``target`` (optional) is the kind
of file (``commitlog``, ``consumequeue``, ``index``, ``checkpoint``, ``marker``, ``state``,
``directory``); ``count`` is how many calls fail (-1: every call). Rules are consumed in order.
The broker asks the same rules about two of its own steps (target ``broker``): ``send_back`` (a
consumer's send-back) and ``retry_send`` (a send to a retry topic), so a test drives the
consumer's fallback paths against a real broker with the one mechanism.
"""

from __future__ import annotations

import errno
import os
import threading

import msgspec

__all__ = ["FaultInjector", "FaultRule", "install", "installed", "uninstall"]


class FaultRule(msgspec.Struct, kw_only=True):
    """One armed fault: the next ``count`` calls of ``op`` on ``target`` fail with ``errno``."""

    op: str
    errno: str = "EIO"
    target: str = ""
    count: int = 1


class _RulesFile(msgspec.Struct):
    rules: list[FaultRule] = []


class FaultInjector:
    """Decides whether a file operation fails; rules come from code or from a rules file."""

    def __init__(self, rules: list[FaultRule] | None = None, *, path: str | None = None) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = list(rules or [])
        self._path = path
        self._seen: tuple[int, int] | None = None
        self.injected = 0

    def arm(self, rule: FaultRule) -> None:
        """Add a rule at run time (in-process tests, instead of a rules file)."""
        with self._lock:
            self._rules.append(rule)

    def check(self, op: str, target: str) -> None:
        """Raise the armed ``OSError`` for this call, if any."""
        with self._lock:
            self._reload()
            for rule in self._rules:
                if rule.op == op and rule.target in ("", target) and rule.count != 0:
                    if rule.count > 0:
                        rule.count -= 1
                    self.injected += 1
                    code = getattr(errno, rule.errno, errno.EIO)
                    raise OSError(code, f"{os.strerror(code)} (injected: {op} {target})")

    def _reload(self) -> None:
        if self._path is None:
            return
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            return
        seen = (stat.st_mtime_ns, stat.st_size)
        if seen == self._seen:
            return
        self._seen = seen
        try:
            with open(self._path, "rb") as handle:
                self._rules = msgspec.json.decode(handle.read(), type=_RulesFile).rules
        except (OSError, msgspec.DecodeError):
            self._rules = []


_installed: FaultInjector | None = None


def install(injector: FaultInjector) -> None:
    """Make ``injector`` decide every file operation of the store in this process."""
    global _installed
    _installed = injector


def uninstall() -> None:
    """Back to real file operations only (the end of a test)."""
    global _installed
    _installed = None


def installed() -> FaultInjector | None:
    """The injector in force, or None: the one check a file operation pays in production."""
    return _installed
