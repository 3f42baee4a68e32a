"""A self-signed certificate for TLS out of the box (docs/security.md, "TLS"): generated into
``config/tls/`` of the data directory on first need and reused after, so a broker asked for TLS
without ``--tls-cert`` still serves it. The official Java, Go and C# clients enable TLS by
default without verifying the server, which is what this serves; clients that verify need
this certificate as their CA (or a real one via ``--tls-cert``)."""

from __future__ import annotations

import datetime
import ipaddress
import logging
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pocketmq.broker.persist import write_files

__all__ = ["self_signed"]

log = logging.getLogger("pocketmq.server")


def _names(hosts: list[str]) -> list[x509.GeneralName]:
    found: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for host in ["127.0.0.1", "::1", *hosts]:
        if not host or host in ("0.0.0.0", "::"):
            continue
        try:
            entry: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            entry = x509.DNSName(host)
        if entry not in found:
            found.append(entry)
    return found


def _usable(cert_path: Path, key_path: Path) -> bool:
    """Whether the pair reads back as a certificate and the private key of its public key."""
    try:
        certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return False
    return certificate.public_key().public_numbers() == key.public_key().public_numbers()  # type: ignore[union-attr]


def self_signed(config_dir: str | Path, hosts: list[str]) -> tuple[str, str]:
    """Paths of ``(certificate, key)`` in ``config_dir/tls``, made on first call (an EC P-256
    key, valid ten years, for localhost, the loopback addresses and ``hosts``)."""
    directory = Path(config_dir) / "tls"
    cert_path, key_path = directory / "self-signed.crt", directory / "self-signed.key"
    if cert_path.exists() and key_path.exists():
        if _usable(cert_path, key_path):
            return str(cert_path), str(key_path)
        # generated files of ours, not an operator's: damaged ones are made again
        log.warning("%s or its key is damaged; generating a new self-signed pair", cert_path)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pocketmq self-signed")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    write_files([(str(key_path), key_pem)])  # 0600 from its creation, in a 0700 directory
    write_files([(str(cert_path), certificate.public_bytes(serialization.Encoding.PEM))])
    return str(cert_path), str(key_path)
