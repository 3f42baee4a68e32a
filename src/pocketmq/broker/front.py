"""The broker's front: every operation a protocol adapter asks for, as a method.

Each method is declared here in one line that names the concept method doing the work
(:func:`handed`, or :func:`delegate` under a role rule: its signature, types and docstring are
the concept's) and the role rule that applies (broker/roles.py), so "go to definition" from an
adapter lands on both (docs/design.md, "The broker's front"). :class:`pocketmq.broker.Broker`
builds the concepts and inherits these methods; what the servers read besides (topics, groups,
the store's figures) is in the query section at the end, so no adapter reaches into the
broker's parts.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from pocketmq.broker.catalog import Catalog
from pocketmq.broker.deadletters import DeadLetters
from pocketmq.broker.groups import GroupManager
from pocketmq.broker.membership import Membership
from pocketmq.broker.parts import Appender, Shared
from pocketmq.broker.popping import PopPath
from pocketmq.broker.pulling import PullPath
from pocketmq.broker.resets import OffsetResets
from pocketmq.broker.roles import RoleGate, master_only, pops_while_master_away
from pocketmq.broker.sendback import SendBack
from pocketmq.broker.sending import SendPath
from pocketmq.broker.topics import TopicConfig, TopicManager
from pocketmq.broker.transactions import TransactionService
from pocketmq.errors import ServiceUnavailableError
from pocketmq.model.groups import GroupConfig
from pocketmq.store import MessageStore, StoreStatistics

__all__ = ["BrokerFront", "delegate", "handed", "on_master"]

P = ParamSpec("P")
R = TypeVar("R")
Method = Callable[Concatenate[Any, P], R]


def delegate(part: str, function: Method[P, R]) -> Method[P, R]:
    """A method of the front that hands its call to ``function`` of the concept held in the
    front's attribute ``part``: the concept's signature, types and docstring, written once
    where the work is done (looked up per call, so a concept rebuilt at a promotion is used)."""
    name = function.__name__
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def forward_async(front: Any, /, *args: Any, **kwargs: Any) -> Any:
            return await getattr(getattr(front, part), name)(*args, **kwargs)

        return cast("Method[P, R]", forward_async)

    @functools.wraps(function)
    def forward(front: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        # no typing.cast: on Python 3.11 it is a Python function, a frame per call
        return getattr(getattr(front, part), name)(*args, **kwargs)  # type: ignore[no-any-return]

    return forward


def handed(part: str, function: Method[P, R]) -> Method[P, R]:
    """:func:`delegate` for an operation under no role rule, without a frame of its own: reading
    the attribute gives the concept's bound method itself (looked up per read, so a concept
    rebuilt at a promotion is used), by a C ``property`` over a C ``attrgetter``. A forwarding
    function costs ~2,300 instructions per call on 3.11 (its frame, ``*args``/``**kwargs``
    repacked, two ``getattr``); without it a lone send costs the broker 0.7 % less
    (docs/benchmarks.md, "A lone send, both sides (issue 32)"). The role guards wrap
    :func:`delegate`'s function instead."""
    read = operator.attrgetter(f"{part}.{function.__name__}")
    return cast("Method[P, R]", property(read, doc=function.__doc__))


def on_master(part: str, function: Method[P, R], action: str) -> Method[P, R]:
    """:func:`delegate`, for an operation only a master serves (``roles.master_only``): a slave
    or a fenced master refuses it with "``action`` goes to its master"."""
    return master_only(f"{action} goes to its master")(delegate(part, function))


def _while_open(function: Method[P, R]) -> Method[P, R]:
    """An async operation refused once the broker is shutting down."""

    @functools.wraps(function)
    async def checked(front: Any, /, *args: Any, **kwargs: Any) -> Any:
        if front._shared.closed:
            raise ServiceUnavailableError("the broker is shutting down")
        return await cast("Callable[..., Any]", function)(front, *args, **kwargs)

    return cast("Method[P, R]", checked)


