"""The broker's front: every operation a protocol adapter asks for, as a method.

Each method hands its call to the concept class that implements it (docs/design.md, "Where each
concept lives"), so "go to definition" from an adapter lands here, on the role rule that applies
(broker/roles.py) and the concept that does the work. :class:`pocketmq.broker.Broker` builds the
concepts and inherits these methods; what the servers read besides (topics, groups, the store's
figures) is in the query section at the end, so no adapter reaches into the broker's parts.
"""

from __future__ import annotations

from collections.abc import Sequence

from pocketmq.broker.catalog import Catalog, TopicChange
from pocketmq.broker.consumers import ClientInfo, Notify
from pocketmq.broker.deadletters import DeadLetters
from pocketmq.broker.groups import GroupConfig, GroupManager
from pocketmq.broker.history import Attempt, Outcome
from pocketmq.broker.membership import Membership
from pocketmq.broker.model import Delivered, InboundMessage, PullOutcome, SendBatch, SendOutcome
from pocketmq.broker.parts import Shared
from pocketmq.broker.popping import PopPath
from pocketmq.broker.producers import CheckChannel, MayCheck
from pocketmq.broker.pulling import PullPath
from pocketmq.broker.resets import OffsetResets, QueueReset, ResetTarget
from pocketmq.broker.roles import RoleGate, master_only, pops_while_master_away
from pocketmq.broker.sendback import SendBack
from pocketmq.broker.sending import SendPath
from pocketmq.broker.topics import TopicConfig, TopicManager
from pocketmq.broker.transactions import EndOutcome, TransactionService, TransactionStatus
from pocketmq.errors import PocketMQError, ServiceUnavailableError
from pocketmq.store import MessageStore, PutResult, StoredMessage, StoreMessage, StoreStatistics

__all__ = ["BrokerFront"]


