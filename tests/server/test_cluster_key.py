"""The cluster key (server/auth/cluster.py) and the handshake's proofs (protocol/auth.py)."""

from __future__ import annotations

import os
import stat

import pytest

from pocketmq.errors import InvalidArgumentError
from pocketmq.protocol.auth import client_proof, normalize_address, server_proof
from pocketmq.server.auth.cluster import create_cluster_key, load_cluster_key


def test_a_new_key_is_private_from_its_first_byte_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        key = create_cluster_key(tmp_path / "cluster.key")
    finally:
        os.umask(old)
    mode = stat.S_IMODE(os.stat(tmp_path / "cluster.key").st_mode)
    assert mode == 0o600
    assert load_cluster_key(tmp_path / "cluster.key") == key
    assert len(key.current) == 64
    assert key.current not in repr(key)


def test_an_existing_key_is_never_overwritten(tmp_path):
    first = create_cluster_key(tmp_path / "k")
    with pytest.raises(InvalidArgumentError, match="exists already"):
        create_cluster_key(tmp_path / "k")
    assert create_cluster_key(tmp_path / "k", exist_ok=True) == first


def test_a_rotation_signs_with_the_new_secret_and_still_accepts_the_old(tmp_path):
    old = create_cluster_key(tmp_path / "k")
    new = create_cluster_key(tmp_path / "k", keep=old.secrets)
    assert new.current != old.current
    assert new.secrets[1:] == old.secrets
    assert load_cluster_key(tmp_path / "k") == new


@pytest.mark.parametrize(
    ("content", "mode", "reason"),
    [
        (None, 0o600, "does not exist"),
        ("a" * 64 + "\n", 0o640, "readable by others"),
        ("a" * 64 + "\n", 0o604, "readable by others"),
        ("not hex\n", 0o600, "malformed"),
        ("", 0o600, "malformed"),
        ("a" * 63 + "\n", 0o600, "malformed"),
    ],
)
def test_a_bad_key_file_is_refused_with_the_reason(tmp_path, content, mode, reason):
    path = tmp_path / "k"
    if content is not None:
        path.write_text(content)
        os.chmod(path, mode)
    with pytest.raises(InvalidArgumentError, match=reason):
        load_cluster_key(path)


def test_proofs_bind_every_part_of_the_connection_and_each_side():
    parts = ("secret", "challenge", "nonce", "client-1", "broker-a", "127.0.0.1:10911")
    base = client_proof(*parts)
    assert base == client_proof(*parts)
    assert server_proof(*parts) != base  # a client's proof is never a server's
    for index in range(len(parts)):
        changed = list(parts)
        changed[index] += "x"
        assert client_proof(*changed) != base, parts[index]


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("127.0.0.1", 1, "127.0.0.1:1"),
        ("::ffff:127.0.0.1", 2, "127.0.0.1:2"),
        ("::1", 3, "[::1]:3"),
        ("[0:0::1]", 4, "[::1]:4"),
        ("fe80::1%eth0", 5, "[fe80::1]:5"),
        ("Broker.Example", 6, "broker.example:6"),
    ],
)
def test_both_ends_spell_an_address_the_same_way(host, port, expected):
    assert normalize_address(host, port) == expected
