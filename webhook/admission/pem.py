"""What is wrong with the serving certificate's files, in words that name the file: ssl's own error
("[SSL] PEM lib") names neither. Looked into only once ssl has refused them (or one is missing)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..stores.documents import file_problem

CERTIFICATE, KEY, CLIENT_CA = "certificate", "key", "client CA"
# A PEM key's label ends "PRIVATE KEY" (PKCS #8 and its ENCRYPTED form, RFC 7468; RSA and EC, OpenSSL's).
_CERT_PEM, _KEY_PEM = b"-----BEGIN CERTIFICATE-----", b"PRIVATE KEY" + b"-" * 5


class BadFile(ValueError):
    """One of the files, and what is wrong with it; `role`: CERTIFICATE, KEY or CLIENT_CA."""

    def __init__(self, role: str, path: str | Path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.role, self.path, self.problem = role, str(path), problem


def read(role: str, path: str | Path) -> bytes:
    """The file's bytes; BadFile when it is missing, a directory or unreadable."""
    try:
        return Path(path).read_bytes()
    except (IsADirectoryError, FileNotFoundError) as exc:
        raise BadFile(role, path, file_problem(exc)) from None
    except OSError as exc:
        raise BadFile(role, path, f"cannot be read: {exc.strerror or exc}") from None


def certificates(role: str, path: str | Path, data: bytes) -> list[Any]:
    """The PEM certificates in `data`; BadFile saying what the file holds instead."""
    from cryptography import x509

    if _CERT_PEM not in data:
        raise BadFile(role, path, "a private key, not a certificate" if _KEY_PEM in data
                      else f"not a PEM certificate (no {_CERT_PEM.decode()} in it)")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        raise BadFile(role, path, "a PEM certificate that does not parse") from None


def diagnose(cert_file: str | Path, key_file: str | Path, client_ca_file: str | Path | None = None) -> None:
    """Raise BadFile for the first thing wrong with the files; return when none is found."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_private_key

    cert_data, key_data = read(CERTIFICATE, cert_file), read(KEY, key_file)
    ca_data = read(CLIENT_CA, client_ca_file) if client_ca_file else None
    if _CERT_PEM not in cert_data and _KEY_PEM in cert_data and _CERT_PEM in key_data:
        raise BadFile(CERTIFICATE, cert_file, f"a private key, and {key_file} a certificate: the certificate and "
                                              f"key files are swapped")
    leaf = certificates(CERTIFICATE, cert_file, cert_data)[0]
    if _KEY_PEM not in key_data:
        raise BadFile(KEY, key_file, "a certificate, not a private key" if _CERT_PEM in key_data
                      else "not a PEM private key (no BEGIN … PRIVATE KEY block in it)")
    try:
        key = load_pem_private_key(key_data, password=None)
    except TypeError:
        raise BadFile(KEY, key_file, "an encrypted private key: the webhook reads it unencrypted") from None
    except (ValueError, UnsupportedAlgorithm):
        raise BadFile(KEY, key_file, "a PEM private key that does not parse") from None
    public = (leaf.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo),
              key.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo))
    if public[0] != public[1]:
        raise BadFile(KEY, key_file, f"not the private key of the certificate in {cert_file}")
    if ca_data is not None and client_ca_file is not None:
        certificates(CLIENT_CA, client_ca_file, ca_data)
