"""Builders of realistic objects (from tests/fixtures, copied from the shared fixtures)."""
from __future__ import annotations

import base64
import copy
import json
import uuid
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import yaml

FIXTURES = Path(__file__).parent / "fixtures"
# The oldest Kubernetes we support (matchConditions GA) and the newest schema shipped.
VALIDATE_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
LONGHORN_NS = "longhorn-system"
VM_NS = "default"
VM1_UID = "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"  # the VMI uid in the fixtures


def load_all(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def load(name: str) -> dict[str, Any]:
    return load_all(name)[0]


def vm_pod(*claims: str, **spec_overrides: Any) -> dict[str, Any]:
    """The fixture virt-launcher pod, optionally with other PVC disks and spec fields."""
    pod = copy.deepcopy(load("virt-launcher-pod.yaml"))
    if claims:
        pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" not in v]
        pod["spec"]["volumes"] += [{"name": f"disk{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    for key, value in spec_overrides.items():
        if value is None:
            pod["spec"].pop(key, None)
        else:
            pod["spec"][key] = value
    return pod


def migration_target() -> dict[str, Any]:
    return copy.deepcopy(load("migration-target-pod.yaml"))


def fixture_cluster() -> list[dict[str, Any]]:
    return copy.deepcopy(load_all("longhorn-rwx.yaml"))


def nodes(*names: str, **labels: str) -> list[dict[str, Any]]:
    return [node(n, **labels) for n in names]


# What a 16-core, 64 GiB KubeVirt node offers after system reservations.
ALLOCATABLE = {"cpu": "15800m", "memory": "62Gi", "ephemeral-storage": "190Gi", "pods": "110",
               "devices.kubevirt.io/kvm": "1k", "hugepages-2Mi": "0"}


# CPU generations as virt-handler's node labeller labels their nodes (kubevirt/kubevirt
# pkg/virt-handler/node-labeller): the host-model CPU and the features it requires, the models a
# migration target may select, the vendor, and the machine types of the node's QEMU.
CPU_GENERATIONS = {
    "Skylake-Client-IBRS": {"models": ("Skylake-Client-IBRS", "Broadwell-IBRS"), "features": ("vmx", "ssbd"),
                            "vendor": "Intel", "machines": ("q35", "pc-q35-rhel9.6.0", "pc-q35-rhel9.4.0")},
    "Broadwell-IBRS": {"models": ("Broadwell-IBRS",), "features": ("vmx",),
                       "vendor": "Intel", "machines": ("q35", "pc-q35-rhel9.4.0")},
    "EPYC-Milan": {"models": ("EPYC-Milan",), "features": ("svm",),
                   "vendor": "AMD", "machines": ("q35", "pc-q35-rhel9.6.0")},
}


def labeller(cpu: str | None) -> dict[str, str]:
    """The node labeller's labels of a node of CPU generation `cpu` (none for None)."""
    if cpu is None:
        return {}
    generation = CPU_GENERATIONS[cpu]
    found = {f"host-model-cpu.node.kubevirt.io/{cpu}": "true", f"cpu-vendor.node.kubevirt.io/{generation['vendor']}": "true"}
    found |= {f"cpu-model-migration.node.kubevirt.io/{m}": "true" for m in generation["models"]}
    found |= {f"host-model-required-features.node.kubevirt.io/{f}": "true" for f in generation["features"]}
    found |= {f"cpu-feature.node.kubevirt.io/{f}": "true" for f in generation["features"]}
    found |= {f"machine-type.node.kubevirt.io/{m}": "true" for m in generation["machines"]}
    return found


def node(name: str, *, ready: bool = True, unschedulable: bool = False, taints: list | None = None,
         schedulable_label: bool = True, allocatable: dict[str, str] | None = None,
         cpu: str | None = "Skylake-Client-IBRS", **labels: str) -> dict[str, Any]:
    all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                  **labeller(cpu), **labels}
    if schedulable_label:
        all_labels["kubevirt.io/schedulable"] = "true"
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                   "allocatable": dict(allocatable or ALLOCATABLE)},
    }


