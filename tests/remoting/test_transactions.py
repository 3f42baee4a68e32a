"""Issue 31, transactions over remoting against a real broker: a half message sent with
``sysFlag`` "prepared", ended by a one-way ``END_TRANSACTION``, and the broker's check-back
``CHECK_TRANSACTION_STATE`` pushed to a producer registered by its heartbeat, answered by an
``END_TRANSACTION`` with ``fromTransactionCheck`` (docs/remoting.md, "Broker, producer side").

The frames follow apache/rocketmq 5.3.3: ``MessageSysFlag.TRANSACTION_PREPARED_TYPE`` (4),
``COMMIT`` (8) and ``ROLLBACK`` (12); ``EndTransactionRequestHeader`` (``producerGroup``,
``tranStateTableOffset``, ``commitLogOffset``, ``commitOrRollback``, ``fromTransactionCheck``,
``msgId``, ``transactionId``), as ``DefaultMQProducerImpl.endTransaction`` and
``ClientRemotingProcessor.checkTransactionState`` fill them; ``CheckTransactionStateRequestHeader``
and its body, the half message as ``MessageDecoder.encode`` writes a stored message;
``HeartbeatData.producerDataSet``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from pocketmq.client.sync import SyncAdmin, SyncSimpleConsumer
from pocketmq.protocol.remoting import RequestCode as RC
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.protocol.remoting.properties import encode_properties
from pocketmq.protocol.remoting.stored import decode_stored
from pocketmq.testing import BrokerProcess

from ..integration.conftest import FAST_BROKER, unique
from ..scratch import scratch_broker
from .raw import Session

pytestmark = pytest.mark.integration

TX_BROKER: dict[str, dict[str, Any]] = {
    "broker": {
        **FAST_BROKER["broker"],
        "transaction_timeout": 0.5,
        "transaction_check_interval": 0.5,
    },
    "store": dict(FAST_BROKER["store"]),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with scratch_broker(tmp_path_factory, "remoting-tx", config=TX_BROKER,
                        grpc_port=None) as process:  # fmt: skip
        yield process


def _half(client: Session, topic: str, group: str, uniq: str, body: bytes) -> Any:
    properties = {"UNIQ_KEY": uniq, "TRAN_MSG": "true", "PGROUP": group, "TAGS": "tx"}
    fields = {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "4",
              "g": "1700000000000", "h": "0", "i": encode_properties(properties)}  # fmt: skip
    answer = client.call(RC.SEND_MESSAGE_V2, fields, body)
    assert answer.code == R.SUCCESS, answer.remark
    assert answer.ext_fields["transactionId"]
    return answer


def _end(client: Session, group: str, uniq: str, transaction_id: str, kind: int,
         from_check: bool = False) -> None:  # fmt: skip
    fields = {"producerGroup": group, "tranStateTableOffset": "0", "commitLogOffset": "0",
              "commitOrRollback": str(kind), "fromTransactionCheck": str(from_check).lower(),
              "msgId": uniq, "transactionId": transaction_id}  # fmt: skip
    client.send(RC.END_TRANSACTION, fields, oneway=True)


def test_commit_rollback_and_check_back(broker: BrokerProcess) -> None:
    topic, group, consumers = unique("tx-topic"), unique("tx-producers"), unique("tx-group")
    with SyncAdmin(servers=broker.address) as admin:
        admin.create_topic(topic, queues=1, topic_type="transaction")
        admin.create_group(consumers)
    with Session(broker.address) as client:
        heartbeat = {"clientID": "127.0.0.1@tx", "producerDataSet": [{"groupName": group}],
                     "consumerDataSet": []}  # fmt: skip
        assert client.call(RC.HEART_BEAT, body=json.dumps(heartbeat).encode()).code == R.SUCCESS
        committed = _half(client, topic, group, "A" * 32, b"commit me")
        _end(client, group, "A" * 32, committed.ext_fields["transactionId"], 8)
        rolled = _half(client, topic, group, "B" * 32, b"roll me back")
        _end(client, group, "B" * 32, rolled.ext_fields["transactionId"], 12)
        checked = _half(client, topic, group, "C" * 32, b"ask me")
        _end(client, group, "C" * 32, checked.ext_fields["transactionId"], 0)  # unknown yet
        check = client.wait_push(RC.CHECK_TRANSACTION_STATE)
        assert check.is_oneway
        assert check.ext_fields["msgId"] == "C" * 32
        assert check.ext_fields["transactionId"] == checked.ext_fields["transactionId"]
        [half] = decode_stored(check.body)
        assert (half.topic, half.body) == (topic, b"ask me")
        assert half.properties["PGROUP"] == group
        assert half.properties["__transactionId__"] == check.ext_fields["transactionId"]
        assert half.properties["UNIQ_KEY"] == "C" * 32
        assert check.ext_fields["offsetMsgId"] == checked.ext_fields["msgId"]
        _end(client, group, "C" * 32, check.ext_fields["transactionId"], 8, from_check=True)
    got: list[Any] = []
    with SyncSimpleConsumer(consumers, topic, servers=broker.address,
                            await_duration=1.0) as consumer:  # fmt: skip
        for _ in range(10):
            got += consumer.receive(16)
            if len(got) >= 2:
                break
        got += consumer.receive(16)
    assert sorted(m.body for m in got) == [b"ask me", b"commit me"]
