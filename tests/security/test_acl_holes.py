"""Issue 28, findings 3, 5, 7 and 9 (non-web), tried as an attacker would: a broker started with
``--authentication --authorization``, a victim app (``orders-app``: Pub and Sub on
``Topic:orders*``, Sub on ``Group:billing``) and an attacker (``mallory``: a normal user with
only Pub on its own topic) who knows the victim's group names, client ids and message ids — all
of which travel in the clear in ordinary traffic — and speaks the real protocols (the native
protocol through the SDK's connection class, gRPC through raw v2 stubs signed with its own
keys). The attacker gains nothing, and the victim's own clients keep working.

docs/security.md, "Transactions", "Clients and their registrations" and "Authentication".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import Code as V2Code
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc

from pocketmq.client import (
    Admin,
    ClientConfig,
    ConsumeStatus,
    Message,
    MessageView,
    Producer,
    ProducerConfig,
    PushConsumer,
    SimpleConsumer,
    TransactionProducer,
    TransactionResolution,
)
from pocketmq.client.connection import ClientConnection, close_quietly
from pocketmq.errors import NoPermissionError, PocketMQError, TransactionStateError
from pocketmq.protocol import RequestCode
from pocketmq.protocol import structs as w
from pocketmq.server.auth.acl import AclStore, make_rule
from pocketmq.server.auth.users import UserStore
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER, unique
from ..scratch import grpc_worker_args, scratch_broker
from .acl_clients import Pushes, Telemetry, checks, native, producer_settings, signed

pytestmark = pytest.mark.integration

UNKNOWN = TransactionResolution.UNKNOWN
COMMIT = TransactionResolution.COMMIT
SECRET_BODY = b"card 4111 1111 1111 1111"
BROKER_CONFIG: dict[str, dict[str, Any]] = {
    "broker": {
        **FAST_BROKER["broker"],
        "transaction_timeout": 0.3,
        "transaction_check_interval": 0.3,
        "transaction_check_max": 100,  # nothing is discarded while the attacker tries
    },
    "store": dict(FAST_BROKER["store"]),
}
USERS = {  # access key: (secret, type, rules as (resource, actions))
    "root": ("root-secret", "super", []),
    "orders-app": ("orders-secret", "normal",
                   [("Topic:orders*", "Pub,Sub"), ("Group:billing", "Sub")]),
    "partner": ("partner-secret", "normal", [("Topic:orders-1", "Pub")]),
    "mallory": ("mallory-secret", "normal", [("Topic:mallory", "Pub")]),
    "dlq-operator": ("operator-secret", "normal", [("Group:billing", "Update")]),
}  # fmt: skip
QUIET = 2.0  # several check intervals: on today's main a check reaches the attacker within 0.6 s


def _config(user: str) -> ClientConfig:
    return ClientConfig(
        access_key=user, secret_key=USERS[user][0], heartbeat_interval=1.0, request_timeout=3.0
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    extra = ("--authentication", "--authorization", *grpc_worker_args())
    with scratch_broker(
        tmp_path_factory, "acl-holes", config=BROKER_CONFIG, extra_args=extra
    ) as process:
        config = _config_dir(process)
        users, acl = UserStore(config), AclStore(config)
        for name, (secret, kind, rules) in USERS.items():
            users.create(name, secret, kind)
            for resource, actions in rules:
                acl.grant(make_rule(name, resource, actions.split(","), allow=True))
        time.sleep(1.2)  # the broker reads users and rules again at most once a second
        asyncio.run(_create_resources(process.address))
        yield process


def _config_dir(broker: BrokerProcess) -> Path:
    return broker.data_dir / "data" / "config"


async def _create_resources(address: str) -> None:
    async with Admin(servers=address, client=_config("root")) as admin:
        for topic in ("orders-1", "orders-grpc", "orders-grpc2", "orders-q", "mallory"):
            await admin.create_topic(topic, queues=2)
        await admin.create_topic("orders-grpc3", queues=2, topic_type="transaction")
        await admin.create_group("billing")


async def _native(
    broker: BrokerProcess, user: str, client_id: str
) -> tuple[ClientConnection, Pushes]:
    """A raw native connection signed in as ``user``, collecting what the broker pushes."""
    return await native(broker.address, (user, USERS[user][0]), client_id)


def _metadata(user: str, client_id: str, secret: str = "") -> tuple[tuple[str, str], ...]:
    return signed(user, secret or USERS[user][0], client_id)


async def _half_message_left_open(broker: BrokerProcess, group: str, topic: str) -> Any:
    """The victim sends a half message whose local transaction answers UNKNOWN, then its
    producer goes away (a deploy): the broker will check the transaction back with any live
    producer of ``group``."""
    async with TransactionProducer(
        lambda message: UNKNOWN,
        topics=(topic,),
        servers=broker.address,
        config=ProducerConfig(group=group),
        client=_config("orders-app"),
    ) as producer:
        result = await producer.send_in_transaction(
            Message(topic=topic, body=SECRET_BODY), lambda sent: UNKNOWN
        )
    return result.send_result


async def _state(broker: BrokerProcess, message_id: str) -> Any:
    async with Admin(servers=broker.address, client=_config("root")) as admin:
        return await admin.transaction_state(message_id)


async def _victim_sibling_commits(broker: BrokerProcess, group: str, topic: str, half: Any) -> None:
    """The victim's own producer comes back, answers the check and commits: real clients keep
    working, and the outcome names the user that ended it."""
    answered: list[str] = []

    def checker(message: MessageView) -> TransactionResolution:
        answered.append(message.message_id)
        return COMMIT

    async with TransactionProducer(
        checker,
        topics=(topic,),
        servers=broker.address,
        config=ProducerConfig(group=group),
        client=_config("orders-app"),
    ):
        deadline = time.monotonic() + 10
        while (await _state(broker, half.message_id)).state != "COMMITTED":
            assert time.monotonic() < deadline, "the victim's own producer was never asked"
            await asyncio.sleep(0.1)
    assert half.message_id in answered
    info = await _state(broker, half.message_id)
    assert (info.source, info.detail) == ("check", "ended by user 'orders-app'")


# -- finding 3: transactions across the ACL, native ------------------------------------------


async def test_a_stranger_registered_in_another_apps_producer_group_gets_no_check_back(
    broker: BrokerProcess,
) -> None:
    group = unique("orders-tx")
    half = await _half_message_left_open(broker, group, "orders-1")
    client_id = unique("mallory")
    connection, pushes = await _native(broker, "mallory", client_id)
    try:
        # an older client's heartbeat (no topics declared) is still accepted ...
        request = w.HeartbeatRequest(client_id, [group], [])
        await connection.request(RequestCode.HEARTBEAT, request, w.Empty, 3.0)
        await asyncio.sleep(QUIET)
        # ... but the broker never shows it a half message of a topic it may not publish to
        leaked = [c.message.body for c in checks(pushes)]
        assert leaked == [], "the attacker received the victim's half message"
        # declaring the victim's topic is refused outright
        declared = w.HeartbeatRequest(client_id, [group], [], producer_topics=["orders-1"])
        with pytest.raises(NoPermissionError, match="Pub"):
            await connection.request(RequestCode.HEARTBEAT, declared, w.Empty, 3.0)
    finally:
        await close_quietly(connection)
    assert (await _state(broker, half.message_id)).state == "PREPARED"
    await _victim_sibling_commits(broker, group, "orders-1", half)


async def test_a_message_id_alone_ends_no_transaction(broker: BrokerProcess) -> None:
    group = unique("orders-tx")
    half = await _half_message_left_open(broker, group, "orders-1")
    forged = [  # what the attacker may know: the message id, perhaps the group and the topic
        w.EndTransactionRequest("", half.message_id, "", True),
        w.EndTransactionRequest(group, half.message_id, "", True, topic="orders-1"),
    ]
    connection, _ = await _native(broker, "mallory", unique("mallory"))
    try:
        for request in forged:
            with pytest.raises(NoPermissionError):  # no Pub on the half message's topic
                await connection.request(
                    RequestCode.END_TRANSACTION, request, w.EndTransactionResponse, 3.0
                )
    finally:
        await close_quietly(connection)
    # a user who may publish to the topic still needs the transaction id (and the group)
    connection, _ = await _native(broker, "partner", unique("partner"))
    try:
        for request in (
            forged[1],
            w.EndTransactionRequest(
                "", half.message_id, half.transaction_id, True, topic="orders-1"
            ),
        ):
            with pytest.raises(TransactionStateError, match=r"does not match|names no"):
                await connection.request(
                    RequestCode.END_TRANSACTION, request, w.EndTransactionResponse, 3.0
                )
    finally:
        await close_quietly(connection)
    assert (await _state(broker, half.message_id)).state == "PREPARED"
    await _victim_sibling_commits(broker, group, "orders-1", half)


# -- finding 3: transactions across the ACL, gRPC --------------------------------------------


async def test_grpc_telemetry_settings_need_pub_on_every_publishing_topic(
    broker: BrokerProcess,
) -> None:
    """An official producer has no producer group: the topic is its group. Naming the victim's
    topic in Settings no longer registers the attacker for its check-backs."""
    half = await _half_message_left_open(broker, "orders-grpc", "orders-grpc")
    metadata = _metadata("mallory", unique("mallory-grpc"))
    stream = await asyncio.to_thread(
        Telemetry, broker.grpc, metadata, producer_settings("mallory", "orders-grpc")
    )
    try:
        await asyncio.sleep(QUIET)
        leaked = [c.message.body for c in stream.checks()]
        assert leaked == [], "the attacker received the victim's half message"
        assert await asyncio.to_thread(stream.settings_status) == V2Code.FORBIDDEN
    finally:
        await asyncio.to_thread(stream.close)
    assert (await _state(broker, half.message_id)).state == "PREPARED"
    await _victim_sibling_commits(broker, "orders-grpc", "orders-grpc", half)


def _official_transaction_checked_back(endpoint: str, topic: str) -> tuple[list[str], str]:
    """The official Python client as the victim: a transaction it never ends, answered COMMIT
    by its checker. (message ids its checker was asked about, the message's id)."""
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        TransactionChecker,
    )
    from rocketmq import Producer as OfficialProducer
    from rocketmq import (
        TransactionResolution as Resolution,
    )
    from rocketmq.v5.client.connection import RpcClient

    from ..grpc.conftest import message, wait_until

    asked: list[str] = []

    class Checker(TransactionChecker):  # type: ignore[misc]
        def check(self, message: Any) -> Any:
            asked.append(message.message_id)
            return Resolution.COMMIT

    asyncio.set_event_loop(RpcClient.get_channel_io_loop())  # as tests/grpc/conftest.py does
    configuration = ClientConfiguration(endpoint, Credentials("orders-app", "orders-secret"))
    producer = OfficialProducer(configuration, (topic,), Checker())
    try:
        producer.startup()
        receipt = producer.send(message(topic, SECRET_BODY), producer.begin_transaction())
        wait_until(lambda: bool(asked), timeout=15)
    finally:
        producer.shutdown()
        asyncio.set_event_loop(None)
    return asked, receipt.message_id


