"""What the permissive gRPC port costs (docs/benchmarks.md, "gRPC permissive TLS forwarder").

Two brokers side by side, ``--grpc-tls disabled`` (the gRPC server on the public port) and
``--grpc-tls permissive`` (the first-byte forwarder in front of it); the official Python client
sends 1 KiB messages in plaintext with ``send_async`` (64 in flight) to each in turn, three
rounds alternating.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

from pocketmq.bench.broker import BenchResult
from pocketmq.bench.grpc import _measure, _official_async_send
from pocketmq.client.sync import SyncAdmin
from pocketmq.testing import BrokerProcess

__all__ = ["run_grpc_tls"]

BODY = b"x" * 1024
COUNT = 4000
ROUNDS = 3


async def run_grpc_tls(server: str | None = None) -> list[BenchResult]:
    """The rounds (module doc); ``server`` is ignored."""
    from rocketmq import ClientConfiguration, Credentials, Producer

    config: dict[str, dict[str, Any]] = {"broker": {"record_history": False}}
    quiet = ("--log-level", "warning")
    results: list[BenchResult] = []
    with tempfile.TemporaryDirectory(prefix="pocketmq-bench-", dir=".") as tmp:
        brokers = {
            mode: BrokerProcess(
                Path(tmp) / mode, config=config, extra_args=(*quiet, "--grpc-tls", mode)
            )
            for mode in ("disabled", "permissive")
        }
        producers: dict[str, Any] = {}
        try:
            for mode, broker in brokers.items():
                with SyncAdmin(servers=broker.address) as admin:
                    admin.create_topic("bench-grpc-tls", queues=8)
                producer = Producer(
                    ClientConfiguration(broker.grpc, Credentials()), ("bench-grpc-tls",)
                )
                producer.startup()
                producers[mode] = producer
                _official_async_send(producer, "bench-grpc-tls", BODY, 500, 64)  # warm up
            for round_number in range(1, ROUNDS + 1):
                for mode, broker in brokers.items():
                    assert broker.process is not None
                    send = functools.partial(
                        _official_async_send, producers[mode], "bench-grpc-tls", BODY, COUNT, 64
                    )
                    measured = _measure(mode, broker.process.pid, COUNT, send)
                    results.append(
                        BenchResult(
                            f"{mode}, round {round_number}",
                            COUNT,
                            measured.seconds,
                            measured.client_cpu,
                            measured.broker_cpu,
                            {},
                        )
                    )
        finally:
            for producer in producers.values():
                producer.shutdown()
            for broker in brokers.values():
                broker.stop()
    return results
