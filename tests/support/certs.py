"""Throw-away PKI for mTLS tests: a CA, and leaf certificates it signs, written as PEM files.

Keys are EC P-256 (fast to make); certificates last one day and name ``127.0.0.1`` and
``localhost`` so a client dialling either verifies the server.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Authority", "Leaf", "make_authority"]


@dataclass(frozen=True, kw_only=True)
class Leaf:
    cert: Path
    key: Path


@dataclass(frozen=True, kw_only=True)
class Authority:
    cert: Path
    _key: ec.EllipticCurvePrivateKey
    _name: x509.Name
    _dir: Path

    def issue(self, name: str, *, server: bool) -> Leaf:
        """A certificate for ``name`` (a server's or a client's), signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            _base(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]), key)
            .issuer_name(self._name)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.DNSName(name),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
        )
        cert = builder.sign(self._key, hashes.SHA256())
        return Leaf(
            cert=_write_cert(self._dir / f"{name}.crt", cert),
            key=_write_key(self._dir / f"{name}.key", key),
        )


def make_authority(directory: Path, *, name: str = "test-ca") -> Authority:
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _base(subject, key)
        .issuer_name(subject)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(
        cert=_write_cert(directory / f"{name}.crt", cert), _key=key, _name=subject, _dir=directory
    )


def _base(subject: x509.Name, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path
