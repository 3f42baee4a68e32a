"""``AppConfig`` and its sections check themselves at construction, the same way for Python as for
the TOML file's flat ``[server]`` table (docs/design.md, "Configuration")."""

from __future__ import annotations

from typing import Any

import pytest

from pocketmq.broker import BrokerConfig
from pocketmq.errors import InvalidArgumentError
from pocketmq.server import AppConfig
from pocketmq.server.app_config import _SECTIONS
from pocketmq.server.native.limits import ConnectionLimits
from pocketmq.server.sections import Controller, Grpc, Ha, Http, Listen, Namesrv, server_keys

# the [server] keys users write (docs/*.md): the sections must not rename any of them
SERVER_KEYS = {
    *("host", "port", "advertise_host", "grpc_port", "grpc_workers", "grpc_worker_silence"),
    *("grpc_auto_renew_invisible", "grpc_tls", "namesrv_port", "namesrv", "namesrv_tls"),
    *("register_interval", "max_registered_brokers", "max_connections", "hello_timeout"),
    *("max_frame_before_hello", "idle_timeout", "max_buffered_bytes", "max_pending_connections"),
    *("ha_port", "master", "ha_mutual_tls", "ha_max_connections", "ha_handshake_timeout"),
    *("ha_idle_timeout", "http_port", "http_hosts", "http_max_connections"),
    *("http_header_timeout", "http_body_timeout", "http_session_hours", "history_interval"),
    *("history_max_series", "tls_cert", "tls_key", "tls_ca", "authentication", "authorization"),
    *("insecure", "cluster_key", "reachable_at", "auth_failure_burst", "auth_failure_rate"),
    *("controller", "controller_lease", "controller_margin", "controller_claim_delay"),
}


def test_the_sections_keep_every_server_key_of_the_file() -> None:
    keys = [key for section in _SECTIONS.values() for key in server_keys(section).values()]
    assert len(keys) == len(set(keys))  # no key in two sections
    assert set(keys) == SERVER_KEYS


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
        ({"reachable_at": ["no-port"]}, "no-port"),
        ({"authorization": True}, "authorization needs authentication"),
        ({"ha_mutual_tls": True, "tls_cert": "c.pem", "tls_key": "k.pem"}, "tls_ca"),
        ({"controller": "http://etcd:2379"}, "etcd://"),
        ({"http_port": "5557"}, "http_port"),  # a type error names the key too
        ({"colour": "blue"}, r"unknown setting \[server\] colour"),
    ],
)
def test_a_bad_server_table_is_refused_naming_the_key(settings: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        AppConfig.from_table(settings)


# each of these slipped through before the sections (a spinning loop, a port no socket takes,
# an address that failed only when first dialled); each is refused as an int and as a float
@pytest.mark.parametrize(
    ("key", "build"),
    [
        ("register_interval", lambda v: Namesrv(register_interval=v)),
        ("grpc_worker_silence", lambda v: Grpc(worker_silence=v)),
        ("grpc_auto_renew_invisible", lambda v: Grpc(auto_renew_invisible=v)),
        ("ha_idle_timeout", lambda v: Ha(idle_timeout=v)),
        ("controller_claim_delay", lambda v: Controller(claim_delay=v)),
    ],
)
@pytest.mark.parametrize("value", [0, 0.0, -5, -5.0, float("inf")])
def test_a_duration_that_never_waits_is_refused_in_python_and_in_the_file(
    key: str, build: Any, value: float
) -> None:
    with pytest.raises(InvalidArgumentError, match=key):
        build(value)
    with pytest.raises(InvalidArgumentError, match=key):
        AppConfig.from_table({key: value})


@pytest.mark.parametrize(
    ("key", "build"),
    [
        ("port", lambda v: Listen(port=v)),
        ("grpc_port", lambda v: Grpc(port=v)),
        ("http_port", lambda v: Http(port=v)),
        ("ha_port", lambda v: Ha(port=v)),
        ("namesrv_port", lambda v: Namesrv(port=v)),
    ],
)
@pytest.mark.parametrize("value", [-1, 65536])
def test_a_port_out_of_range_is_refused(key: str, build: Any, value: int) -> None:
    with pytest.raises(InvalidArgumentError, match=key):
        build(value)
    with pytest.raises(InvalidArgumentError, match=key):
        AppConfig.from_table({key: value})


@pytest.mark.parametrize("key", ["master", "namesrv"])
def test_an_address_without_a_port_is_refused(key: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{key} 'broker-host' is not host:port"):
        AppConfig.from_table({key: "broker-host"})


def test_the_file_and_python_build_the_same_config() -> None:
    table = {"host": "10.0.0.1", "ha_port": 30000, "master": "10.0.0.2:30000",
             "http_hosts": ["dash.example"], "max_connections": 64}  # fmt: skip
    python = AppConfig(
        listen=Listen(host="10.0.0.1"),
        ha=Ha(port=30000, master="10.0.0.2:30000"),
        http=Http(hosts=("dash.example",)),
        limits=ConnectionLimits(max_connections=64),
    )
    assert AppConfig.from_table(table) == python


def test_the_defaults_are_valid() -> None:
    assert AppConfig().limits.max_connections > 0
    assert AppConfig.from_table({}) == AppConfig()


@pytest.mark.parametrize("value", [-5, -5.0, float("inf")])
def test_broker_config_refuses_a_negative_number_whether_int_or_float(value: float) -> None:
    with pytest.raises(ValueError, match="max_long_poll"):
        BrokerConfig(max_long_poll=value)
    with pytest.raises(ValueError, match="consumer_expiry"):
        BrokerConfig(consumer_expiry=value)
