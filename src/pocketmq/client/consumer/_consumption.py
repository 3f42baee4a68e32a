"""What both ways of consuming (concurrent workers, orderly lanes) are made of: the listener to
call, and what follows its verdict — successes reported, failures handed back. Finished
messages leave their process queue, which flags it for the offset store's next persist
(client/consumer/offsets.py): no offset store is called per message."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from pocketmq.client.consumer.retry import RetryHandBack
from pocketmq.client.consumer.state import ConsumerState

if TYPE_CHECKING:
    from pocketmq.client.consumer._listener import ListenerCall
    from pocketmq.client.consumer._reports import OutcomeReports

_T = TypeVar("_T")

try:  # a marker for mypyc at build time (mypy_extensions is there); nothing to run without it
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - installs without mypy

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
        """Leaves the class as it is (its options concern the compiled build only)."""
        return lambda cls: cls


__all__ = ["Consumption"]


@mypyc_attr(allow_interpreted_subclasses=True)  # the orderly consumer's lanes are pure Python
class Consumption:
    """The parts a way of consuming works with (see the module docstring)."""

    def __init__(
        self,
        state: ConsumerState,
        listener: ListenerCall,
        reports: OutcomeReports,
        retry: RetryHandBack,
    ) -> None:
        self._state = state
        self._listener = listener
        self._reports = reports
        self._retry = retry
