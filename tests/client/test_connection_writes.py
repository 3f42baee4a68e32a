"""When a client connection writes its frames (client/connection.py, docs/design.md "Clients"):
a request with nothing else in flight leaves at once, in the caller's turn of the event loop;
while others are in flight, the frames of one turn are coalesced into one write, in order."""

from __future__ import annotations

import asyncio

from pocketmq.client.connection import ClientConnection
from pocketmq.protocol import FrameDecoder, RequestCode
from pocketmq.protocol import structs as w


class RecordingTransport:
    """The part of a transport a connection uses; keeps every write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def _connection() -> tuple[ClientConnection, RecordingTransport]:
    connection = ClientConnection("127.0.0.1:1", None)
    transport = RecordingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


def _request_ids(writes: list[bytes]) -> list[list[int]]:
    return [[frame.request_id for frame in FrameDecoder().feed(data)] for data in writes]


async def test_a_lone_request_is_written_at_once() -> None:
    connection, transport = _connection()
    connection.send_request(RequestCode.GET_ROUTE, w.GetRouteRequest("a"), None)
    assert len(transport.writes) == 1  # before the loop turns


async def test_requests_behind_one_in_flight_leave_together_in_order() -> None:
    connection, transport = _connection()
    for topic in "abcd":
        connection.send_request(RequestCode.GET_ROUTE, w.GetRouteRequest(topic), None)
    assert _request_ids(transport.writes) == [[1]]
    await asyncio.sleep(0)
    assert _request_ids(transport.writes) == [[1], [2, 3, 4]]


async def test_a_request_never_overtakes_queued_frames() -> None:
    connection, transport = _connection()
    connection.oneway(RequestCode.CANCEL, w.CancelRequest(7))  # queued for the turn's write
    connection.send_request(RequestCode.GET_ROUTE, w.GetRouteRequest("a"), None)
    assert transport.writes == []
    await asyncio.sleep(0)
    assert _request_ids(transport.writes) == [[1, 2]]
