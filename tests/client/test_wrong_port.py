"""A client pointed at a port that does not speak pocketmq's protocol says what answered
(issue 29 item 16: "frame length 68681728 outside ..." told a newcomer nothing). The real
broker's gRPC and HTTP ports: tests/integration/test_cli_first_hour.py."""

from __future__ import annotations

import asyncio

import pytest

from pocketmq.client.connection import connect
from pocketmq.errors import BrokerConnectionError
from pocketmq.protocol import FrameKind, encode_frame, foreign_protocol

# what servers of these protocols send first (an aiohttp 400, grpcio's SETTINGS, a TLS alert)
HTTP1 = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain"
HTTP2 = b"\x00\x00\x18\x04\x00\x00\x00\x00\x00\x00\x04\x00\x40\x00\x00"
TLS_ALERT = b"\x15\x03\x03\x00\x02\x02\x28"


@pytest.mark.parametrize(
    ("first_bytes", "protocol"),
    [(HTTP1, "HTTP/1.x"), (HTTP2, "HTTP/2"), (TLS_ALERT, "TLS"), (b"\x16\x03\x01\x02\x00", "TLS")],
)
def test_the_first_bytes_of_other_protocols_are_recognised(
    first_bytes: bytes, protocol: str
) -> None:
    assert foreign_protocol(first_bytes) == protocol


def test_pocketmq_frames_and_too_few_bytes_say_nothing() -> None:
    assert foreign_protocol(encode_frame(FrameKind.RESPONSE, 0, 1, b"\x80" * 40)) is None
    assert foreign_protocol(b"HT") is None
    assert foreign_protocol(b"") is None


async def test_a_plain_client_at_a_port_answering_in_tls_is_told_to_use_tls() -> None:
    """A TLS server that answers a plain client's bytes with an alert (OpenSSL servers do;
    Python's asyncio closes without one, and the client then says the connection was lost)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(12)
        writer.write(TLS_ALERT)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        with pytest.raises(BrokerConnectionError, match="answered in TLS") as raised:
            await connect(address, "test", timeout=5.0)
        assert "POCKETMQ_TLS_CA" in str(raised.value)
    finally:
        server.close()
        await server.wait_closed()