async def test_the_official_producer_still_gets_its_own_check_backs(broker: BrokerProcess) -> None:
    """The victim's real client under ``--authorization``: its Settings name a topic it may
    publish to, so the check of its unfinished transaction reaches it and it commits."""
    asked, message_id = await asyncio.to_thread(
        _official_transaction_checked_back, broker.grpc, "orders-grpc3"
    )
    assert asked[0] == message_id
    deadline = time.monotonic() + 10
    while (info := await _state(broker, message_id)).state != "COMMITTED":
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert (info.producer_group, info.detail) == ("orders-grpc3", "ended by user 'orders-app'")


# -- finding 5: sessions and identities ------------------------------------------------------


async def test_a_second_user_cannot_take_over_a_producers_telemetry_session(
    broker: BrokerProcess,
) -> None:
    """The attacker opens a Telemetry stream under the victim producer's client id (it travels
    in every call's headers), with settings it is allowed: the victim's stream stays open and
    keeps receiving its own check-backs; the attacker's receives none of them."""
    client_id = unique("victim-producer")
    victim = await asyncio.to_thread(
        Telemetry,
        broker.grpc,
        _metadata("orders-app", client_id),
        producer_settings("orders-grpc2"),
    )
    attacker = None
    try:
        assert await asyncio.to_thread(victim.settings_status) == V2Code.OK
        attacker = await asyncio.to_thread(
            Telemetry, broker.grpc, _metadata("mallory", client_id), producer_settings("mallory")
        )
        assert await asyncio.to_thread(attacker.settings_status) == V2Code.OK
        half = await _half_message_left_open(broker, "orders-grpc2", "orders-grpc2")
        deadline = time.monotonic() + 10
        while not victim.checks():
            assert not victim.ended.is_set(), f"the victim's stream ended: {victim.ended_with}"
            assert time.monotonic() < deadline, "the victim's producer never got its check"
            await asyncio.sleep(0.05)
        assert victim.checks()[0].message.body == SECRET_BODY
        assert attacker.checks() == []
        assert not victim.ended.is_set()
    finally:
        for stream in (victim, attacker):
            if stream is not None:
                await asyncio.to_thread(stream.close)
    await _victim_sibling_commits(broker, "orders-grpc2", "orders-grpc2", half)