class BrokerFront:
    """The operations of one broker, each handed to its concept under its role rule."""

    roles: RoleGate
    sending: SendPath
    send_backs: SendBack
    pulls: PullPath
    pops: PopPath
    dead_letters: DeadLetters
    catalog: Catalog
    membership: Membership
    resets: OffsetResets
    transactions: TransactionService
    store: MessageStore
    topics: TopicManager
    groups: GroupManager
    _shared: Shared

    # -- sending (sending.py, SendPath) --

    async def send(
        self, messages: Sequence[InboundMessage], *, producer_group: str = "", born_host: str = ""
    ) -> list[SendOutcome]:
        """Store a batch; one outcome per message, in order (waits for a sync flush and a
        synchronous slave). Done by :meth:`SendPath.send`."""
        return await self.sending.send(messages, producer_group=producer_group, born_host=born_host)

    def send_now(
        self,
        messages: Sequence[InboundMessage],
        *,
        producer_group: str = "",
        born_host: str = "",
        redrive: bool = False,
    ) -> tuple[list[SendOutcome], int]:
        """Store a batch without waiting. Done by :meth:`SendPath.send_now`."""
        return self.sending.send_now(
            messages, producer_group=producer_group, born_host=born_host, redrive=redrive
        )

    def send_now_many(
        self, batches: Sequence[SendBatch]
    ) -> list[tuple[list[SendOutcome], int] | PocketMQError]:
        """Store several senders' batches in one store append (the requests one read of a
        connection brought). Done by :meth:`SendPath.send_now_many`."""
        return self.sending.send_now_many(batches)

    async def settle(self, outcomes: list[SendOutcome], end: int) -> list[SendOutcome]:
        """Wait until the records up to ``end`` are as safe as the broker promises. Done by
        :meth:`SendPath.settle`."""
        return await self.sending.settle(outcomes, end)

    def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a delayed message before it is due (the ``recall_handle`` of its send outcome);
        returns its message id. Done by :meth:`SendPath.recall`."""
        return self.sending.recall(topic, recall_handle)

    async def append_internal(self, messages: list[StoreMessage]) -> list[PutResult]:
        """Store messages the broker itself produces (retries, dead letters, timers). Done by
        :meth:`SendPath.append_internal`."""
        return await self.sending.append_internal(messages)

    # -- send_backs (sendback.py, SendBack) --

    @master_only("send back goes to its master")
    async def send_back(
        self,
        group: str,
        physical_offset: int,
        message_id: str,
        *,
        delay_level: int = 0,
        max_reconsume_times: int = -1,
        outcome: str = Outcome.RECONSUME_LATER.value,
        error: str = "",
        consumer: str = "",
        delivered_at: float | None = None,
    ) -> str:
        """Re-store a message a consumer failed on. Done by :meth:`SendBack.send_back`."""
        return await self.send_backs.send_back(
            group,
            physical_offset,
            message_id,
            delay_level=delay_level,
            max_reconsume_times=max_reconsume_times,
            outcome=outcome,
            error=error,
            consumer=consumer,
            delivered_at=delivered_at,
        )

    # -- pulls (pulling.py, PullPath) --

    async def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int = 32,
        expression: str = "*",
        max_wait: float = 0.0,
    ) -> PullOutcome:
        """A pull that long-polls up to ``max_wait`` for its queue when nothing is there yet (4.x
        push consumers). Done by :meth:`PullPath.pull`."""
        return await self.pulls.pull(
            group,
            topic,
            queue_id,
            offset,
            max_count=max_count,
            expression=expression,
            max_wait=max_wait,
        )

    def pull_now(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_count: int = 32,
        expression: str = "*",
    ) -> PullOutcome | None:
        """A pull answered without waiting, or None when it would wait for new messages. Done by
        :meth:`PullPath.pull_now`."""
        return self.pulls.pull_now(
            group, topic, queue_id, offset, max_count=max_count, expression=expression
        )

    def commit_offsets(self, group: str, entries: Sequence[tuple[str, int, int]]) -> None:
        """Commit a consumer's offsets after checking every entry (so one bad name cannot corrupt
        ``offsets.json``); an offset past the queue's end is cut to the end. Done by
        :meth:`PullPath.commit_offsets`."""
        return self.pulls.commit_offsets(group, entries)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or where a group without one starts (its consume-from). Done by
        :meth:`PullPath.query_offset`."""
        return self.pulls.query_offset(group, topic, queue_id)

    # -- pops (popping.py, PopPath) --

    @pops_while_master_away
    async def pop(
        self,
        group: str,
        topic: str,
        *,
        max_count: int = 32,
        invisible: float = 30.0,
        max_wait: float = 0.0,
        expression: str = "*",
        consumer: str = "",
        queue_hint: int = -1,
        max_bytes: int | None = None,
        attempt_id: str = "",
    ) -> list[Delivered]:
        """A pop that long-polls up to ``max_wait`` for something to deliver. Done by
        :meth:`PopPath.pop`."""
        return await self.pops.pop(
            group,
            topic,
            max_count=max_count,
            invisible=invisible,
            max_wait=max_wait,
            expression=expression,
            consumer=consumer,
            queue_hint=queue_hint,
            max_bytes=max_bytes,
            attempt_id=attempt_id,
        )

    @pops_while_master_away
    def pop_now(
        self,
        group: str,
        topic: str,
        *,
        max_count: int = 32,
        invisible: float = 30.0,
        expression: str = "*",
        consumer: str = "",
        queue_hint: int = -1,
        max_bytes: int | None = None,
    ) -> list[Delivered]:
        """A pop answered without waiting (possibly empty). Done by :meth:`PopPath.pop_now`."""
        return self.pops.pop_now(
            group,
            topic,
            max_count=max_count,
            invisible=invisible,
            expression=expression,
            consumer=consumer,
            queue_hint=queue_hint,
            max_bytes=max_bytes,
        )

    @pops_while_master_away
    def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        """Acknowledge a popped message. Done by :meth:`PopPath.ack`."""
        return self.pops.ack(group, topic, receipt_handle)

    @pops_while_master_away
    def change_invisible(
        self, group: str, topic: str, receipt_handle: str, invisible: float, *, error: str = ""
    ) -> str:
        """Hide the message again for ``invisible`` seconds; returns the new receipt handle. Done by
        :meth:`PopPath.change_invisible`."""
        return self.pops.change_invisible(group, topic, receipt_handle, invisible, error=error)

    # -- dead_letters (deadletters.py, DeadLetters) --

    @master_only("dead letter goes to its master")
    def dead_letter(self, group: str, message: StoredMessage, *, reason: str) -> PutResult:
        """Store a copy of ``message`` in ``%DLQ%<group>`` (write-only for consumers). Done by
        :meth:`DeadLetters.dead_letter`."""
        return self.dead_letters.dead_letter(group, message, reason=reason)

    @master_only("forward to dead letter goes to its master")
    def forward_to_dead_letter(
        self, group: str, topic: str, receipt_handle: str, *, reason: str = ""
    ) -> None:
        """Move a popped message to ``%DLQ%<group>`` now (a FIFO consumer gave up on it after its
        local retries); its receipt handle must still be valid. Done by
        :meth:`DeadLetters.forward_to_dead_letter`."""
        return self.dead_letters.forward_to_dead_letter(group, topic, receipt_handle, reason=reason)

    @master_only("redrive goes to its master")
    async def redrive(
        self, group: str, dlq_offsets: Sequence[int], *, target: str = "origin", operator: str = ""
    ) -> list[tuple[int, str, str, SendOutcome | None]]:
        """Re-send dead letters of ``group`` (by their offset in ``%DLQ%<group>``), each once
        (broker/redrive.py. Done by :meth:`DeadLetters.redrive`."""
        return await self.dead_letters.redrive(group, dlq_offsets, target=target, operator=operator)

    def redriven(self, group: str) -> set[int]:
        """The DLQ offsets of ``group`` already redriven, so an operator's listing and a second
        redrive can skip them. Done by :meth:`DeadLetters.redriven`."""
        return self.dead_letters.redriven(group)

    # -- catalog (catalog.py, Catalog) --

    @master_only("create topic goes to its master")
    def create_topic(
        self, name: str, *, queues: int | None = None, topic_type: str = "normal", perm: int = 6
    ) -> TopicConfig:
        """Create or update a topic; an unknown topic type is refused with the valid ones named.
        Done by :meth:`Catalog.create_topic`."""
        return self.catalog.create_topic(name, queues=queues, topic_type=topic_type, perm=perm)

    @master_only("update topic goes to its master")
    def update_topic(
        self,
        name: str,
        *,
        queues: int = 0,
        topic_type: str = "",
        perm: int = -1,
        force: bool = False,
        dry_run: bool = False,
    ) -> TopicChange:
        """Change a user topic's queue count, type or permission (0, "" and -1:
        unchanged). Done by
        :meth:`Catalog.update_topic`."""
        return self.catalog.update_topic(
            name, queues=queues, topic_type=topic_type, perm=perm, force=force, dry_run=dry_run
        )

    @master_only("delete topic goes to its master")
    def delete_topic(self, name: str) -> None:
        """Delete a user topic, all or nothing (docs/storage-format.md §1, "Tombstones"). Done by
        :meth:`Catalog.delete_topic`."""
        return self.catalog.delete_topic(name)

    @master_only("create group goes to its master")
    def create_group(self, group: GroupConfig) -> GroupConfig:
        """Create or update a group and its retry topic; a FIFO group without a policy of its own
        retries on the delay levels from level 1. Done by :meth:`Catalog.create_group`."""
        return self.catalog.create_group(group)

    @master_only("delete group goes to its master")
    def delete_group(self, name: str) -> None:
        """Delete a group with its committed offsets and pop state, so a group created later under
        the same name starts clean. Done by :meth:`Catalog.delete_group`."""
        return self.catalog.delete_group(name)

    def require_group(self, name: str) -> GroupConfig:
        """A consumer group's configuration (created on first use when auto-create is on). Done by
        :meth:`Catalog.require_group`."""
        return self.catalog.require_group(name)

    def report_outcomes(self, group: str, consumer: str, attempts: Sequence[Attempt]) -> None:
        """Push consumers report their successful attempts (failures come with send-back); they are
        recorded in the background, a slice at a time (:mod:`pocketmq.broker.history`). Done by
        :meth:`Catalog.report_outcomes`."""
        return self.catalog.report_outcomes(group, consumer, attempts)

    def message_history(self, message_id: str) -> list[Attempt]:
        """Every recorded delivery attempt of a message, oldest first (``pocketmq message
        history``). Done by :meth:`Catalog.message_history`."""
        return self.catalog.message_history(message_id)

    def browse(
        self, topic: str, queue_id: int, offset: int, max_count: int = 32
    ) -> list[Delivered]:
        """Read any topic (dead-letter topics and the internal ledgers included) without consuming.
        Done by :meth:`Catalog.browse`."""
        return self.catalog.browse(topic, queue_id, offset, max_count)

    def query_messages(
        self, *, message_id: str = "", topic: str = "", key: str = "", max_count: int = 32
    ) -> list[Delivered]:
        """Messages by id, or by topic and business key, through the store's index. Done by
        :meth:`Catalog.query_messages`."""
        return self.catalog.query_messages(
            message_id=message_id, topic=topic, key=key, max_count=max_count
        )

    def queue_status(self, topic: str, group: str = "") -> list[tuple[int, int, int, int]]:
        """``(queue id, min offset, max offset, committed or -1)`` for each queue. Done by
        :meth:`Catalog.queue_status`."""
        return self.catalog.queue_status(topic, group)

    def status(self) -> dict[str, object]:
        """The broker's counters and store figures as plain values, for ``pocketmq broker status``
        and the benchmarks. Done by :meth:`Catalog.status`."""
        return self.catalog.status()

    # -- membership (membership.py, Membership) --

    def heartbeat(
        self,
        client_id: str,
        consumers: Sequence[tuple[str, str, dict[str, str]]],
        notify: Notify | None = None,
        client: ClientInfo | None = None,
    ) -> None:
        """A client's consumer heartbeat. Done by :meth:`Membership.heartbeat`."""
        return self.membership.heartbeat(client_id, consumers, notify, client)

    def unregister(self, client_id: str, groups: list[str] | None = None) -> None:
        """A client leaving (its named groups, or all). Done by :meth:`Membership.unregister`."""
        return self.membership.unregister(client_id, groups)

    def lock_queues(
        self, group: str, client_id: str, queues: Sequence[tuple[str, int]]
    ) -> list[tuple[str, int]]:
        """Orderly consumers. Done by :meth:`Membership.lock_queues`."""
        return self.membership.lock_queues(group, client_id, queues)

    def unlock_queues(self, group: str, client_id: str, queues: Sequence[tuple[str, int]]) -> None:
        """An orderly consumer gives back queues it no longer owns after a rebalance. Done by
        :meth:`Membership.unlock_queues`."""
        return self.membership.unlock_queues(group, client_id, queues)

    def consumer_ids(self, group: str) -> list[str]:
        """The live members of a group, for the client's rebalance. Done by
        :meth:`Membership.consumer_ids`."""
        return self.membership.consumer_ids(group)

    def heartbeat_producer(
        self,
        client_id: str,
        groups: Sequence[str],
        check: CheckChannel,
        owner: object = None,
        *,
        user: str = "",
        may_check: MayCheck | None = None,
    ) -> None:
        """A producer of ``groups`` is live; ``check`` delivers transaction checks to it, of the
        topics ``may_check`` allows (broker/producers.py); ``user`` is who signed in. Done by
        :meth:`Membership.heartbeat_producer`."""
        return self.membership.heartbeat_producer(
            client_id, groups, check, owner, user=user, may_check=may_check
        )

    def unregister_producer(
        self,
        client_id: str,
        groups: Sequence[str] | None = None,
        *,
        owner: object = None,
        user: str | None = None,
    ) -> None:
        """A producer leaving or its connection closed. Done by
        :meth:`Membership.unregister_producer`."""
        return self.membership.unregister_producer(client_id, groups, owner=owner, user=user)

    # -- resets (resets.py, OffsetResets) --

    @master_only("reset offsets goes to its master")
    def reset_offsets(
        self, group: str, topic: str, target: ResetTarget, at_ms: int = 0
    ) -> list[QueueReset]:
        """Move ``group`` on ``topic`` to ``target`` (``at_ms``. Done by
        :meth:`OffsetResets.reset`."""
        return self.resets.reset(group, topic, target, at_ms)

    # -- transactions (transactions/service.py, TransactionService) --

    @master_only("end transactions on its master")
    async def end_transaction(
        self,
        producer_group: str,
        message_id: str,
        transaction_id: str,
        *,
        commit: bool,
        from_check: bool = False,
        topic: str = "",
        by: str = "",
    ) -> EndOutcome:
        """Commit or roll back a half message named by its producer group, topic, message id and
        transaction id (all must match: TransactionStateError otherwise). The first outcome is
        final: the same outcome again is answered as a duplicate, a different one raises
        TransactionStateError. ``by``: the authenticated user, recorded with the outcome."""
        if self._shared.closed:
            raise ServiceUnavailableError("the broker is shutting down")
        return await self.transactions.end(
            producer_group,
            message_id,
            transaction_id,
            commit=commit,
            from_check=from_check,
            topic=topic,
            by=by,
        )

    def transaction_state(self, message_id: str) -> TransactionStatus | None:
        """The broker's record of a message's transaction, or None (``QUERY_TRANSACTION``)."""
        return self.transactions.state(message_id)

    # -- what the servers read (no adapter reaches into the parts: tests/test_layering.py) --

    def list_topics(self) -> list[TopicConfig]:
        """Every topic, sorted by name (listings, registration with the name server)."""
        return self.topics.all()

    def topic(self, name: str) -> TopicConfig | None:
        """The topic called ``name``, or None."""
        return self.topics.get(name)

    def require_topic(self, name: str) -> TopicConfig:
        """The topic called ``name``; TopicNotFoundError when there is none."""
        return self.topics.require(name)

    def list_groups(self) -> list[GroupConfig]:
        """Every consumer group, sorted by name (listings)."""
        return self.groups.all()

    @property
    def write_position(self) -> int:
        """The end of the commit log: where the next record goes (a promotion's answer)."""
        return self.store.write_position

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """``(min offset, max offset)`` of one queue: what retention kept and where the next
        message goes."""
        store = self.store
        return store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)

    def store_statistics(self) -> StoreStatistics:
        """The store's figures and health (failure, refusing writes, positions, disk)."""
        return self.store.statistics()
