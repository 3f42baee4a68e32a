"""``AppConfig`` checks itself at construction, the same way for Python as for the TOML file
(docs/operations.md, "Configuration")."""

from __future__ import annotations

import pytest

from pocketmq.broker import BrokerConfig
from pocketmq.errors import InvalidArgumentError
from pocketmq.server import AppConfig


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"idle_timeout": -1}, "idle_timeout"),
        ({"http_max_connections": -3}, "http_max_connections"),
        ({"grpc_worker_silence": float("nan")}, "grpc_worker_silence"),
        ({"controller_lease": 1}, "controller_lease"),
        ({"tls_cert": "cert.pem"}, "tls_key"),
        ({"grpc_tls": "sometimes"}, "grpc_tls"),
        ({"ha_max_connections": 0}, "ha_max_connections"),
        ({"reachable_at": ("no-port",)}, "no-port"),
    ],
)
def test_a_bad_setting_is_refused_at_construction(settings: dict[str, object], words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        AppConfig(**settings)  # type: ignore[arg-type]


def test_the_defaults_are_valid() -> None:
    assert AppConfig().connection_limits().max_connections > 0


@pytest.mark.parametrize("value", [-5, -5.0, float("inf")])
def test_broker_config_refuses_a_negative_number_whether_int_or_float(value: float) -> None:
    with pytest.raises(ValueError, match="max_long_poll"):
        BrokerConfig(max_long_poll=value)
    with pytest.raises(ValueError, match="consumer_expiry"):
        BrokerConfig(consumer_expiry=value)
