"""Serving certificates: what `certs` writes, and the in-cluster path against the kmock emulator."""
import asyncio
import base64
import datetime
import ipaddress
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from webhook.tools import certs, kube_certs

ROOT = Path(__file__).parents[2]
SERVICE, NS = "kubevirt-colocate", "kubevirt-colocate"
NAMES = certs.service_names(SERVICE, NS)
SECRET = "kubevirt-colocate-tls"
SECRETS = "v1/secrets"
MWCS = "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
OPENSSL = shutil.which("openssl")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True, text=True, timeout=60)


def verify(ca_pem: bytes, cert_pem: bytes, name: str) -> None:
    """Chain and host name checks of cryptography's RFC 5280 verifier (raises VerificationError)."""
    ca = x509.load_pem_x509_certificates(ca_pem)
    leaf = x509.load_pem_x509_certificate(cert_pem)
    try:
        subject = x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        subject = x509.DNSName(name)
    PolicyBuilder().store(Store(ca)).build_server_verifier(subject).verify(leaf, [])


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("certs") / "out"
    done = cli("certs", "--service", SERVICE, "--namespace", NS, "--out", str(out), "--days", "30")
    assert done.returncode == 0, done.stderr
    return out


def test_the_serving_certificate_names_the_service_and_is_for_servers(written):
    cert = x509.load_pem_x509_certificate((written / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == sorted(NAMES) == sorted([
        "kubevirt-colocate", "kubevirt-colocate.kubevirt-colocate", "kubevirt-colocate.kubevirt-colocate.svc",
        "kubevirt-colocate.kubevirt-colocate.svc.cluster.local"])
    assert ExtendedKeyUsageOID.SERVER_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    key = cert.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    assert datetime.timedelta(days=29) < cert.not_valid_after_utc - cert.not_valid_before_utc < datetime.timedelta(days=31)


def test_the_key_is_private_to_its_owner(written):
    assert (written / "tls.key").stat().st_mode & 0o777 == 0o600
    assert b"PRIVATE KEY" in (written / "tls.key").read_bytes()
    assert b"PRIVATE KEY" not in (written / "tls.crt").read_bytes() + (written / "ca.crt").read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_the_chain_verifies_for_every_service_name(written, name):
    verify((written / "ca.crt").read_bytes(), (written / "tls.crt").read_bytes(), name)


@pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed")
@pytest.mark.parametrize("name", [f"{SERVICE}.{NS}.svc", f"{SERVICE}.{NS}.svc.cluster.local"])
def test_openssl_verifies_the_chain_for_the_service(written, name):
    done = subprocess.run([OPENSSL, "verify", "-CAfile", "ca.crt", "-verify_hostname", name, "tls.crt"],
                          cwd=written, capture_output=True, text=True)
    assert done.returncode == 0 and "tls.crt: OK" in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed")
def test_openssl_rejects_other_names_and_other_cas(written, tmp_path):
    wrong_name = subprocess.run([OPENSSL, "verify", "-CAfile", "ca.crt", "-verify_hostname", f"other.{NS}.svc", "tls.crt"],
                                cwd=written, capture_output=True, text=True)
    assert wrong_name.returncode != 0
    (tmp_path / "other-ca.crt").write_bytes(certs.generate(NAMES).ca_cert)
    wrong_ca = subprocess.run([OPENSSL, "verify", "-CAfile", str(tmp_path / "other-ca.crt"), str(written / "tls.crt")],
                              capture_output=True, text=True)
    assert wrong_ca.returncode != 0
    with pytest.raises(VerificationError):
        verify((written / "ca.crt").read_bytes(), (written / "tls.crt").read_bytes(), f"other.{NS}.svc")


def test_certs_needs_somewhere_to_put_the_key():
    done = cli("certs", "--service", SERVICE, "--namespace", NS, "--patch-webhook", "kubevirt-colocate")
    assert done.returncode == 2 and "--out or --secret" in done.stderr


def test_no_private_key_is_tracked_by_git():
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    pem_key = re.compile(rb"-{5}BEGIN (?:[A-Z]+ )?PRIVATE KEY-{5}\s+[A-Za-z0-9+/=\s]+-{5}END")
    offenders = [name for name in tracked if name and (ROOT / name.decode()).is_file()
                 and pem_key.search((ROOT / name.decode()).read_bytes())]
    assert offenders == []


# --------------------------------------------------------------------------- in a cluster (kmock)


def base_webhook_configuration():
    return yaml.safe_load((ROOT / "manifests" / "base" / "mutatingwebhookconfiguration.yaml").read_text())


def seed(kmock, secret_data=None, webhook=True):
    """What `kubectl apply -k manifests` leaves before the Job runs: an empty Secret, no caBundle."""
    kmock.resources[SECRETS] = {}
    kmock.resources[MWCS] = {}
    if secret_data is not False:
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": {"name": SECRET, "namespace": NS, "resourceVersion": "1"}}
        if secret_data:
            secret["data"] = {k: base64.b64encode(v).decode() for k, v in secret_data.items()}
        kmock.objects[SECRETS, NS, SECRET] = secret
    if webhook:
        config = base_webhook_configuration()
        config["metadata"]["resourceVersion"] = "7"
        kmock.objects[MWCS, None, config["metadata"]["name"]] = config


def stored_secret(kmock):
    data = kmock.objects[SECRETS, NS, SECRET]["data"]
    return {key: base64.b64decode(data[key]) for key in kube_certs.SECRET_KEYS}


def stored_ca_bundles(kmock):
    config = kmock.objects[MWCS, None, "kubevirt-colocate"]
    return [base64.b64decode(w["clientConfig"]["caBundle"]) for w in config["webhooks"]]


def kubeconfig_for(kmock, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": str(kmock.url).rstrip("/")}}],
        "users": [{"name": "job", "user": {"token": "not-checked"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "job"}}],
    }))
    return path


