"""Issue 31, the name server over remoting, against real processes: a default ``pocketmq serve``
(its embedded name server), one with ``--authentication``, and a stand-alone ``pocketmq namesrv``
with and without it, each asked every name-server request by a raw remoting client, unsigned and
signed with RocketMQ 4.x's ACL signature (docs/remoting.md, "Name server", "Authentication";
docs/security.md, "Who may do what, per port"). The same ports keep serving the native SDK.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from pocketmq import Message
from pocketmq.client import ClientConfig
from pocketmq.client.sync import SyncAdmin, SyncProducer
from pocketmq.protocol.remoting import RequestCode as RC
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.server.namesrv.remoting import REGISTRATION_REFUSED
from pocketmq.server.remoting.signatures import UNSIGNED_REMARK
from pocketmq.testing import BrokerProcess, NameServerProcess

from ..integration.conftest import FAST_BROKER
from ..scratch import scratch_dir
from .conftest import ALICE, ROOT, create_users, pocketmq_cli, root_client
from .raw import ask

pytestmark = pytest.mark.integration

TOPIC = "remoting-routes"


@dataclass
class Deployment:
    namesrv: str
    broker: BrokerProcess
    authentication: bool


def _topic(broker: BrokerProcess, authentication: bool) -> None:
    keys = root_client() if authentication else None
    with SyncAdmin(servers=broker.address, client=keys) as admin:
        admin.create_topic(TOPIC, queues=3)


@pytest.fixture(
    scope="module", params=["embedded", "embedded-auth", "standalone", "standalone-auth"]
)
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    kind: str = request.param
    authentication = kind.endswith("-auth")
    with scratch_dir(tmp_path_factory, f"remoting-{kind}") as root:
        broker_args: tuple[str, ...] = ()
        namesrv: NameServerProcess | None = None
        if authentication:
            create_users(root / "broker" / "data")
            broker_args = ("--authentication",)
        if kind.startswith("standalone"):
            namesrv_args: tuple[str, ...] = ()
            if authentication:
                key = root / "cluster.key"
                pocketmq_cli("cluster", "key", "create", str(key))
                create_users(root / "namesrv-data")
                namesrv_args = ("--authentication", "--cluster-key", str(key),
                                "--data-dir", str(root / "namesrv-data"))  # fmt: skip
                broker_args += ("--cluster-key", str(key))
            namesrv = NameServerProcess(root / "ns", extra_args=namesrv_args)
        try:
            with BrokerProcess(
                root / "broker",
                config=FAST_BROKER,
                grpc_port=None,
                namesrv=namesrv.address if namesrv is not None else None,
                extra_args=broker_args,
            ) as broker:
                _topic(broker, authentication)
                address = namesrv.address if namesrv is not None else broker.namesrv
                yield Deployment(address, broker, authentication)
        finally:
            if namesrv is not None:
                namesrv.stop()


def _route(
    deployment: Deployment, keys: tuple[str, str], version: int, binary: bool = False
) -> Any:
    answer = ask(
        deployment.namesrv,
        RC.GET_ROUTEINFO_BY_TOPIC,
        {"topic": TOPIC},
        keys=keys,
        version=version,
        binary=binary,
    )
    assert answer.code == R.SUCCESS, answer.remark
    return json.loads(answer.body)


def test_a_signed_route_request_gets_the_broker_s_shared_address(deployment: Deployment) -> None:
    """Signed by a known user: served with or without authentication. The route names the
    broker by the address its native clients use, the port that also speaks remoting."""
    for binary in (False, True):
        route = _route(deployment, keys=ALICE, version=401, binary=binary)
        assert route["brokerDatas"] == [
            {
                "brokerAddrs": {"0": deployment.broker.address},
                "brokerName": "broker-a",
                "cluster": "DefaultCluster",
                "enableActingMaster": False,
            }
        ]
        [queues] = route["queueDatas"]
        assert (queues["readQueueNums"], queues["writeQueueNums"], queues["perm"]) == (3, 3, 6)


def test_unsigned_requests_are_served_only_without_authentication(
    deployment: Deployment,
) -> None:
    requests = [
        (RC.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}),
        (RC.GET_BROKER_CLUSTER_INFO, {}),
        (RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {}),
    ]
    for code, fields in requests:
        answer = ask(deployment.namesrv, code, fields, version=121)
        if deployment.authentication:
            assert (answer.code, answer.remark) == (R.NO_PERMISSION, UNSIGNED_REMARK)
        else:
            assert answer.code == R.SUCCESS, answer.remark


def test_every_read_request_signed(deployment: Deployment) -> None:
    old_client = ask(deployment.namesrv, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC},
                     keys=ALICE, version=121)  # fmt: skip
    assert f'"brokerAddrs":{{0:"{deployment.broker.address}"}}'.encode() in old_client.body
    info = ask(deployment.namesrv, RC.GET_BROKER_CLUSTER_INFO, keys=ALICE)
    assert info.code == R.SUCCESS
    assert f'"broker-a":{{"brokerAddrs":{{0:"{deployment.broker.address}"}}'.encode() in info.body
    assert b'"clusterAddrTable":{"DefaultCluster":["broker-a"]}' in info.body
    topics = ask(deployment.namesrv, RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, keys=ALICE)
    assert TOPIC in json.loads(topics.body)["topicList"]
    missing = ask(deployment.namesrv, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "nowhere"}, keys=ALICE)
    assert missing.code == R.TOPIC_NOT_EXIST
    assert "does not exist on any broker" in (missing.remark or "")


def test_a_wrong_signature_or_an_unknown_user_is_refused(deployment: Deployment) -> None:
    """With authentication; without it no signature is checked (as RocketMQ without ACL)."""
    for keys in ((ALICE[0], "not-her-secret"), ("mallory", "anything")):
        answer = ask(deployment.namesrv, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}, keys=keys)
        if deployment.authentication:
            assert answer.code == R.NO_PERMISSION
            assert "do not match a user" in (answer.remark or "")
        else:
            assert answer.code == R.SUCCESS


def test_no_broker_registers_over_remoting(deployment: Deployment) -> None:
    fields = {"brokerName": "rogue", "brokerAddr": "10.9.9.9:10911", "clusterName": "x",
              "brokerId": "0", "haServerAddr": "10.9.9.9:10912"}  # fmt: skip
    answer = ask(deployment.namesrv, RC.REGISTER_BROKER, fields, keys=ROOT)
    assert (answer.code, answer.remark) == (R.REQUEST_CODE_NOT_SUPPORTED, REGISTRATION_REFUSED)
    brokers = _route(deployment, keys=ROOT, version=401)["brokerDatas"]
    assert [b["brokerName"] for b in brokers] == ["broker-a"]


def test_the_broker_s_port_sniffs_remoting_and_serves_it(deployment: Deployment) -> None:
    # a consumer's request is served (docs/remoting.md, "Broker, consumer side")
    answer = ask(
        deployment.broker.address, RC.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}, keys=ALICE
    )
    assert (answer.code, answer.ext_fields.get("offset")) == (R.SUCCESS, "0")
    # a request no broker serves is refused as RocketMQ refuses it
    answer = ask(deployment.broker.address, RC.REGISTER_BROKER, keys=ALICE)
    assert answer.code == R.REQUEST_CODE_NOT_SUPPORTED
    assert answer.remark == " request type 103 not supported"
    # and the native SDK keeps working on both ports
    keys = (
        ClientConfig(access_key=ROOT[0], secret_key=ROOT[1]) if deployment.authentication else None
    )
    for server in (deployment.broker.address, deployment.namesrv):
        with SyncProducer(servers=server, client=keys) as producer:
            sent = producer.send(Message(topic=TOPIC, body=b"native, on a shared port"))
            assert sent.broker_name == "broker-a"
