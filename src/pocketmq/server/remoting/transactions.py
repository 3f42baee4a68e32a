"""Transactions over remoting (docs/remoting.md, "Broker, producer side"; docs/transactions.md):
``END_TRANSACTION`` (37, one-way from the Java producer) and the broker's check-backs,
``CHECK_TRANSACTION_STATE`` (39) pushed on a producer's own connection.

A half message is a send whose ``sysFlag`` says "prepared" (``produce.py`` marks it
``TRAN_MSG``); its answer carries the broker's transaction id, which the producer sends back in
``END_TRANSACTION`` (with the ``UNIQ_KEY`` as ``msgId`` and its producer group). A 4.x producer
names no topic there: it is the half message's, found by its id. ``commitOrRollback`` 0
("unknown") changes nothing: the broker checks back later.

Check-backs go to a live producer of the half message's group: a client registers its producer
groups with its heartbeat (``HEART_BEAT``'s ``producerDataSet``, served by ``clients.py``, which
records them in ``conn.state["producer_groups"]`` and calls :func:`producer_hook`'s function),
and they are dropped when the connection closes (``clients.drop_registrations``). The check
carries the half message as a stored record of its
real topic, with ``PGROUP`` (the Java client picks the producer by it) and
``__transactionId__``.
"""

from __future__ import annotations

from collections.abc import Awaitable

from pocketmq import properties as props
from pocketmq.broker.producers import CheckChannel
from pocketmq.errors import (
    BrokerError,
    MessageIllegalError,
    MessageNotFoundError,
    ProtocolError,
)
from pocketmq.model import TransactionCheck
from pocketmq.protocol.remoting.codes import RequestCode
from pocketmq.protocol.remoting.command import RemotingCommand
from pocketmq.protocol.remoting.msgid import encode_offset_msg_id
from pocketmq.protocol.remoting.properties import TRANSACTION_ID
from pocketmq.protocol.remoting.stored import encode_stored
from pocketmq.protocol.remoting.sysflag import (
    TRANSACTION_COMMIT,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLBACK,
)
from pocketmq.server.auth.acl import Action
from pocketmq.server.auth.authorizer import topic_need
from pocketmq.server.remoting import fields as f
from pocketmq.server.remoting.clients import ProducerHook
from pocketmq.server.remoting.connection import RemotingConnection, RemotingHandlerTable
from pocketmq.server.remoting.context import BrokerSide
from pocketmq.server.remoting.outcomes import Reply
from pocketmq.server.remoting.records import stored_record

__all__ = ["producer_hook", "transaction_handlers", "transaction_topic"]


def transaction_topic(side: BrokerSide, request: RemotingCommand) -> str:
    """The topic an ``END_TRANSACTION`` is about: its ``topic`` field (5.x), or the half
    message's topic found by its ``msgId`` (4.x clients send none)."""
    topic = request.ext_fields.get("topic", "")
    if topic:
        return topic
    message_id = f.text(request, "msgId")
    status = side.broker.transaction_state(message_id)
    if status is None:
        raise MessageNotFoundError(f"no transaction for message {message_id} here")
    return status.topic


def _check_channel(side: BrokerSide, conn: RemotingConnection) -> CheckChannel:
    def deliver(check: TransactionCheck) -> bool:
        if conn.closed:
            return False
        message = check.message
        store_host = side.store_host(conn.local_address or "127.0.0.1:0")
        record = stored_record(message, store_host)
        record.sys_flag = TRANSACTION_PREPARED
        record.properties = {
            **record.properties,
            props.PRODUCER_GROUP: check.producer_group,
            TRANSACTION_ID: check.transaction_id,
        }
        fields = {
            "tranStateTableOffset": "0",
            "commitLogOffset": str(message.physical_offset),
            "msgId": message.properties.get(props.MESSAGE_ID, ""),
            "transactionId": check.transaction_id,
            "offsetMsgId": encode_offset_msg_id(store_host, message.physical_offset),
            "topic": message.topic,
        }
        try:
            conn.push(RequestCode.CHECK_TRANSACTION_STATE, fields, encode_stored([record]))
        except (BrokerError, ProtocolError):  # closed meanwhile, or a record not encodable
            return False
        return True

    return deliver


def producer_hook(side: BrokerSide) -> ProducerHook:
    """What the heartbeat handler (``clients.py``) tells of each heartbeat's producer groups:
    the client on that connection becomes a live producer of each, and receives their
    check-backs (module doc). It runs before the heartbeat's first ``await`` (it reads
    ``conn.user``); the connection's close unregisters it (``clients.drop_registrations``)."""
    authorizer = side.authorizer

    def register(conn: RemotingConnection, client_id: str, groups: list[str]) -> None:
        groups = [group for group in groups if group]
        if not groups:
            return
        user = conn.user
        may_check = None
        if authorizer is not None and user:

            def may_check(topic: str) -> bool:
                need = [topic_need(topic, Action.PUB)]
                return not conn.closed and authorizer.allows(user, need, conn.remote)

        side.broker.heartbeat_producer(
            client_id,
            groups,
            _check_channel(side, conn),
            owner=conn,
            user=user,
            may_check=may_check,
        )

    return register


def transaction_handlers(side: BrokerSide) -> RemotingHandlerTable:
    """``END_TRANSACTION`` (module doc)."""
    broker = side.broker

    def end(conn: RemotingConnection, request: RemotingCommand) -> Awaitable[Reply | None] | None:
        kind = f.number(request, "commitOrRollback")
        if kind == TRANSACTION_NOT_TYPE:
            return None  # unknown yet: the broker checks back (module doc)
        if kind not in (TRANSACTION_COMMIT, TRANSACTION_ROLLBACK):
            raise MessageIllegalError(f"commitOrRollback {kind} is neither commit nor rollback")
        ending = broker.end_transaction(
            f.text(request, "producerGroup"),
            f.text(request, "msgId"),
            f.text(request, "transactionId"),
            commit=kind == TRANSACTION_COMMIT,
            from_check=f.flag(request, "fromTransactionCheck"),
            topic=transaction_topic(side, request),
            by=conn.user,
        )

        async def ended() -> None:
            await ending

        return ended()

    return {
        RequestCode.END_TRANSACTION: end,
    }
