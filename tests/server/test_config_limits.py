"""The ``[server]`` connection settings are checked when ``pocketmq serve`` reads its config:
a value that cannot work stops the start with a usage error naming it."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from pocketmq.cli.serve import build_config
from pocketmq.server import AppConfig
from pocketmq.testing import write_config


def _build(path: Path) -> AppConfig:
    return build_config(path)


@pytest.mark.parametrize(
    ("sections", "named"),
    [
        ({"server": {"max_connections": 0}}, "max_connections"),
        ({"server": {"hello_timeout": -1.0}}, "hello_timeout"),
        ({"server": {"idle_timeout": 0.0}}, "idle_timeout"),
        ({"server": {"max_buffered_bytes": 1024}}, "max_buffered_bytes"),
        ({"server": {"max_frame_before_hello": 10}}, "max_frame_before_hello"),
        ({"store": {"max_message_size": 16 * 1024 * 1024}}, "max_message_size"),
        ({"server": {"http_max_connections": 0}}, "http_max_connections"),
        ({"server": {"http_header_timeout": 0.0}}, "http_header_timeout"),
        ({"server": {"http_body_timeout": -1.0}}, "http_body_timeout"),
        ({"server": {"http_session_hours": 0.0}}, "http_session_hours"),
        ({"server": {"http_hosts": "broker.example"}}, "http_hosts"),
        ({"server": {"history_interval": 30.0}}, "history_interval"),
        ({"server": {"history_interval": -1.0}}, "history_interval"),
        ({"server": {"history_max_series": 5}}, "history_max_series"),
    ],
)
def test_unworkable_limits_refuse_to_start(
    tmp_path: Path, sections: dict[str, dict[str, object]], named: str
) -> None:
    with pytest.raises(click.UsageError, match=named):
        _build(write_config(tmp_path / "broker.toml", sections))


def test_the_defaults_and_custom_limits_are_taken(tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "broker.toml", {"server": {"max_connections": 10, "idle_timeout": 30.0}}
    )
    limits = _build(path).limits
    assert (limits.max_connections, limits.idle_timeout) == (10, 30.0)
    assert limits.hello_timeout == 10.0
    assert limits.max_buffered_bytes == 128 * 1024 * 1024


def test_the_http_port_answers_to_its_configured_names(tmp_path: Path) -> None:
    sections = {"server": {"http_hosts": ["Broker.Example.", "dash.example"], "host": "10.1.2.3",
                           "http_max_connections": 40}}  # fmt: skip
    settings = _build(write_config(tmp_path / "broker.toml", sections)).http_settings()
    assert settings.hosts.allows("broker.example:5557")
    assert settings.hosts.allows("10.1.2.3")
    assert not settings.hosts.allows("localhost:5557")  # not bound to loopback
    assert not settings.hosts.allows("10.1.2.4")
    assert (settings.max_connections, settings.max_per_address) == (40, 10)
    assert settings.session_seconds == 12 * 3600
