"""What both ways of consuming (concurrent workers, orderly lanes) are made of: the listener to
call, and what follows its verdict — successes reported, failures handed back, the process
queue's new commit offset given to the offset store."""

from __future__ import annotations

from pocketmq.client.consumer.listener import ListenerCall
from pocketmq.client.consumer.offsets import OffsetStore
from pocketmq.client.consumer.reports import OutcomeReports
from pocketmq.client.consumer.retry import RetryHandBack
from pocketmq.client.consumer.state import ConsumerState

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