async def run_process(kmock, tmp_path, *extra):
    """`certs --secret --patch-webhook` as the Job runs it: a process, against the emulator."""
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webhook", "certs", "--service", SERVICE, "--namespace", NS, "--secret", SECRET,
        "--patch-webhook", "kubevirt-colocate", "--kubeconfig", str(kubeconfig_for(kmock, tmp_path)), *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode, stdout.decode(), stderr.decode()


async def run(kmock, tmp_path, out=None):
    """The same, in this process (faster); returns what the CLI would print."""
    lines = await kube_certs.run(NAMES, namespace=NS, days=365, secret=SECRET, webhook="kubevirt-colocate",
                                 out=out, kubeconfig=str(kubeconfig_for(kmock, tmp_path)))
    return "\n".join(lines)


def writes(kmock):
    return [r for r in kmock if r.method.value in ("PATCH", "POST", "PUT")]


async def test_the_job_fills_the_secret_and_the_ca_bundle_of_every_webhook(kmock, tmp_path):
    seed(kmock)
    code, out, err = await run_process(kmock, tmp_path)
    assert code == 0, err
    assert f"Secret {NS}/{SECRET}: created" in out and "caBundle set on 2 webhook(s)" in out
    pair = stored_secret(kmock)
    for name in NAMES:
        verify(pair["ca.crt"], pair["tls.crt"], name)
    assert stored_ca_bundles(kmock) == [pair["ca.crt"], pair["ca.crt"]]
    # The rest of the configuration is what was applied: only caBundle was added.
    config = kmock.objects[MWCS, None, "kubevirt-colocate"].raw
    for webhook in config["webhooks"]:
        del webhook["clientConfig"]["caBundle"]
    expected = base_webhook_configuration()
    assert config["webhooks"] == expected["webhooks"]
    # Merge patches that carry the resourceVersion read: a concurrent writer gets a 409, not lost.
    patches = writes(kmock)
    assert [r.method.value for r in patches] == ["PATCH", "PATCH"]
    assert all(r.headers["Content-Type"] == "application/merge-patch+json" for r in patches)
    assert patches[0].data["metadata"]["resourceVersion"] == "1"
    assert patches[1].data["metadata"]["resourceVersion"] == "7"


