"""Files an attacker with a shell on the broker's machine must not read (docs/security.md,
"Files"): every secret is created 0600 — never readable by others for a moment, whatever the
umask — the data directory and its ``config/`` are 0700, store files 0600, and a TLS key that
others may read is named at start-up."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from pocketmq.cli.serve import warn_if_key_is_readable
from pocketmq.server.auth.acl import AclStore, make_rule
from pocketmq.server.auth.certificates import self_signed
from pocketmq.server.auth.users import UserStore
from pocketmq.server.http.dashboard.guard import load_token
from pocketmq.testing import BrokerProcess


def _mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask_zero() -> Iterator[None]:
    """The most permissive umask: a file must get its mode from the code, not from the umask
    (children spawned meanwhile inherit it)."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every write and rename checks the file's mode at that instant (what a concurrent reader
    would find): a byte written into, or a file renamed into place with, group or other access,
    or a directory that others may enter, is recorded."""
    seen: list[str] = []
    real_pwrite, real_write, real_replace = os.pwrite, os.write, os.replace

    def check(what: str, mode: int) -> None:
        if mode & 0o077:
            seen.append(f"{what} mode {mode:o}")

    def pwrite(fd: int, data: Any, offset: int) -> int:
        check(f"write to fd {fd}", stat.S_IMODE(os.fstat(fd).st_mode))
        return real_pwrite(fd, data, offset)

    def write(fd: int, data: Any) -> int:
        if fd > 2:
            check(f"write to fd {fd}", stat.S_IMODE(os.fstat(fd).st_mode))
        return real_write(fd, data)

    def replace(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        check(f"rename to {target}", _mode(source))
        check(f"directory of {target}", _mode(os.path.dirname(os.fspath(target))))
        real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "replace", replace)
    return seen


SECRET_WRITERS: dict[str, Callable[[Path], Any]] = {
    "users.key and users.json": lambda d: UserStore(d).create("alice", "alices-secret"),
    "acl.json": lambda d: AclStore(d).grant(make_rule("alice", "Topic:o", ["Pub"], allow=True)),
    "self-signed.key": lambda d: self_signed(d, ["127.0.0.1"]),
    "http.token": lambda d: load_token(str(d)),
}


@pytest.mark.parametrize("writer", SECRET_WRITERS, ids=list(SECRET_WRITERS))
def test_secrets_are_never_readable_by_others_even_for_an_instant(
    writer: str, tmp_path: Path, umask_zero: None, watched: list[str]
) -> None:
    config = tmp_path / "data" / "config"  # neither exists yet: created by the writer
    SECRET_WRITERS[writer](config)
    assert watched == []
    written = [p for p in config.rglob("*") if p.is_file()]
    assert written
    assert {p.name: _mode(p) for p in written} == {p.name: 0o600 for p in written}
    assert _mode(config) == 0o700


def test_a_leftover_temporary_file_of_a_crash_does_not_lend_its_mode(
    tmp_path: Path, watched: list[str]
) -> None:
    config = tmp_path / "config"
    config.mkdir(mode=0o700)
    leftover = config / "users.key.tmp"
    leftover.write_bytes(b"half a key")
    leftover.chmod(0o644)
    UserStore(config).create("alice", "alices-secret")
    assert watched == []
    assert _mode(config / "users.key") == 0o600


def test_a_broker_keeps_its_data_directory_private_and_names_a_readable_tls_key(
    tmp_path: Path, umask_zero: None
) -> None:
    authority = trustme.CA()
    server = authority.issue_cert("127.0.0.1", "localhost")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    server.private_key_pem.write_to_path(str(key))
    key.chmod(0o640)
    for blob in server.cert_chain_pems:
        blob.write_to_path(str(cert), append=True)
    data = tmp_path / "b" / "data"
    data.mkdir(parents=True, mode=0o755)
    data.chmod(0o755)  # as an older release left it
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    with BrokerProcess(tmp_path / "b", grpc_port=None, http_port=0, extra_args=tls) as broker:
        users = [sys.executable, "-m", "pocketmq", "user", "create", "alice", "--secret", "s3",
                 "--data-dir", str(data)]  # fmt: skip
        subprocess.run(users, check=True, capture_output=True, timeout=60)
        log = broker.log()
    warnings = [line for line in log.splitlines() if "TLS key" in line]
    assert len(warnings) == 1, log
    assert "WARNING" in warnings[0]
    assert f"{key} is readable by its group (mode 640): chmod 600 it" in warnings[0]
    assert "narrowed to 700" in log
    assert _mode(data) == 0o700
    assert _mode(data / "config") == 0o700
    store_files = [p for p in (data / "store").rglob("*") if p.is_file()]
    assert store_files
    wider = {str(p.relative_to(data)): oct(_mode(p)) for p in store_files if _mode(p) & 0o077}
    assert wider == {}
    config = {p.name: _mode(p) for p in (data / "config").iterdir() if p.is_file()}
    assert {"http.token", "users.key", "users.json"} <= set(config)
    assert config == dict.fromkeys(config, 0o600)


@pytest.mark.parametrize(
    ("mode", "said"),
    [(0o600, None), (0o400, None), (0o640, "its group"), (0o644, "other users"),
     (0o606, "other users")],
)  # fmt: skip
def test_a_tls_key_others_may_read_is_named_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, said: str | None
) -> None:
    key = tmp_path / "key.pem"
    key.write_text("not really a key")
    key.chmod(mode)
    with caplog.at_level(logging.WARNING):
        warn_if_key_is_readable(str(key))
        warn_if_key_is_readable(None)
        warn_if_key_is_readable(str(tmp_path / "missing.pem"))  # loading it says why
    lines = [r.getMessage() for r in caplog.records]
    if said is None:
        assert lines == []
    else:
        assert lines == [f"the TLS key {key} is readable by {said} (mode {mode:o}): chmod 600 it"]
