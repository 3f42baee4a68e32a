"""Transactions over remoting (docs/remoting.md, "Broker, producer side"; docs/transactions.md):
``END_TRANSACTION`` (37, one-way from the Java producer) and the broker's check-backs,
``CHECK_TRANSACTION_STATE`` (39) pushed on a producer's own connection.

A half message is a send whose ``sysFlag`` says "prepared" (``produce.py`` marks it
``TRAN_MSG``); its answer carries the broker's transaction id, which the producer sends back in
``END_TRANSACTION`` (with the ``UNIQ_KEY`` as ``msgId`` and its producer group). A 4.x producer
names no topic there: it is the half message's, found by its id. ``commitOrRollback`` 0
("unknown") changes nothing: the broker checks back later.

Check-backs go to a live producer of the half message's group: a client registers its producer
groups with its heartbeat (``HEART_BEAT``'s ``producerDataSet``; :func:`register_producers`,
which the heartbeat handler calls; ``conn.state["producer_groups"]`` and
``conn.state["producer_client_id"]`` record them), and they are dropped when the connection
closes (:func:`drop_producers`). The check carries the half message as a stored record of its
real topic, with ``PGROUP`` (the Java client picks the producer by it) and
``__transactionId__``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence

import msgspec

from pocketmq import properties as props
from pocketmq.broker.producers import CheckChannel
from pocketmq.broker.transactions.model import TransactionCheck
from pocketmq.errors import BrokerError, MessageIllegalError, MessageNotFoundError
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
from pocketmq.server.remoting.connection import RemotingConnection, RemotingHandlerTable
from pocketmq.server.remoting.context import BrokerSide
from pocketmq.server.remoting.outcomes import Reply
from pocketmq.server.remoting.records import stored_record

__all__ = [
    "drop_producers",
    "register_producers",
    "transaction_handlers",
    "transaction_topic",
]


def transaction_topic(side: BrokerSide, fields: Mapping[str, str]) -> str:
    """The topic an ``END_TRANSACTION`` is about: its ``topic`` field (5.x), or the half
    message's topic found by its ``msgId`` (4.x clients send none)."""
    topic = fields.get("topic", "")
    if topic:
        return topic
    status = side.broker.transaction_state(f.text(fields, "msgId"))
    if status is None:
        raise MessageNotFoundError(f"no transaction for message {fields.get('msgId')} here")
    return status.topic


def _check_channel(side: BrokerSide, conn: RemotingConnection) -> CheckChannel:
    def deliver(check: TransactionCheck) -> bool:
        if conn.closed:
            return False
        message = check.message
        store_host = side.store_host(conn.local_address or "127.0.0.1:0")
        record = stored_record(message, store_host, TRANSACTION_PREPARED)
        record.properties[props.PRODUCER_GROUP] = check.producer_group
        record.properties[TRANSACTION_ID] = check.transaction_id
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
        except BrokerError:  # closed meanwhile, or a record that cannot be encoded
            return False
        return True

    return deliver


def register_producers(
    side: BrokerSide, conn: RemotingConnection, client_id: str, groups: Sequence[str]
) -> None:
    """A heartbeat's producer groups (``HEART_BEAT``'s ``producerDataSet``): the client on
    ``conn`` is a live producer of each, and receives their check-backs (module doc). Call it
    before the handler's first ``await`` (it reads ``conn.user``)."""
    groups = [group for group in groups if group]
    if not groups:
        return
    authorizer = side.authorizer
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
    conn.state["producer_client_id"] = client_id
    conn.state.setdefault("producer_groups", set()).update(groups)


def drop_producers(side: BrokerSide, conn: RemotingConnection) -> None:
    """The connection closed: its producers receive no more check-backs."""
    client_id = conn.state.get("producer_client_id")
    if client_id:
        side.broker.unregister_producer(client_id, owner=conn)


class _ProducerData(msgspec.Struct):
    groupName: str = ""


class _Heartbeat(msgspec.Struct):
    clientID: str = ""
    producerDataSet: list[_ProducerData] = []


def transaction_handlers(side: BrokerSide) -> RemotingHandlerTable:
    """``END_TRANSACTION``, and a ``HEART_BEAT`` that registers producers only (the consumer
    side's heartbeat replaces it and calls :func:`register_producers` itself)."""
    broker = side.broker

    def end(conn: RemotingConnection, request: RemotingCommand) -> Awaitable[Reply | None] | None:
        fields = request.ext_fields
        kind = f.integer(fields, "commitOrRollback")
        if kind == TRANSACTION_NOT_TYPE:
            return None  # unknown yet: the broker checks back (module doc)
        if kind not in (TRANSACTION_COMMIT, TRANSACTION_ROLLBACK):
            raise MessageIllegalError(f"commitOrRollback {kind} is neither commit nor rollback")
        ending = broker.end_transaction(
            f.text(fields, "producerGroup"),
            f.text(fields, "msgId"),
            f.text(fields, "transactionId"),
            commit=kind == TRANSACTION_COMMIT,
            from_check=f.boolean(fields, "fromTransactionCheck"),
            topic=transaction_topic(side, fields),
            by=conn.user,
        )

        async def ended() -> None:
            await ending

        return ended()

    def heartbeat(conn: RemotingConnection, request: RemotingCommand) -> None:
        try:
            data = msgspec.json.decode(request.body, type=_Heartbeat)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise MessageIllegalError(f"malformed heartbeat: {exc}") from None
        groups = [p.groupName for p in data.producerDataSet]
        register_producers(side, conn, data.clientID or conn.remote, groups)

    return {
        RequestCode.END_TRANSACTION: end,
        RequestCode.HEART_BEAT: heartbeat,
    }
