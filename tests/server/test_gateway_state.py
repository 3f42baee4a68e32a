"""A gateway connection flooding the broker with relayed client ids (server/native/
gateway_state.py): silent ones are forgotten, and past the limit new ones are refused."""

from __future__ import annotations

import pytest

from pocketmq.errors import TooManyRequestsError
from pocketmq.server.native import gateway_state
from pocketmq.server.native.gateway_state import RelayedClient, count_relayed, remember


def _client(seen: float) -> RelayedClient:
    return RelayedClient("grpc", "java", producer=True, consumer=False, seen=seen)


def test_a_flood_of_client_ids_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway_state, "RELAYED_LIMIT", 600)
    relayed: dict[str, RelayedClient] = {}
    for number in range(255):  # clients that went silent long ago
        remember(relayed, f"old-{number}", _client(seen=-1000.0))
    for number in range(400):  # the 256th new id sweeps the silent ones out
        remember(relayed, f"live-{number}", _client(seen=1e12))
    assert not any(key.startswith("old-") for key in relayed)
    assert len(relayed) == 400
    for number in range(400, 600):
        remember(relayed, f"live-{number}", _client(seen=1e12))
    with pytest.raises(TooManyRequestsError):
        remember(relayed, "one-too-many", _client(seen=1e12))
    remember(relayed, "live-7", _client(seen=1e12))  # a known client's heartbeat still counts
    assert len(relayed) == 600


def test_only_clients_heard_of_lately_are_counted() -> None:
    producers: dict[tuple[str, str], int] = {}
    consumers: dict[tuple[str, str], int] = {}
    count_relayed([_client(seen=-1000.0), _client(seen=1e12)], producers, consumers)
    assert (producers, consumers) == ({("grpc", "java"): 1}, {})
