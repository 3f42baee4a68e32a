"""A broker that refuses to start says why in one line, with what to do next, and exits 1
(docs/cli.md, "Errors"; issue 29 item 12: a damaged store printed a 45-line traceback).

Real ``pocketmq serve`` processes: a store damaged by flipping one byte of an acknowledged
record, a data directory another broker holds, a port another process holds.
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pocketmq.client import Admin, Message, Producer
from pocketmq.testing import BrokerProcess

pytestmark = pytest.mark.integration

LOGGED = (" INFO ", " WARNING ", " DEBUG ")  # log lines (timestamp, level, logger) are not errors


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pocketmq", "serve", "--port", "0", "--namesrv-port", "0"]
    return subprocess.run(
        [*command, "--no-grpc", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _the_one_error_line(refused: subprocess.CompletedProcess[str]) -> str:
    assert refused.returncode == 1, refused.stderr
    assert "Traceback" not in refused.stderr
    errors = [line for line in refused.stderr.splitlines() if not any(k in line for k in LOGGED)]
    assert len(errors) == 1, refused.stderr
    assert errors[0].startswith("Error: cannot start the broker: "), errors[0]
    return errors[0]


def _flip_bit(path: Path, offset: int) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0x01]))


async def test_a_damaged_store_refuses_the_start_in_one_line_naming_file_offset_and_next_step(
    tmp_path: Path,
) -> None:
    home = tmp_path / "b"
    with BrokerProcess(home, grpc_port=None) as broker:
        async with Admin(servers=broker.address) as admin:
            await admin.create_topic("kept", queues=1)
        async with Producer(servers=broker.address) as producer:
            for number in range(5):
                await producer.send(Message(topic="kept", body=b"acknowledged %d" % number))
    segment = home / "data" / "store" / "commitlog" / "00000000000000000000"
    _flip_bit(segment, 100)  # one bit of the first record's body: its CRC fails
    data_dir = str(home / "data")
    line = _the_one_error_line(_serve("--data-dir", data_dir, "--no-http"))
    assert str(segment) in line
    assert "at offset 0" in line
    assert f"`pocketmq store check --data-dir {shlex.quote(data_dir)}`" in line
    assert f"`pocketmq store repair --data-dir {shlex.quote(data_dir)}`" in line
    config = home / "broker.toml"  # the store settings must match the data: named too
    config.write_text("[store]\nflush_interval = 0.05\n")
    line = _the_one_error_line(_serve("--data-dir", data_dir, "--no-http", "--config", str(config)))
    where = shlex.join(["--data-dir", data_dir, "--config", str(config)])
    assert f"`pocketmq store check {where}`" in line


def test_a_port_in_use_names_the_option_that_sets_it(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        refused = _serve("--data-dir", str(tmp_path / "data"), "--http-port", str(port))
    line = _the_one_error_line(refused)
    assert f"port {port} (the HTTP port, --http-port) is already in use" in line


def test_a_data_directory_held_by_a_running_broker_says_so(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "b", grpc_port=None) as broker:
        refused = _serve("--data-dir", str(broker.data_dir / "data"), "--no-http")
    line = _the_one_error_line(refused)
    assert "is in use by another pocketmq process" in line
    assert "another --data-dir" in line
