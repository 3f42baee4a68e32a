"""Issue 31, remoting sends in a replicated group (docs/remoting.md, "Broker, producer side";
docs/replication.md): a slave refuses writes ``SERVICE_NOT_AVAILABLE`` (14), which RocketMQ's
producers retry on a master; a master in sync replication answers ``SUCCESS`` while its slave
is in sync, and once the slave is gone a weaker guarantee — ``SLAVE_NOT_AVAILABLE`` (11) or,
while the master still waits for it, ``FLUSH_SLAVE_TIMEOUT`` (12) — with the send's fields: the
message is stored (``SendStatus`` other than ``SEND_OK`` on the Java client).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pocketmq.client.sync import SyncAdmin
from pocketmq.protocol.remoting import RequestCode as RC
from pocketmq.protocol.remoting import ResponseCode as R
from pocketmq.protocol.remoting.properties import encode_properties
from pocketmq.testing import NameServerProcess

from ..replication.conftest import Group, group_config
from .raw import Session

pytestmark = pytest.mark.integration

TOPIC = "replicated-sends"


def _send(address: str) -> tuple[int, dict[str, str]]:
    fields = {"a": "PG", "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "0",
              "g": "1700000000000", "h": "0", "i": encode_properties({"TAGS": "t"})}  # fmt: skip
    with Session(address) as client:
        answer = client.call(RC.SEND_MESSAGE_V2, fields, b"x")
    return answer.code, answer.ext_fields


def test_a_slave_refuses_and_a_master_without_its_slave_answers_the_weaker_code(
    tmp_path: Path,
) -> None:
    namesrv = NameServerProcess(tmp_path / "namesrv")
    group = Group(tmp_path / "group", namesrv, group_config("sync", ha_sync_timeout=1.0))
    try:
        slave = group.add_slave()
        with SyncAdmin(servers=group.master.address) as admin:
            admin.create_topic(TOPIC, queues=1)
        assert _send(slave.address)[0] == R.SERVICE_NOT_AVAILABLE
        deadline = time.monotonic() + 20
        while (code := _send(group.master.address)[0]) != R.SUCCESS:
            assert time.monotonic() < deadline, f"the slave never got in sync ({code})"
            time.sleep(0.2)
        slave.stop()
        code, fields = _send(group.master.address)
        assert code in (R.SLAVE_NOT_AVAILABLE, R.FLUSH_SLAVE_TIMEOUT)
        assert fields["msgId"]
        assert fields["queueOffset"] != "-1"
    finally:
        try:
            group.stop()
        finally:
            namesrv.stop()
