"""The TOML config file: every value is converted to its setting's type at start-up, and an
unknown name, a wrong type or an unknown value stops the broker with a clear error (a typo must
never silently mean the default, as ``recovery = "strict"`` once did)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from pocketmq.cli.serve import build_config
from pocketmq.server import AppConfig
from pocketmq.store import FlushMode, RecoveryMode


def _load(tmp_path: Path, text: str) -> AppConfig:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return build_config(path)


def test_enum_settings_become_enums(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        '[store]\nrecovery = "quarantine"\nflush_mode = "sync"\n'
        "[broker]\ndelay_levels = [1, 2.5]\n[server]\ngrpc_port = 0\n",
    )
    store = config.broker.store
    assert store.recovery is RecoveryMode.QUARANTINE
    assert store.flush_mode is FlushMode.SYNC
    assert config.broker.delay_levels == (1.0, 2.5)
    assert config.grpc.port == 0
    assert _load(tmp_path, '[store]\nrecovery = "strict"\n').broker.store.recovery is (
        RecoveryMode.STRICT
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('[store]\nrecovery = "strcit"\n', "strcit"),
        ('[store]\nrecovery = "truncate"\n', "truncate"),
        ('[store]\nflush_mode = "fast"\n', "fast"),
        ('[store]\nrecovery_mode = "strict"\n', "recovery_mode"),
        ('[store]\nsegment_size = "big"\n', "segment_size"),
        ("[store]\nflush_interval = nan\n", "flush_interval"),
        ("[store]\nsync_flush_timeout = -1.0\n", "sync_flush_timeout"),
        ("[broker]\nmax_delay = inf\n", "max_delay"),
        ("[broker]\ndelay_levels = [1, 0]\n", "delay_levels"),
        ('[broker]\ndelay_levels = [1, "x"]\n', "delay_levels"),
        ("[server]\nport = 1.5\n", "port"),
        ("[broker]\nmax_long_poll = -5\n", "max_long_poll"),
        ("[broker]\nmax_batch_messages = -1\n", "max_batch_messages"),
        ("[server]\ncontroller_lease = 1\n", "controller_lease"),
        ("[server]\nidle_timeout = -2\n", "idle_timeout"),
        ('[server]\ntls_cert = "only.pem"\n', "tls_key"),
        ("[server]\nregister_interval = 0\n", "register_interval"),
        ("[server]\nregister_interval = -1.0\n", "register_interval"),
        ("[server]\nha_idle_timeout = -1\n", "ha_idle_timeout"),
        ("[server]\nport = 70000\n", "port"),
        ('[server]\nmaster = "no-port"\n', "master"),
        ('[server]\nhttp_port = "5557"\n', "http_port"),
        ("[server]\nauthorization = true\n", "authorization needs authentication"),
        ("[storage]\nx = 1\n", "storage"),
    ],
)
def test_a_bad_setting_is_an_error_at_start_up(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(click.UsageError, match=words):
        _load(tmp_path, text)


def test_serve_refuses_a_bad_config_file_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text('[store]\nrecovery = "strcit"\n')
    done = subprocess.run(
        [sys.executable, "-m", "pocketmq", "serve", "--config", str(path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "strcit" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_network_address_without_authentication_is_refused_unless_insecure(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-m", "pocketmq", "serve", "--host", "0.0.0.0", "--port", "0",
               "--no-grpc", "--no-http", "--namesrv-port", "0",
               "--data-dir", str(tmp_path / "d")]  # fmt: skip
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2
    assert "--authentication" in refused.stderr
    assert "--insecure" in refused.stderr
    assert not (tmp_path / "d").exists()  # refused before anything was created
    config = _load(tmp_path, '[server]\nhost = "0.0.0.0"\ninsecure = true\n')
    assert (config.listen.host, config.auth.insecure) == ("0.0.0.0", True)


def test_insecure_starts_on_a_network_address(tmp_path: Path) -> None:
    from pocketmq.client.sync import SyncAdmin
    from pocketmq.testing import BrokerProcess

    with BrokerProcess(tmp_path / "b", grpc_port=None,
                       extra_args=("--host", "0.0.0.0", "--insecure")) as broker:  # fmt: skip
        port = broker.address.rsplit(":", 1)[1]
        with SyncAdmin(servers=f"127.0.0.1:{port}") as admin:  # it serves every address
            admin.create_topic("reachable", queues=1)
            assert "reachable" in [t.name for t in admin.list_topics()]


def test_a_tls_key_on_the_command_line_completes_the_files_certificate(tmp_path: Path) -> None:
    """The file's [server] settings and the options are checked together, once."""
    path = tmp_path / "broker.toml"
    path.write_text(f'[server]\ntls_cert = "{tmp_path / "missing.pem"}"\n')
    with pytest.raises(click.UsageError, match="cannot load the TLS certificate"):
        build_config(path, server={"tls_key": str(tmp_path / "missing.key")})