def rwx_disk(
    claim: str,
    node: str | None,
    *,
    volume: str | None = None,
    pv_name: str | None = None,
    state: str = "running",
    owner: str | None = None,
    pod: bool = True,
    terminating: bool = False,
    access: str = "ReadWriteMany",
    bound: bool = True,
    driver: str = "driver.longhorn.io",
    share_manager: bool = True,
    namespace: str = VM_NS,
) -> list[dict[str, Any]]:
    """PVC, PV, ShareManager and share-manager pod of one Longhorn volume, as Longhorn makes them."""
    volume = volume or f"pvc-{claim}"
    pv_name = pv_name or volume
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace},
        "spec": {"accessModes": [access], "storageClassName": "longhorn-rwx",
                 "resources": {"requests": {"storage": "10Gi"}}},
        "status": {"phase": "Bound" if bound else "Pending"},
    }
    if bound:
        pvc["spec"]["volumeName"] = pv_name
    objects = [pvc]
    if bound:
        objects.append({
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name},
            "spec": {
                "accessModes": [access],
                "capacity": {"storage": "10Gi"},
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": claim, "namespace": namespace},
                "csi": {"driver": driver, "volumeHandle": volume, "fsType": "ext4"},
                "storageClassName": "longhorn-rwx",
            },
        })
    if share_manager:
        objects.append({
            "apiVersion": "longhorn.io/v1beta2",
            "kind": "ShareManager",
            "metadata": {"name": volume, "namespace": LONGHORN_NS},
            "spec": {"image": "longhornio/longhorn-share-manager:v1.9.1"},
            "status": {"state": state, "ownerID": owner if owner is not None else (node or "")},
        })
    if pod and node:
        sm_pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"share-manager-{volume}",
                "namespace": LONGHORN_NS,
                "labels": {"longhorn.io/component": "share-manager", "longhorn.io/share-manager": volume},
            },
            "spec": {"nodeName": node, "containers": [{"name": "share-manager", "image": "longhornio/longhorn-share-manager:v1.9.1"}]},
            "status": {"phase": "Running"},
        }
        if terminating:
            sm_pod["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
            sm_pod["metadata"]["finalizers"] = ["longhorn.io"]
        objects.append(sm_pod)
    return objects


def review(obj: Any, namespace: str = VM_NS, operation: str = "CREATE", kind: str = "Pod", uid: str = "uid-1") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
            "namespace": namespace,
            "name": "",
            "operation": operation,
            "object": obj,
            "oldObject": None,
            "dryRun": False,
        },
    }


def decode_patch(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    response = envelope["response"]
    if "patch" not in response:
        assert "patchType" not in response
        return []
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


def apply_valid(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply as the apiserver would, then validate strictly against old and new schemas."""
    assert all(op["op"] == "add" for op in ops), ops
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


def annotations(pod: dict[str, Any]) -> dict[str, str]:
    return pod["metadata"].get("annotations") or {}


def share_manager_pod(volume: str, *, topology_zone: str | None = None, node_name: str | None = None,
                      tolerations: list | None = None) -> dict[str, Any]:
    """A share-manager pod as longhorn-manager creates it (createPodManifest), before scheduling."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"share-manager-{volume}",
            "namespace": LONGHORN_NS,
            "labels": {
                "longhorn.io/managed-by": "longhorn-manager",
                "longhorn.io/component": "share-manager",
                "longhorn.io/share-manager": volume,
                "longhorn.io/share-manager-image": "smi-4b1c2d3e",
            },
            "annotations": {"longhorn.io/last-applied-tolerations": "[]"},
            "ownerReferences": [{"apiVersion": "longhorn.io/v1beta2", "kind": "ShareManager", "name": volume,
                                 "uid": "3c4d5e6f-7081-4923-8b4c-5d6e7f809112", "controller": True}],
        },
        "spec": {
            "serviceAccountName": "longhorn-service-account",
            "priorityClassName": "longhorn-critical",
            "restartPolicy": "Never",
            "tolerations": tolerations or [],
            "containers": [{
                "name": "share-manager",
                "image": "longhornio/longhorn-share-manager:v1.9.1",
                "args": ["--debug", "daemon", "--volume", volume],
                "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN", "DAC_READ_SEARCH"]}},
                "readinessProbe": {"exec": {"command": ["cat", "/var/run/ganesha.pid"]}, "periodSeconds": 5},
            }],
        },
    }
    if topology_zone:
        # Longhorn >= 1.7 turns the StorageClass allowedTopologies into a required term.
        pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [topology_zone]}]}]}}}
    if node_name:
        pod["spec"]["nodeName"] = node_name
    return pod


