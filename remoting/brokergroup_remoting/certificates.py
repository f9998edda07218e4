"""A CA and the certificates it signs, for TLS on brokergroup's ports (issue 36).

`local up` makes one CA per runtime and a certificate per server; the operator one cluster
CA per release (as Strimzi's cluster CA). The keys are ECDSA P-256 (small and fast to make:
a handshake costs less CPU than with RSA 2048), the certificates X.509 v3 with the
extensions a verifying client checks: a CA certificate with basicConstraints CA:true and
keyCertSign; a leaf with subjectAltName (DNS names and IP addresses: the host names and
addresses clients dial), serverAuth and clientAuth (one certificate serves a broker's port
and its mutual-TLS links to the controller and to its master).

Needs the `cryptography` package (the controller extra already has it, for pysyncobj's
encrypted Raft); only what makes certificates imports this module.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def write(self, cert_file: Path, key_file: Path) -> None:
        """Write both, the key readable by its owner only (written before it is opened to
        anyone: the file is created 0600)."""
        cert_file.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(cert_file, self.cert_pem, 0o644)
        _write_atomically(key_file, self.key_pem, 0o600)


def make_ca(common_name: str, *, now: datetime.datetime, valid_days: int = 3650) -> Issued:
    """A self-signed CA valid from `now` (minus a minute of clock skew) for `valid_days`."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (
        _validity(x509.CertificateBuilder(), now, valid_days)
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_ca_usage(), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return Issued(_pem(builder.sign(key, hashes.SHA256())), _key_pem(key))


def issue(
    ca: Issued,
    common_name: str,
    names: list[str],
    *,
    now: datetime.datetime,
    valid_days: int = 365,
) -> Issued:
    """A leaf certificate signed by `ca` for `names` (DNS names or IP addresses), usable as
    a server's and as a client's (mutual TLS)."""
    if not names:
        raise ValueError("a certificate needs at least one name (subjectAltName)")
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an EC key made by make_ca")
    ca_cert = ca.certificate
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _validity(x509.CertificateBuilder(), now, valid_days)
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]), False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    return Issued(_pem(builder.sign(ca_key, hashes.SHA256())), _key_pem(key))


def not_after(cert_pem: bytes) -> datetime.datetime:
    """When the certificate expires (UTC): what renewal and `kubectl brokergroup` read."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def names_of(cert_pem: bytes) -> list[str]:
    """The subjectAltName entries (DNS names and IP addresses), in the certificate's order."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(name.value) for name in names]


def _validity(
    builder: x509.CertificateBuilder, now: datetime.datetime, valid_days: int
) -> x509.CertificateBuilder:
    if valid_days < 1:
        raise ValueError("valid_days must be >= 1")
    start = now - datetime.timedelta(minutes=1)
    return builder.not_valid_before(start).not_valid_after(
        now + datetime.timedelta(days=valid_days)
    )


def _ca_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
