"""``pocketmq serve --grpc-port``: the ready line, and a port that is taken."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pocketmq.testing import BrokerProcess


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_grpc_port_in_the_ready_line_and_a_taken_port_fails(tmp_path: Path) -> None:
    port = _free_port()
    with BrokerProcess(tmp_path / "a", grpc_port=port) as first:
        assert first.grpc == f"127.0.0.1:{port}"
        with pytest.raises(RuntimeError, match="cannot start the broker"):
            BrokerProcess(tmp_path / "b", grpc_port=port)  # no silent port sharing