async def _members(broker: BrokerProcess, group: str) -> list[str]:
    async with Admin(servers=broker.address, client=_config("root")) as admin:
        return await admin.consumers(group)


class VictimConsumer:
    """The victim's push consumer of ``billing``, and proof that it still consumes."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.received: list[bytes] = []
        self.consumer = PushConsumer(
            "billing", "orders-1", self._listen, servers=broker.address,
            client=_config("orders-app"),
        )  # fmt: skip

    async def _listen(self, messages: list[MessageView]) -> ConsumeStatus:
        self.received.extend(m.body for m in messages)
        return ConsumeStatus.SUCCESS

    async def __aenter__(self) -> str:
        await self.consumer.start()
        client_id = self.consumer.pool.client_id
        assert client_id in await _members(self.broker, "billing")
        return client_id

    async def __aexit__(self, *exc_info: object) -> None:
        await self.consumer.aclose()

    async def still_member_and_consuming(self) -> None:
        assert self.consumer.pool.client_id in await _members(self.broker, "billing")
        body = unique("still consumed").encode()
        async with Producer(servers=self.broker.address, client=_config("orders-app")) as p:
            await p.send(Message(topic="orders-1", body=body))
        deadline = time.monotonic() + 10
        while body not in self.received:
            assert time.monotonic() < deadline, "the victim's consumer stopped consuming"
            await asyncio.sleep(0.05)


async def test_nobody_unregisters_another_apps_consumer_natively(broker: BrokerProcess) -> None:
    """UNREGISTER_CLIENT naming the victim's consumer: a client id that is not the caller's
    own removes nothing, and Sub on the group decides even under the victim's own client id."""
    victim = VictimConsumer(broker)
    async with victim as victim_id:
        connection, _ = await _native(broker, "mallory", unique("mallory"))
        try:
            for request in (
                w.UnregisterRequest(victim_id, ["billing"]),
                w.UnregisterRequest(victim_id, []),
            ):
                with pytest.raises(NoPermissionError):
                    await connection.request(RequestCode.UNREGISTER_CLIENT, request, w.Empty, 3.0)
        finally:
            await close_quietly(connection)
        connection, _ = await _native(broker, "mallory", victim_id)
        try:
            with pytest.raises(NoPermissionError, match="billing"):
                await connection.request(
                    RequestCode.UNREGISTER_CLIENT,
                    w.UnregisterRequest(victim_id, ["billing"]),
                    w.Empty,
                    3.0,
                )
            await connection.request(  # nothing of its own to leave: a no-op
                RequestCode.UNREGISTER_CLIENT, w.UnregisterRequest(victim_id, []), w.Empty, 3.0
            )
        finally:
            await close_quietly(connection)
        await victim.still_member_and_consuming()


