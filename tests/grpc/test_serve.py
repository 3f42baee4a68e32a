"""``pocketmq serve``: the gRPC port in the ready line, a taken port, the gRPC settings."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from pocketmq.client.sync import SyncAdmin
from pocketmq.testing import BrokerProcess

from .conftest import ClientLog, OfficialClients, message, wait_until
from .test_errors import _send


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _broker_on_a_chosen_grpc_port(directory: Path) -> tuple[BrokerProcess, int]:
    """A broker told to serve gRPC on a port found free. Another process may take that port
    between the check and the broker's bind (seen in CI while other brokers started): then try
    another port; any other failure is the test's."""
    for attempt in range(5):
        port = _free_port()
        try:
            return BrokerProcess(directory / f"a{attempt}", grpc_port=port), port
        except RuntimeError as exc:
            if "address already in use" not in str(exc):
                raise
    raise AssertionError("five free ports were all taken before the broker could bind them")


def test_grpc_port_in_the_ready_line_and_a_taken_port_fails(tmp_path: Path) -> None:
    first, port = _broker_on_a_chosen_grpc_port(tmp_path)
    with first:
        assert first.grpc == f"127.0.0.1:{port}"
        with pytest.raises(RuntimeError, match="cannot start the broker"):
            BrokerProcess(tmp_path / "b", grpc_port=port)  # no silent port sharing


def test_the_auto_renew_invisible_time_is_configurable(tmp_path: Path) -> None:
    """Push consumers receive with auto_renew and no invisible duration: the broker's
    ``[server] grpc_auto_renew_invisible`` decides how long their messages stay hidden."""
    config = {"server": {"grpc_auto_renew_invisible": 1.0}}
    with BrokerProcess(tmp_path, config=config) as broker:
        admin = SyncAdmin(servers=broker.native)
        try:
            admin.create_topic("T", queues=1)
            admin.create_group("G")
        finally:
            admin.close()
        channel = grpc.insecure_channel(broker.grpc)
        try:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            _send(stub, "T", b"renew me")

            def receive() -> list:
                request = service_pb2.ReceiveMessageRequest(
                    group=definition_pb2.Resource(name="G"),
                    message_queue=definition_pb2.MessageQueue(
                        topic=definition_pb2.Resource(name="T")
                    ),
                    batch_size=8,
                    auto_renew=True,
                    long_polling_timeout={"seconds": 3},
                )
                replies = stub.ReceiveMessage(request, timeout=10)
                return [r.message for r in replies if r.HasField("message")]

            [first] = receive()
            started = time.monotonic()
            [again] = receive()  # back after 1 s, not 120 s
            assert 0.5 < time.monotonic() - started < 3
            assert again.system_properties.delivery_attempt == 2
            assert again.system_properties.message_id == first.system_properties.message_id
        finally:
            channel.close()


def test_clients_carry_on_across_a_broker_restart(tmp_path: Path, client_log: ClientLog) -> None:
    client_log.expect("send message exception", "failed to send message", "Connection refused")
    with BrokerProcess(tmp_path) as broker:
        admin = SyncAdmin(servers=broker.native)
        try:
            admin.create_topic("T", queues=2)
            admin.create_group("G")
        finally:
            admin.close()
        clients = OfficialClients(broker.grpc)
        try:
            producer = clients.producer("T")
            consumer = clients.simple("G", "T")
            before = producer.send(message("T", b"before")).message_id
            broker.restart()  # same ports, same data
            sent: list[str] = []

            def send_again() -> bool:
                try:
                    sent.append(producer.send(message("T", b"after")).message_id)
                except Exception:  # the channel reconnects with gRPC's backoff (~1 s)
                    return False
                return True

            wait_until(send_again, timeout=15, step=0.2)
            got: list = []

            def receive_more() -> bool:
                try:
                    got.extend(consumer.receive(8, 30))
                except Exception:  # this client's channel may still be reconnecting
                    return False
                return len(got) >= 2

            wait_until(receive_more, timeout=15, step=0.2)
            ids = {m.message_id for m in got}
            assert before in ids  # nothing lost across the restart
            assert sent[-1] in ids
            for m in got:
                consumer.ack(m)
        finally:
            clients.shutdown_all()
