"""Serving certificates for the webhook: a private CA and a server certificate it signs."""
from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclasses.dataclass(frozen=True)
class Bundle:
    ca_cert: bytes  # PEM
    cert: bytes  # PEM
    key: bytes  # PEM (PKCS#8, unencrypted)


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names the apiserver may use for a Service-backed webhook."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _san(names: Iterable[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _certificate(subject: str, issuer: x509.Name, key: ec.EllipticCurvePublicKey, now: datetime.datetime,
                 days: int) -> x509.CertificateBuilder:
    """A certificate valid from 5 minutes before `now` (a little clock skew tolerated) for `days`."""
    return (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer).public_key(key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days)))


def generate(names: list[str], days: int = 365, ca_name: str = "kubevirt-colocate-ca") -> Bundle:
    """A fresh ECDSA P-256 CA and a serverAuth certificate for `names` (DNS names or IPs)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_cert = (
        _certificate(ca_name, ca_subject, ca_key.public_key(), now, days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        _certificate(names[0], ca_subject, key.public_key(), now, days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_san(names), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return Bundle(ca_cert=ca_cert.public_bytes(pem), cert=cert.public_bytes(pem),
                  key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))


def write(bundle: Bundle, out: str | Path) -> Path:
    """Write ca.crt, tls.crt and tls.key (mode 0600) into `out`; each file replaced atomically."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, data, mode in (("ca.crt", bundle.ca_cert, 0o644), ("tls.key", bundle.key, 0o600), ("tls.crt", bundle.cert, 0o644)):
        tmp = out / f".{name}.tmp"
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, out / name)
    return out
