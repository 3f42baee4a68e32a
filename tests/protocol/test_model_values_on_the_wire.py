"""The messages and attempt records the native protocol carries are pocketmq.model's values, decoded
straight into what the broker stores (docs/design.md, "Layers"); their bytes are the ones the
protocol's own twin structures produced before (captured from that tree), so no peer sees a change.
"""

from __future__ import annotations

from pocketmq.model import Attempt, Delivered, InboundMessage
from pocketmq.protocol import decode_body, encode_body
from pocketmq.protocol import structs as w

SEND = "939296a174c4017881a16ba17602017b96a175c40080ff0000a167a9312e322e332e343a35"
PULL = "95a5464f554e44030009919ca1740102c4016281a161a1620a0b0c02a168a4686f7374a862726f6b65722d61"
HISTORY = "91919aa26964a167a17401a163a753554343455353a00a14a26d67"


def test_a_send_request_encodes_as_before_and_decodes_into_the_brokers_value() -> None:
    request = w.SendRequest(
        [InboundMessage("t", b"x", {"k": "v"}, 2, 1, 123), InboundMessage("u", b"")],
        "g",
        "1.2.3.4:5",
    )
    assert encode_body(request).hex() == SEND
    decoded = decode_body(bytes.fromhex(SEND), w.SendRequest)
    assert decoded == request
    assert all(type(m) is InboundMessage for m in decoded.messages)


def test_a_delivered_message_encodes_as_before() -> None:
    message = Delivered("t", 1, 2, b"b", {"a": "b"}, 10, 11, 12, 2, "h", "host", "broker-a")
    response = w.PullResponse("FOUND", 3, 0, 9, [message])
    assert encode_body(response).hex() == PULL
    assert decode_body(bytes.fromhex(PULL), w.PullResponse).messages == [message]


def test_an_attempt_record_encodes_as_before() -> None:
    attempt = Attempt("id", "g", "t", 1, "c", "SUCCESS", "", 10, 20, "mg")
    assert encode_body(w.MessageHistoryResponse([attempt])).hex() == HISTORY