def vmi_uid(name: str, namespace: str = VM_NS) -> str:
    """The uid of a VMI in the tests: the fixtures' for default/vm1, a stable one for the others."""
    if (namespace, name) == (VM_NS, "vm1"):
        return VM1_UID
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"vmi/{namespace}/{name}"))


def running_vm(name: str, node: str | None, *claims: str, namespace: str = VM_NS, opted_in: bool = True,
               terminating: bool = False) -> dict[str, Any]:
    """A virt-launcher pod of VM `name` as the API shows it once created (named, maybe scheduled)."""
    pod = vm_pod(*claims)
    pod["metadata"]["name"] = f"virt-launcher-{name}-x7k2p"
    pod["metadata"]["namespace"] = namespace
    labels = pod["metadata"]["labels"]
    labels.update({"vm.kubevirt.io/name": name, "kubevirt.io/vm": name, "vmi.kubevirt.io/id": name,
                   "kubevirt.io/created-by": vmi_uid(name, namespace)})
    if not opted_in:
        del pod["metadata"]["annotations"]["kubevirt-scheduler/co-schedule"]
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    if node:
        pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running" if node else "Pending"}
    return pod


def launcher_pod(fixture: str, name: str, node: str | None, created: str, phase: str = "Running", *,
                 terminating: bool = False, namespace: str = VM_NS) -> dict[str, Any]:
    """A launcher pod from a fixture as the API shows it: named, created at `created`, maybe
    scheduled, in `phase`, maybe being deleted."""
    pod = copy.deepcopy(load(fixture))
    pod["metadata"].pop("generateName", None)
    pod["metadata"].update(name=name, namespace=namespace, creationTimestamp=created)
    if node:
        pod["spec"]["nodeName"] = node
    else:
        pod["spec"].pop("nodeName", None)
    pod["status"] = {"phase": phase}
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-11-20T09:59:00Z"
    return pod


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


class Serving:
    """`python -m webhook serve` in a process of its own, as deployed: ports picked by the
    server (0) and read from its `serving` log line; its log read all along (a full pipe
    would stall the server)."""

    def __init__(self, process: Any, entry: dict[str, Any], lines: list[dict[str, Any]]):
        self.process = process
        self.base = f"https://localhost:{entry['port']}"
        self.ops = f"http://127.0.0.1:{entry['metrics_port']}"
        self.lines = lines
        self._reader: Any = None

    @classmethod
    async def start(cls, tls_files: dict[str, Path], *args: str, env: dict[str, str] | None = None) -> "Serving":
        import asyncio
        import os
        import sys

        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1", "--port", "0",
            "--metrics-host", "127.0.0.1", "--metrics-port", "0",
            "--tls-cert-file", str(tls_files["cert"]), "--tls-key-file", str(tls_files["key"]), *args,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})
        lines: list[dict[str, Any]] = []
        while True:
            raw = await asyncio.wait_for(process.stderr.readline(), 30)
            assert raw, f"the server exited before serving: {lines}"
            lines.append(json.loads(raw))
            if lines[-1]["msg"] == "serving":
                break
        serving = cls(process, lines[-1], lines)
        serving._reader = asyncio.create_task(serving._read())
        return serving

    async def _read(self) -> None:
        async for raw in self.process.stderr:
            if raw.strip():
                self.lines.append(json.loads(raw))  # every line is JSON, or this fails the test

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


async def run_verb(tmp_path: Path, kmock: Any, verb: str, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    """`python -m webhook VERB ... --kubeconfig` against the emulator, as an admin runs it."""
    import asyncio
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webhook", verb, *args, "--kubeconfig", kubeconfig_for(tmp_path, str(kmock.url).rstrip("/")),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode(), err.decode()


def paths(value, prefix=()):
    """Every path into a JSON document (dict keys and list indexes)."""
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from paths(child, prefix + (index,))
