"""Certificates made for a test: a CA, a server certificate for 127.0.0.1 and localhost, and
a client certificate, all signed by the CA, as PEM files in a folder."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_certificate: Path
    server_key: Path
    client_certificate: Path
    client_key: Path
    client_key_password: str
    """`client_key` is encrypted with it."""
    client_bundle: Path
    """The client's key (unencrypted) and certificate in one file: a PEM key store."""


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "coordinator tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = serialization.NoEncryption()
    if password is not None:
        encryption = serialization.BestAvailableEncryption(password.encode())
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def make_certificates(folder: Path) -> Certificates:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("test CA")
    ca = _certificate("test CA", ca_key, ca_name, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate(
        "localhost",
        server_key,
        ca_name,
        ca_key,
        sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate("alice", client_key, ca_name, ca_key)
    password = "key-secret-1"
    files = {
        "ca.pem": _pem(ca),
        "server.pem": _pem(server),
        "server.key": _key_pem(server_key),
        "client.pem": _pem(client),
        "client.key": _key_pem(client_key, password),
        "client-bundle.pem": _key_pem(client_key) + _pem(client),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return Certificates(
        ca=folder / "ca.pem",
        server_certificate=folder / "server.pem",
        server_key=folder / "server.key",
        client_certificate=folder / "client.pem",
        client_key=folder / "client.key",
        client_key_password=password,
        client_bundle=folder / "client-bundle.pem",
    )