class BrokerFront:
    """The operations of one broker, each handed to its concept under its role rule."""

    roles: RoleGate
    appender: Appender
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

    send = handed("sending", SendPath.send)
    send_now = handed("sending", SendPath.send_now)
    send_now_many = handed("sending", SendPath.send_now_many)
    settle = handed("sending", SendPath.settle)
    sends_wait = handed("sending", SendPath.sends_wait)
    recall = handed("sending", SendPath.recall)
    append_internal = handed("appender", Appender.append_internal)

    # -- send_backs (sendback.py, SendBack) --

    send_back = on_master("send_backs", SendBack.send_back, "send back")

    # -- pulls (pulling.py, PullPath) --

    pull = handed("pulls", PullPath.pull)
    pull_now = handed("pulls", PullPath.pull_now)
    commit_offsets = handed("pulls", PullPath.commit_offsets)
    query_offset = handed("pulls", PullPath.query_offset)

    # -- pops (popping.py, PopPath) --

    pop = pops_while_master_away(delegate("pops", PopPath.pop))
    pop_now = pops_while_master_away(delegate("pops", PopPath.pop_now))
    ack = pops_while_master_away(delegate("pops", PopPath.ack))
    change_invisible = pops_while_master_away(delegate("pops", PopPath.change_invisible))

    # -- dead_letters (deadletters.py, DeadLetters) --

    dead_letter = on_master("dead_letters", DeadLetters.dead_letter, "dead letter")
    forward_to_dead_letter = on_master(
        "dead_letters", DeadLetters.forward_to_dead_letter, "forward to dead letter"
    )
    redrive = on_master("dead_letters", DeadLetters.redrive, "redrive")
    redriven = handed("dead_letters", DeadLetters.redriven)

    # -- catalog (catalog.py, Catalog) --

    create_topic = on_master("catalog", Catalog.create_topic, "create topic")
    update_topic = on_master("catalog", Catalog.update_topic, "update topic")
    delete_topic = on_master("catalog", Catalog.delete_topic, "delete topic")
    create_group = on_master("catalog", Catalog.create_group, "create group")
    delete_group = on_master("catalog", Catalog.delete_group, "delete group")
    require_group = handed("catalog", Catalog.require_group)
    report_outcomes = handed("catalog", Catalog.report_outcomes)
    message_history = handed("catalog", Catalog.message_history)
    browse = handed("catalog", Catalog.browse)
    query_messages = handed("catalog", Catalog.query_messages)
    queue_status = handed("catalog", Catalog.queue_status)
    status = handed("catalog", Catalog.status)

    # -- membership (membership.py, Membership) --

    heartbeat = handed("membership", Membership.heartbeat)
    unregister = handed("membership", Membership.unregister)
    lock_queues = handed("membership", Membership.lock_queues)
    unlock_queues = handed("membership", Membership.unlock_queues)
    consumer_ids = handed("membership", Membership.consumer_ids)
    heartbeat_producer = handed("membership", Membership.heartbeat_producer)
    unregister_producer = handed("membership", Membership.unregister_producer)

    # -- resets (resets.py, OffsetResets) --

    reset_offsets = on_master("resets", OffsetResets.reset, "reset offsets")

    # -- transactions (transactions/service.py, TransactionService) --

    end_transaction = _while_open(
        master_only("end transactions on its master")(
            delegate("transactions", TransactionService.end)
        )
    )
    transaction_state = handed("transactions", TransactionService.state)

    # -- what the servers read (no adapter reaches into the parts: tests/test_front.py) --

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

    def message_id_at(self, physical_offset: int) -> str | None:
        """The id of the message stored at ``physical_offset`` in the commit log, or None
        when nothing readable is there (removed by retention, or not a record's start): how
        RocketMQ's remoting clients name a message (its offsetMsgId) for send-back and
        ``VIEW_MESSAGE_BY_ID`` (docs/remoting.md)."""
        record = self.store.read_message(physical_offset)
        return record.message_id if record is not None and record.message_id else None

    def on_long_poll_wake(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` after each wake-up of waiting pulls and pops, their wake-ups queued:
        the server that answers them queues the answers' write behind (broker/longpoll.py)."""
        self._shared.arrivals.on_wake = hook

    def store_statistics(self) -> StoreStatistics:
        """The store's figures and health (failure, refusing writes, positions, disk)."""
        return self.store.statistics()
