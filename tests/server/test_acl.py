"""Authorization (docs/security.md, "Authorization"): the rule evaluator table-driven, then a real
broker with ``--authentication --authorization`` refusing what the rules do not allow through
the native SDK, the CLI and the official Python client — and storing nothing it refused."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pocketmq.client import Admin, ClientConfig, Message, Producer, SimpleConsumer
from pocketmq.errors import InvalidArgumentError, NoPermissionError
from pocketmq.server.auth.acl import AclStore, Action, decide, make_rule, resource_of_topic
from pocketmq.server.auth.authorizer import Authorizer
from pocketmq.server.auth.users import UserStore
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import grpc_worker_args, scratch_broker

A = Action


def _rule(resource: str, actions: str, allow: bool = True, *sources: str, user: str = "u") -> Any:
    return make_rule(user, resource, actions.split(","), allow=allow, sources=sources)


def _req(name: str, action: Action, source: str = "", kind: str = "Topic") -> Any:
    return (kind, name, action, source)


PUB_ORDERS = _req("orders", A.PUB)
CASES: list[tuple[str, list[Any], tuple[str, str, Action, str], bool]] = [
    ("no rule denies", [], PUB_ORDERS, False),
    ("an exact allow", [_rule("Topic:orders", "Pub")], PUB_ORDERS, True),
    ("another action is not granted", [_rule("Topic:orders", "Pub")], _req("orders", A.SUB), False),
    ("All covers every action", [_rule("Topic:orders", "All")], _req("orders", A.DELETE), True),
    ("a prefix matches", [_rule("Topic:ord*", "Pub")], PUB_ORDERS, True),
    ("a prefix does not match others", [_rule("Topic:ord*", "Pub")], _req("bills", A.PUB), False),
    ("the type must match", [_rule("Group:orders", "Sub")], _req("orders", A.SUB), False),
    ("exact deny beats prefix allow",
     [_rule("Topic:orders*", "Pub"), _rule("Topic:orders-secret", "Pub", False)],
     _req("orders-secret", A.PUB), False),
    ("exact allow beats prefix deny",
     [_rule("Topic:orders*", "Pub", False), _rule("Topic:orders-open", "Pub")],
     _req("orders-open", A.PUB), True),
    ("a longer prefix beats a shorter one",
     [_rule("Topic:o*", "Pub", False), _rule("Topic:orders*", "Pub")],
     _req("orders-1", A.PUB), True),
    ("any prefix beats the wildcard",
     [_rule("Topic:*", "Pub"), _rule("Topic:orders*", "Pub", False)],
     _req("orders-1", A.PUB), False),
    ("deny wins a tie (deny listed first)",
     [_rule("Topic:orders", "Pub", False), _rule("Topic:orders", "Pub")], PUB_ORDERS, False),
    ("deny wins a tie (deny listed last)",
     [_rule("Topic:orders", "Pub"), _rule("Topic:orders", "Pub", False)], PUB_ORDERS, False),
    ("deny wins a tie of prefixes",
     [_rule("Topic:ord*", "All"), _rule("Topic:ord*", "Pub", False)], PUB_ORDERS, False),
    ("a source range admits its addresses",
     [_rule("Topic:orders", "Pub", True, "10.0.0.0/8")], _req("orders", A.PUB, "10.1.2.3"), True),
    ("a source range refuses others",
     [_rule("Topic:orders", "Pub", True, "10.0.0.0/8")], _req("orders", A.PUB, "127.0.0.1"), False),
    ("a source with its port",
     [_rule("Topic:orders", "Pub", True, "127.0.0.1")], _req("orders", A.PUB, "127.0.0.1:5"), True),
    ("an IPv6 source with its port",
     [_rule("Topic:orders", "Pub", True, "::1/128")], _req("orders", A.PUB, "[::1]:5000"), True),
    ("a deny from one range only",
     [_rule("Topic:*", "Pub"), _rule("Topic:*", "Pub", False, "192.168.0.0/16")],
     _req("orders", A.PUB, "192.168.1.1"), False),
    ("... and others still allowed",
     [_rule("Topic:*", "Pub"), _rule("Topic:*", "Pub", False, "192.168.0.0/16")],
     _req("orders", A.PUB, "10.0.0.1"), True),
    ("another user's rule does not apply",
     [_rule("Topic:orders", "Pub", user="v")], PUB_ORDERS, False),
    ("a group rule", [_rule("Group:billing", "Sub")], _req("billing", A.SUB, kind="Group"), True),
]  # fmt: skip


@pytest.mark.parametrize(("rules", "request_", "allowed"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_the_evaluator(
    rules: list[Any], request_: tuple[str, str, Action, str], allowed: bool
) -> None:
    kind, name, action, source = request_
    assert decide(rules, "u", kind, name, action, source)[0] is allowed


def test_retry_and_dead_letter_topics_are_their_groups() -> None:
    assert resource_of_topic("%RETRY%billing") == ("Group", "billing")
    assert resource_of_topic("%DLQ%billing") == ("Group", "billing")
    assert resource_of_topic("orders") == ("Topic", "orders")


@pytest.mark.parametrize(
    ("resource", "actions", "sources"),
    [("Queue:x", ["Pub"], []), ("Topic:", ["Pub"], []), ("Topic:a*b", ["Pub"], []),
     ("Topic:x", ["Publish"], []), ("Topic:x", [], []), ("Topic:x", ["Pub"], ["10.0.0.300"])],
)  # fmt: skip
def test_bad_rules_are_refused_with_a_clear_error(
    resource: str, actions: list[str], sources: list[str]
) -> None:
    with pytest.raises(InvalidArgumentError):
        make_rule("u", resource, actions, allow=True, sources=sources)


def test_the_authorizer_lets_super_users_through_and_follows_rule_edits(tmp_path: Path) -> None:
    users, acl = UserStore(tmp_path), AclStore(tmp_path)
    users.create("root", "r", "super")
    users.create("alice", "a")
    authorizer = Authorizer(users, acl)
    need = [("Topic", "orders", A.PUB)]
    authorizer.check("root", need, "127.0.0.1")
    with pytest.raises(NoPermissionError, match="no rule allows 'alice'"):
        authorizer.check("alice", need, "127.0.0.1")
    acl.grant(make_rule("alice", "Topic:orders", ["Pub"], allow=True))
    time.sleep(1.05)  # both stores are read again at most once a second
    authorizer.check("alice", need, "127.0.0.1")
    assert acl.revoke("alice", "Topic:orders") == 1
    time.sleep(1.05)
    with pytest.raises(NoPermissionError):
        authorizer.check("alice", need, "127.0.0.1")


# -- a real broker -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    options: dict[str, Any] = {
        "config": FAST_BROKER,
        "extra_args": ("--authentication", "--authorization", *grpc_worker_args()),
    }
    with scratch_broker(tmp_path_factory, "acl-broker", **options) as process:
        data = str(process.data_dir / "data")
        for args in (
            ["user", "create", "root", "--secret", "root-secret", "--type", "super"],
            ["user", "create", "alice", "--secret", "alice-secret"],
            ["acl", "grant", "alice", "Topic:orders*", "--actions", "Pub,Sub"],
            ["acl", "grant", "alice", "Topic:orders-audit", "--actions", "Pub", "--deny"],
            ["acl", "grant", "alice", "Group:billing", "--actions", "Sub"],
        ):
            command = [sys.executable, "-m", "pocketmq", *args, "--data-dir", data]
            done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, done.stderr
        time.sleep(1.1)
        yield process


ROOT = ClientConfig(access_key="root", secret_key="root-secret")
ALICE = ClientConfig(access_key="alice", secret_key="alice-secret")


async def _stored(address: str, topic: str) -> int:
    async with Admin(servers=address, client=ROOT) as admin:
        return sum(q.max_offset for q in await admin.queue_status(topic))


@pytest.mark.integration
async def test_a_normal_user_does_only_what_its_rules_allow_on_the_native_port(
    broker: BrokerProcess,
) -> None:
    address = broker.address
    async with Admin(servers=address, client=ROOT) as admin:  # a super user may do anything
        for topic in ("orders-1", "orders-audit", "payroll"):
            await admin.create_topic(topic, queues=1)
        await admin.create_group("billing")
        await admin.create_group("hr")
    async with Producer(servers=address, client=ALICE) as producer:
        await producer.send(Message(topic="orders-1", body=b"ok"))
        for topic in ("payroll", "orders-audit"):  # no rule; an exact deny under the prefix
            with pytest.raises(NoPermissionError, match=topic):
                await producer.send(Message(topic=topic, body=b"refused"))
    assert (await _stored(address, "orders-1"), await _stored(address, "payroll")) == (1, 0)
    assert await _stored(address, "orders-audit") == 0
    async with SimpleConsumer("billing", "orders-1", servers=address, client=ALICE,
                              await_duration=0.5) as consumer:  # fmt: skip
        [got] = await consumer.receive(1)
        await consumer.ack(got)
    with pytest.raises(NoPermissionError, match="hr"):
        async with SimpleConsumer("hr", "orders-1", servers=address, client=ALICE,
                                  await_duration=0.5) as consumer:  # fmt: skip
            await consumer.receive(1)
    async with Admin(servers=address, client=ALICE) as admin:
        with pytest.raises(NoPermissionError, match="Create"):
            await admin.create_topic("orders-new", queues=1)
        with pytest.raises(NoPermissionError, match="Delete"):
            await admin.delete_topic("orders-1")
        with pytest.raises(NoPermissionError, match="Update"):
            await admin.reset_offset("billing", "orders-1", to="earliest")


@pytest.mark.integration
async def test_a_new_rule_takes_effect_within_a_second(broker: BrokerProcess) -> None:
    async with Admin(servers=broker.address, client=ROOT) as admin:
        await admin.create_topic("ledger", queues=1)
    async with Producer(servers=broker.address, client=ALICE) as producer:
        with pytest.raises(NoPermissionError):
            await producer.send(Message(topic="ledger", body=b"before"))
        grant = [sys.executable, "-m", "pocketmq", "acl", "grant", "alice", "Topic:ledger",
                 "--actions", "Pub", "--data-dir", str(broker.data_dir / "data")]  # fmt: skip
        done = await asyncio.to_thread(subprocess.run, grant, capture_output=True, timeout=60)
        assert done.returncode == 0
        await asyncio.sleep(1.1)
        await producer.send(Message(topic="ledger", body=b"after"))
        # the connection remembers the topics it may publish to: a revocation must reach it too
        revoke = [*grant[:4], "revoke", *grant[5:7], "--data-dir", grant[-1]]
        done = await asyncio.to_thread(subprocess.run, revoke, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        await asyncio.sleep(1.1)
        with pytest.raises(NoPermissionError):
            await producer.send(Message(topic="ledger", body=b"revoked"))
    assert await _stored(broker.address, "ledger") == 1


def _official_send(broker: BrokerProcess, topic: str) -> str:
    """One send with the official Python client as alice; "" when it worked, else the error."""
    from rocketmq import ClientConfiguration, Credentials
    from rocketmq import Producer as OfficialProducer

    from ..grpc.conftest import message

    configuration = ClientConfiguration(broker.grpc, Credentials("alice", "alice-secret"))
    producer = OfficialProducer(configuration, (topic,))
    try:
        producer.startup()
        producer.send(message(topic, b"official"))
    except Exception as exc:  # the official client's own error types
        return str(exc) or type(exc).__name__
    finally:
        with contextlib.suppress(Exception):
            producer.shutdown()
    return ""


def _official_receive(broker: BrokerProcess, group: str, topic: str) -> tuple[list[bytes], str]:
    """Receive and ack with the official SimpleConsumer as alice: (bodies, error or "")."""
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
    from rocketmq.v5.client.connection import RpcClient

    asyncio.set_event_loop(RpcClient.get_channel_io_loop())  # as tests/grpc/conftest.py does
    configuration = ClientConfiguration(broker.grpc, Credentials("alice", "alice-secret"))
    consumer = SimpleConsumer(configuration, group, {topic: FilterExpression("*")}, 1)
    bodies: list[bytes] = []
    try:
        consumer.startup()
        deadline = time.monotonic() + 20
        while not bodies and time.monotonic() < deadline:
            for message in consumer.receive(8, 30):
                consumer.ack(message)
                bodies.append(message.body)
    except Exception as exc:  # the official client's own error types
        return bodies, str(exc) or type(exc).__name__
    finally:
        with contextlib.suppress(Exception):
            consumer.shutdown()
    return bodies, ""


@pytest.mark.integration
async def test_the_official_client_is_refused_what_its_user_may_not_do(
    broker: BrokerProcess,
) -> None:
    async with Admin(servers=broker.address, client=ROOT) as admin:
        await admin.create_topic("orders-grpc", queues=1)
        await admin.create_topic("salaries", queues=1)
        await admin.create_group("billing")
        await admin.create_group("hr")
    assert await asyncio.to_thread(_official_send, broker, "orders-grpc") == ""
    refused = await asyncio.to_thread(_official_send, broker, "salaries")
    assert refused != ""
    assert await _stored(broker.address, "orders-grpc") == 1
    assert await _stored(broker.address, "salaries") == 0
    assert "refused a gRPC call of 'alice'" in broker.log()
    bodies, error = await asyncio.to_thread(_official_receive, broker, "billing", "orders-grpc")
    assert (bodies, error) == ([b"official"], "")
    async with Admin(servers=broker.address, client=ROOT) as admin:
        assert sum(q.lag for q in await admin.queues("orders-grpc", "billing")) == 0  # acked
    _, error = await asyncio.to_thread(_official_receive, broker, "hr", "orders-grpc")
    assert error != ""  # no Sub on Group:hr


def test_a_damaged_acl_file_is_not_rewritten_and_keeps_the_rules_in_force(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = AclStore(tmp_path)
    store.grant(make_rule("alice", "Topic:orders", ["Pub"], allow=True))
    running = AclStore(tmp_path)
    running.load()
    (tmp_path / "acl.json").write_text('{"rules": [{"user": "alice", "resou')  # cut short
    with pytest.raises(InvalidArgumentError, match=r"acl\.json is damaged"):
        AclStore(tmp_path).load()  # `pocketmq acl` about to rewrite it
    running.refresh(0.0)
    assert [str(r.resource) for r in running.rules("alice")] == ["Topic:orders"]
    assert "the rules in force stay (1" in caplog.text
    with pytest.raises(InvalidArgumentError):
        store.grant(make_rule("bob", "Topic:x", ["Pub"], allow=True))  # nothing overwritten
    assert '"resou' in (tmp_path / "acl.json").read_text()


@pytest.mark.integration
async def test_a_broker_with_a_damaged_acl_file_starts_and_refuses_normal_users(
    tmp_path: Path,
) -> None:
    config = tmp_path / "b" / "data" / "config"
    config.mkdir(parents=True)
    (config / "acl.json").write_text("not json")
    UserStore(config).create("root", "root-secret", "super")
    UserStore(config).create("alice", "alice-secret")
    extra = ("--authentication", "--authorization")
    with BrokerProcess(tmp_path / "b", config=FAST_BROKER, grpc_port=None,
                       extra_args=extra) as broker:  # fmt: skip
        async with Admin(servers=broker.address, client=ROOT) as admin:
            await admin.create_topic("orders", queues=1)
        async with Producer(servers=broker.address, client=ALICE) as producer:
            with pytest.raises(NoPermissionError):
                await producer.send(Message(topic="orders", body=b"x"))
        assert "acl.json is damaged" in broker.log()