async def test_nobody_ends_another_apps_consumer_over_grpc(broker: BrokerProcess) -> None:
    """NotifyClientTermination under the victim's client id: PERMISSION_DENIED with the
    victim's group (no Sub on it), and without a group it ends only the caller's own session
    (it has none) — the victim stays a member of its group."""
    victim = VictimConsumer(broker)
    async with victim as victim_id:
        answers = await asyncio.to_thread(_grpc_terminations, broker.grpc, victim_id)
        assert answers == ["PERMISSION_DENIED", "OK"]
        await victim.still_member_and_consuming()


def _grpc_terminations(endpoint: str, victim_id: str) -> list[str]:
    """NotifyClientTermination as mallory under the victim's client id: with the victim's
    group, then with none; what each call ended with."""
    answers: list[str] = []
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for request in (
            s.NotifyClientTerminationRequest(group=d.Resource(name="billing")),
            s.NotifyClientTerminationRequest(),
        ):
            try:
                reply = stub.NotifyClientTermination(
                    request, metadata=_metadata("mallory", victim_id), timeout=5
                )
                answers.append(V2Code.Name(reply.status.code))
            except grpc.RpcError as exc:
                answers.append(exc.code().name)
    return answers


# -- finding 7: deleted users and rotated secrets ------------------------------------------


