"""Issue 31, the ACL over remoting: with authentication and authorization on, every remoting
request's signer (RocketMQ 4.x's ``AccessKey``/``Signature``) is checked against the rules as a
native request is (docs/remoting.md, "Authentication"; docs/security.md, "Authorization"): a
user without ``Pub`` on a topic is refused ``NO_PERMISSION`` (16), one with it is served.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.broker import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.client.sync import SyncAdmin
from pocketmq.protocol.remoting import RequestCode as RC
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.protocol.remoting.properties import encode_properties
from pocketmq.server.remoting.context import BrokerSide
from pocketmq.server.remoting.handlers import broker_remoting_handlers
from pocketmq.server.remoting.permissions import NEEDS
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import scratch_broker
from .conftest import ALICE, ROOT, create_users, pocketmq_cli, root_client
from .raw import Session

BOB = ("bob", "bob-secret-0123456789")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    options = {"config": FAST_BROKER, "grpc_port": None,
               "extra_args": ("--authentication", "--authorization")}  # fmt: skip
    with scratch_broker(tmp_path_factory, "remoting-acl", **options) as process:  # type: ignore[arg-type]
        data = process.data_dir / "data"
        create_users(data, BOB)
        pocketmq_cli("acl", "grant", ALICE[0], "Topic:orders*", "--actions", "Pub", data=data)
        time.sleep(1.1)  # the broker reads the users and rules again at most once a second
        keys = root_client()
        with SyncAdmin(servers=process.address, client=keys) as admin:
            admin.create_topic("orders-1", queues=1)
            admin.create_topic("payroll", queues=1)
        yield process


def _send(client: Session, topic: str) -> int:
    fields = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
              "g": "1700000000000", "h": "0", "i": encode_properties({"TAGS": "t"})}  # fmt: skip
    return client.call(RC.SEND_MESSAGE_V2, fields, b"x").code


@pytest.mark.integration
def test_a_user_without_pub_is_refused_and_one_with_it_is_served(broker: BrokerProcess) -> None:
    with Session(broker.address, keys=ALICE) as alice:
        assert _send(alice, "orders-1") == R.SUCCESS
        assert _send(alice, "payroll") == R.NO_PERMISSION  # no rule gives her payroll
        assert _send(alice, "orders-1") == R.SUCCESS  # the connection stays
        refused = alice.call(RC.GET_BROKER_RUNTIME_INFO)  # not hers: administration
        assert refused.code in (R.NO_PERMISSION, R.REQUEST_CODE_NOT_SUPPORTED)
    with Session(broker.address, keys=BOB) as bob:
        assert _send(bob, "payroll") == R.NO_PERMISSION
    with Session(broker.address, keys=ROOT) as root:
        assert _send(root, "payroll") == R.SUCCESS


def test_every_served_code_has_its_rights_named(tmp_path: Path) -> None:
    """A handler added to the broker's table without a row in NEEDS would be an
    administrators-only request by default: every code the table serves has one."""
    broker = Broker(BrokerConfig(data_dir=str(tmp_path)))
    try:
        table = broker_remoting_handlers(BrokerSide(broker, lambda: "127.0.0.1:10911"))
    finally:
        broker.store.close()
    assert set(table) <= set(NEEDS)
