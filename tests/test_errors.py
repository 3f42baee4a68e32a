"""The error tree's two seams: a refused argument is one type wherever it was caught, and a
protocol error is a broker error only when the broker said it (docs/protocol.md, "Errors")."""

from __future__ import annotations

import pytest

from pocketmq.errors import (
    BrokerError,
    Code,
    InvalidArgumentError,
    LocalProtocolError,
    MessageIllegalError,
    MessageTooLargeError,
    ProtocolError,
    RemoteProtocolError,
    error_from_code,
)
from pocketmq.protocol import FrameDecoder, decode_body
from pocketmq.protocol.body import Empty


def test_the_brokers_protocol_error_answer_is_a_remote_protocol_error() -> None:
    error = error_from_code(Code.PROTOCOL_ERROR, "bad body")
    assert type(error) is RemoteProtocolError
    assert isinstance(error, ProtocolError)
    assert isinstance(error, BrokerError)
    assert (error.wire_code, error.remark) == (Code.PROTOCOL_ERROR, "bad body")


def test_a_frame_this_process_cannot_decode_is_local_and_not_a_broker_error() -> None:
    with pytest.raises(LocalProtocolError) as caught:
        FrameDecoder().feed(b"\xff" * 64)
    assert not isinstance(caught.value, BrokerError)
    with pytest.raises(LocalProtocolError):
        decode_body(b"\xc1", Empty)


@pytest.mark.parametrize("code", [Code.MESSAGE_ILLEGAL, Code.MESSAGE_TOO_LARGE])
def test_an_argument_the_broker_refuses_is_an_invalid_argument_error(code: Code) -> None:
    error = error_from_code(code, "topic name is bad")
    assert isinstance(error, MessageIllegalError)
    assert isinstance(error, InvalidArgumentError)
    assert isinstance(error, ValueError)
    assert isinstance(error, BrokerError)
    assert error.wire_code == code
    assert not error.retriable


def test_the_sdks_own_invalid_argument_error_is_not_a_broker_answer() -> None:
    error = InvalidArgumentError("bad topic")
    assert not isinstance(error, BrokerError)
    assert not isinstance(error, MessageIllegalError)
    assert issubclass(MessageTooLargeError, InvalidArgumentError)