@pytest.mark.parametrize("change", ["delete", "rotate"])
async def test_an_open_native_connection_stops_when_its_user_goes(
    broker: BrokerProcess, change: str
) -> None:
    name = unique("temp")
    users, acl = UserStore(_config_dir(broker)), AclStore(_config_dir(broker))
    users.create(name, "temp-secret")
    acl.grant(make_rule(name, "Topic:orders-q", ["Pub"], allow=True))
    await asyncio.sleep(1.2)
    config = ClientConfig(access_key=name, secret_key="temp-secret", request_timeout=3.0)
    async with Admin(servers=broker.address, client=_config("root")) as admin:
        before = sum(q.max_offset for q in await admin.queue_status("orders-q"))
    async with Producer(servers=broker.address, client=config) as producer:
        await producer.send(Message(topic="orders-q", body=b"while allowed"))
        if change == "delete":
            users.delete(name)
        else:
            users.update(name, secret="rotated-secret")
        await asyncio.sleep(1.5)  # the broker notices within a second
        with pytest.raises(NoPermissionError, match="deleted or its secret changed"):
            await producer.send(Message(topic="orders-q", body=b"after the change"))
        with pytest.raises(PocketMQError):  # signing in again is refused too
            await producer.send(Message(topic="orders-q", body=b"and after"))
    async with Admin(servers=broker.address, client=_config("root")) as admin:
        after = sum(q.max_offset for q in await admin.queue_status("orders-q"))
    assert after == before + 1


async def test_a_telemetry_stream_ends_when_its_user_is_deleted(broker: BrokerProcess) -> None:
    name = unique("temp-grpc")
    users, acl = UserStore(_config_dir(broker)), AclStore(_config_dir(broker))
    users.create(name, "temp-secret")
    acl.grant(make_rule(name, "Topic:orders-q", ["Pub"], allow=True))
    await asyncio.sleep(1.2)
    metadata = _metadata(name, unique("temp-client"), secret="temp-secret")
    stream = await asyncio.to_thread(
        Telemetry, broker.grpc, metadata, producer_settings("orders-q")
    )
    try:
        assert await asyncio.to_thread(stream.settings_status) == V2Code.OK
        await asyncio.sleep(0.5)
        assert not stream.ended.is_set()
        users.delete(name)
        ended = await asyncio.to_thread(stream.ended.wait, 5.0)
        assert ended, "the stream of a deleted user stayed open"
        assert stream.ended_with == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await asyncio.to_thread(stream.close)