async def test_running_again_keeps_a_good_pair_and_writes_nothing(kmock, tmp_path):
    seed(kmock)
    await run(kmock, tmp_path)
    first = stored_secret(kmock)
    before = len(writes(kmock))
    out = await run(kmock, tmp_path)
    assert "kept" in out and "already trusts this CA" in out
    assert len(writes(kmock)) == before
    assert stored_secret(kmock) == first


async def test_renewal_trusts_old_and_new_ca_until_the_next_run(kmock, tmp_path):
    old = certs.generate(["kubevirt-colocate.old-namespace.svc"], days=30)  # no longer good for these names
    seed(kmock, {"ca.crt": old.ca_cert, "tls.crt": old.cert, "tls.key": old.key})
    out = await run(kmock, tmp_path)
    assert "renewed" in out and "with the previous CA" in out
    new = stored_secret(kmock)
    assert new["tls.crt"] != old.cert
    for bundle in stored_ca_bundles(kmock):
        verify(bundle, new["tls.crt"], f"{SERVICE}.{NS}.svc")  # what the server serves after its reload
        verify(bundle, old.cert, "kubevirt-colocate.old-namespace.svc")  # what it serves until then
    # The next run keeps the pair and the overlap: nothing to write.
    before = len(writes(kmock))
    await run(kmock, tmp_path)
    assert len(writes(kmock)) == before


async def test_a_missing_secret_is_created_as_a_tls_secret(kmock, tmp_path):
    seed(kmock, secret_data=False)
    await run(kmock, tmp_path, out=str(tmp_path / "copy"))
    secret = kmock.objects[SECRETS, NS, SECRET]
    assert secret["type"] == "kubernetes.io/tls"
    assert stored_secret(kmock)["tls.crt"] == (tmp_path / "copy" / "tls.crt").read_bytes()
    assert (tmp_path / "copy" / "tls.key").stat().st_mode & 0o777 == 0o600


async def test_a_conflict_is_read_again_not_fatal(kmock, tmp_path):
    seed(kmock)
    kmock[f"patch /api/v1/namespaces/{NS}/secrets/{SECRET}"][:1] << 409
    await run(kmock, tmp_path)
    gets = [r for r in kmock if r.method.value == "GET" and r.url.path.endswith(f"/secrets/{SECRET}")]
    assert len(gets) == 2
    pair = stored_secret(kmock)
    assert stored_ca_bundles(kmock)[0] == pair["ca.crt"]


@pytest.mark.parametrize("fault, message", [
    ("forbidden", "403 (check the RBAC"),
    ("no-webhook-configuration", "MutatingWebhookConfiguration kubevirt-colocate: API answered 404"),
])
async def test_api_refusals_are_clear_errors(kmock, tmp_path, fault, message):
    seed(kmock, webhook=fault != "no-webhook-configuration")
    if fault == "forbidden":
        kmock[f"get /api/v1/namespaces/{NS}/secrets/{SECRET}"] << 403
    code, out, err = await run_process(kmock, tmp_path)
    assert code == 1
    assert message in err and "Traceback" not in err


def test_a_pair_is_renewed_in_the_last_third_of_its_life():
    bundle = certs.generate(NAMES, days=30)
    data = {"ca.crt": bundle.ca_cert, "tls.crt": bundle.cert, "tls.key": bundle.key}
    now = datetime.datetime.now(datetime.timezone.utc)
    assert kube_certs.reusable(data, NAMES, now + datetime.timedelta(days=19)) == bundle
    assert kube_certs.reusable(data, NAMES, now + datetime.timedelta(days=21)) is None
    assert kube_certs.reusable(data, NAMES + ["extra.example"], now) is None
    other = certs.generate(NAMES, days=30)
    assert kube_certs.reusable({**data, "tls.key": other.key}, NAMES, now) is None  # key of another pair
    assert kube_certs.reusable({**data, "ca.crt": other.ca_cert}, NAMES, now) is None  # signed by another CA


def test_without_credentials_the_error_says_so(tmp_path):
    done = cli("certs", "--service", SERVICE, "--namespace", NS, "--secret", SECRET,
               "--kubeconfig", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert "no credentials for the cluster" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "--kubeconfig" in done.stderr
