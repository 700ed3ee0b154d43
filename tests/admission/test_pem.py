"""A serving certificate's files that ssl refuses are named with what is wrong with them: each
kind of wrong file an admin puts in a Secret by mistake, and the pair that is right."""
import pytest

from webhook.admission import pem, tls
from webhook.tools import certs

NAMES = ["webhook.ns.svc"]


@pytest.fixture
def files(tmp_path):
    bundle = certs.generate(NAMES)
    for name, data in (("tls.crt", bundle.cert), ("tls.key", bundle.key), ("ca.crt", bundle.ca_cert),
                       ("other.key", certs.generate(NAMES).key), ("text", b"hello\n"),
                       ("broken.crt", b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")):
        (tmp_path / name).write_bytes(data)
    (tmp_path / "dir").mkdir()
    return tmp_path


CASES = {  # cert, key, client CA: the file named, what is said of it
    "swapped": ("tls.key", "tls.crt", None, "tls.key", "the certificate and key files are swapped"),
    "text for the certificate": ("text", "tls.key", None, "text", "not a PEM certificate"),
    "a broken certificate": ("broken.crt", "tls.key", None, "broken.crt", "does not parse"),
    "a certificate for the key": ("tls.crt", "ca.crt", None, "ca.crt", "a certificate, not a private key"),
    "text for the key": ("tls.crt", "text", None, "text", "not a PEM private key"),
    "another key": ("tls.crt", "other.key", None, "other.key", "not the private key of the certificate"),
    "a missing certificate": ("nosuch.crt", "tls.key", None, "nosuch.crt", "no such file"),
    "a directory for the key": ("tls.crt", "dir", None, "dir", "a directory, not a file"),
    "a key for the client CA": ("tls.crt", "tls.key", "tls.key", "tls.key", "a private key, not a certificate"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_file_is_named_with_what_is_wrong(files, case):
    cert, key, ca, named, said = CASES[case]
    with pytest.raises(pem.BadFile) as raised:
        tls.build_context(files / cert, files / key, files / ca if ca else None)
    assert raised.value.path == str(files / named) and said in str(raised.value)
    assert "\n" not in str(raised.value) and "PEM lib" not in str(raised.value)


def test_a_good_pair_loads_and_is_found_nothing_wrong_with(files):
    assert tls.build_context(files / "tls.crt", files / "tls.key", files / "ca.crt")
    assert pem.diagnose(files / "tls.crt", files / "tls.key", files / "ca.crt") is None