# -- finding 9: QueryOffset and audit fields ---------------------------------------------------


def _query_offsets(endpoint: str, user: str, topic: str) -> list[tuple[str, int, int]]:
    """QueryOffset (the end of queues 0 and 1) as ``user``: (gRPC code, v2 status, offset)."""
    answers: list[tuple[str, int, int]] = []
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for queue_id in (0, 1):
            request = s.QueryOffsetRequest(
                message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=queue_id),
                query_offset_policy=d.QueryOffsetPolicy.END,
            )
            metadata = _metadata(user, unique("q"))
            try:
                reply = stub.QueryOffset(request, metadata=metadata, timeout=5)
            except grpc.RpcError as exc:
                answers.append((exc.code().name, -1, -1))
                continue
            answers.append(("OK", int(reply.status.code), int(reply.offset)))
    return answers


async def test_grpc_query_offset_works_for_a_user_with_sub_on_the_topic(
    broker: BrokerProcess,
) -> None:
    """It failed with UNKNOWN for every user under ``--authorization`` (its request names no
    group, and the ACL table read one)."""
    async with Producer(servers=broker.address, client=_config("orders-app")) as producer:
        await producer.send(Message(topic="orders-q", body=b"x"))
    async with Admin(servers=broker.address, client=_config("root")) as admin:
        ends = [q.max_offset for q in await admin.queue_status("orders-q")]
    answers = await asyncio.to_thread(_query_offsets, broker.grpc, "orders-app", "orders-q")
    assert answers == [("OK", V2Code.OK, end) for end in ends]
    answers = await asyncio.to_thread(_query_offsets, broker.grpc, "mallory", "orders-q")
    assert [code for code, _, _ in answers] == ["PERMISSION_DENIED"] * 2


async def test_the_redrive_audit_names_the_signed_in_user_not_the_one_claimed(
    broker: BrokerProcess,
) -> None:
    async with Producer(servers=broker.address, client=_config("root")) as producer:
        sent = await producer.send(Message(topic="orders-1", body=b"dead"))
    async with SimpleConsumer("billing", "orders-1", servers=broker.address,
                              client=_config("root"), await_duration=0.5) as consumer:  # fmt: skip
        mine: list[MessageView] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not mine:
            for message in await consumer.receive(16, invisible_duration=30):
                if message.message_id == sent.message_id:
                    mine.append(message)
                else:
                    await consumer.ack(message)
        [letter] = mine
    connection, _ = await _native(broker, "root", unique("root"))
    try:
        request = w.ForwardToDeadLetterRequest("billing", "orders-1", letter.receipt_handle or "")
        await connection.request(RequestCode.FORWARD_TO_DEAD_LETTER, request, w.Empty, 3.0)
    finally:
        await close_quietly(connection)
    async with Admin(servers=broker.address, client=_config("root")) as admin:
        [dead] = [
            x
            for x in await admin.dead_letters("billing")
            if x.message.message_id == sent.message_id
        ]
    connection, _ = await _native(broker, "dlq-operator", unique("ops"))
    try:
        claimed = w.RedriveRequest("billing", [dead.dlq_offset], "retry", "root")
        reply = await connection.request(RequestCode.REDRIVE, claimed, w.RedriveResponse, 5.0)
        assert [i.status for i in reply.items] == ["resent"]
    finally:
        await close_quietly(connection)
    async with Admin(servers=broker.address, client=_config("root")) as admin:
        history = await admin.message_history(sent.message_id)
    assert [a.consumer for a in history if a.outcome == "REDRIVEN"] == ["dlq-operator"]
