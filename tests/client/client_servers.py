"""Servers for client tests: a real `coordinator-server serve` process (SQLite log), and a
throwaway TLS certificate for it."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from server_process import ServerProcess, sqlite_args

# Quick groups: short sessions allowed, no wait for more members before the first
# generation.
FAST_GROUPS = (
    "--group-min-session-timeout-ms",
    "500",
    "--group-initial-rebalance-delay-ms",
    "0",
)


@contextmanager
def sqlite_server(data_dir: Path, *extra: str) -> Iterator[ServerProcess]:
    with ServerProcess(sqlite_args(data_dir, *FAST_GROUPS, *extra)) as server:
        yield server


def write_self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for "localhost" and 127.0.0.1 and its key, as PEM files (the
    `cryptography` package is a dev dependency)."""
    return _cryptography_certificate(directory)


def _cryptography_certificate(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "server.pem"
    key_path = directory / "server.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
