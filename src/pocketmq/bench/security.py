"""What authentication, authorization and TLS cost native sends (docs/benchmarks.md,
"Security").

Three brokers side by side, each its own process: plain; ``--authentication --authorization``
with a normal user whose prefix rule allows the topic (every send checked); and TLS (a test CA
from ``trustme``). The bench process sends 1 KiB messages to each in turn — pipelined (512 in
flight, the default producer) and one at a time (each send awaited) — and opens connections
(the handshake: HELLO, and with authentication the mutual proof), three rounds alternating, so
machine noise hits every configuration alike.
"""

from __future__ import annotations

import functools
import ssl
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pocketmq.bench.broker import BODY, BenchResult, Meter, in_flight
from pocketmq.client import Admin, ClientConfig, Message, Producer
from pocketmq.client.connection import close_quietly, connect
from pocketmq.testing import BrokerProcess

__all__ = ["run_security"]

ROUNDS = 3
COUNT = 40_000  # pipelined sends per round
EACH = 4_000  # awaited sends per round
CONNECTIONS = 300  # handshakes per round


def _pocketmq(data: Path, *args: str) -> None:
    command = [sys.executable, "-m", "pocketmq", *args, "--data-dir", str(data)]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


def _brokers(stack: ExitStack, root: Path) -> dict[str, tuple[BrokerProcess, ClientConfig]]:
    quiet = ("--log-level", "warning")
    config: dict[str, dict[str, Any]] = {"broker": {"record_history": False}}
    brokers: dict[str, tuple[BrokerProcess, ClientConfig]] = {}
    plain = BrokerProcess(root / "plain", grpc_port=None, config=config, extra_args=quiet)
    brokers["plain"] = (stack.enter_context(plain), ClientConfig())
    data = root / "acl" / "data"
    data.mkdir(parents=True)
    _pocketmq(data, "user", "create", "admin", "--secret", "admin-secret", "--type", "super")
    _pocketmq(data, "user", "create", "bench", "--secret", "bench-secret")
    _pocketmq(data, "acl", "grant", "bench", "Topic:bench*", "--actions", "Pub")
    guarded = BrokerProcess(
        root / "acl",
        grpc_port=None,
        config=config,
        extra_args=(*quiet, "--authentication", "--authorization"),
    )
    brokers["authentication + ACL"] = (
        stack.enter_context(guarded),
        ClientConfig(access_key="bench", secret_key="bench-secret"),
    )
    try:
        import trustme
    except ImportError:  # a test dependency: without it, no TLS case
        return brokers
    authority = trustme.CA()
    cert = authority.issue_cert("127.0.0.1")
    chain, key = root / "chain.pem", root / "key.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(chain))
    cert.private_key_pem.write_to_path(str(key))
    tls = BrokerProcess(
        root / "tls",
        grpc_port=None,
        config=config,
        extra_args=(*quiet, "--tls-cert", str(chain), "--tls-key", str(key)),
    )
    context = ssl.create_default_context()
    authority.configure_trust(context)
    brokers["TLS"] = (stack.enter_context(tls), ClientConfig(tls=context))
    return brokers


async def run_security(server: str | None = None) -> list[BenchResult]:
    """Pipelined sends against each configuration (module doc); ``server`` is ignored."""
    results: list[BenchResult] = []
    with (
        tempfile.TemporaryDirectory(prefix="pocketmq-bench-", dir=".") as tmp,
        ExitStack() as stack,
    ):
        brokers = _brokers(stack, Path(tmp))
        admin_config = {
            "authentication + ACL": ClientConfig(access_key="admin", secret_key="admin-secret")
        }
        for name, (process, client) in brokers.items():
            async with Admin(servers=process.address, client=admin_config.get(name, client)) as a:
                await a.create_topic("bench-security", queues=8)
        message = Message(topic="bench-security", body=BODY)
        for round_number in range(1, ROUNDS + 1):
            for name, (process, client) in brokers.items():
                assert process.process is not None
                pid = process.process.pid
                async with Producer(servers=process.address, client=client) as producer:
                    await producer.send(message)  # route and connection
                    send = functools.partial(producer.send, message)
                    with Meter(pid) as meter:
                        await in_flight(COUNT, 512, send)
                    results.append(meter.result(f"{name}, pipelined, round {round_number}", COUNT))
                    with Meter(pid) as meter:
                        for _ in range(EACH):
                            await producer.send(message)
                    results.append(meter.result(f"{name}, awaited, round {round_number}", EACH))
                with Meter(pid) as meter:
                    await _handshakes(process.address, client)
                results.append(
                    meter.result(f"{name}, connections, round {round_number}", CONNECTIONS)
                )
    return results


async def _handshakes(address: str, client: ClientConfig) -> None:
    """Open (and close) connections one after another: what a connection's handshake costs."""
    credentials = (client.access_key, client.secret_key)
    for _ in range(CONNECTIONS):
        connection = await connect(
            address, "bench", timeout=5, tls=client.ssl_context(), credentials=credentials
        )
        await close_quietly(connection)
