"""What both ways of consuming (concurrent workers, orderly lanes) are made of: the listener to
call, and what follows its verdict — successes reported, failures handed back, the process
queue's new commit offset given to the offset store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pocketmq.client.consumer.offsets import OffsetStore
from pocketmq.client.consumer.retry import RetryHandBack
from pocketmq.client.consumer.state import ConsumerState

if TYPE_CHECKING:  # the per-message path imports this module: no import cycle at run time
    from pocketmq.client.consumer.hotpath import ListenerCall, OutcomeReports

__all__ = ["Consumption"]


class Consumption:
    """The parts a way of consuming works with (see the module docstring)."""

    def __init__(
        self,
        state: ConsumerState,
        listener: ListenerCall,
        reports: OutcomeReports,
        retry: RetryHandBack,
        offsets: OffsetStore,
    ) -> None:
        self._state = state
        self._listener = listener
        self._reports = reports
        self._retry = retry
        self._offsets = offsets
