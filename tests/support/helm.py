"""Helm's own engine, Helm 4's Go library in a wheel, two ways.

`render`: `helm install --dry-run=client` (helm-python-sdk, a test dependency): the values schema,
the templates and the labels Helm adds, with no cluster; it runs everywhere, CI included.

Against the real kube-apiserver (helm-sdkpy): `helm install`, `upgrade` and `uninstall` run as the
helm CLI runs them, against the control plane of the tests (kubefake/envtest.py: its discovery,
OpenAPI, label selectors, Helm's release Secrets, strategic merge patches, validation and
admission, all real). The README's Helm commands are parsed here and run as written. helm-sdkpy
comes from the Makefile (`pip install --ignore-requires-python`: it declares Python >= 3.12 but is
a cffi wrapper that runs on 3.11); without it these tests are skipped, except in CI (CI=true),
where they fail.
"""
from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kubevirt-colocate"
RELEASE = "kubevirt-colocate"
VERBS = {"create", "delete", "get", "list", "patch", "update", "watch"}

# Every kind the chart can render, and what Helm itself writes (its release Secrets, the namespace).
RESOURCES = {
    "v1/namespaces": ("Namespace", False),
    "v1/secrets": ("Secret", True),
    "v1/serviceaccounts": ("ServiceAccount", True),
    "v1/services": ("Service", True),
    "v1/configmaps": ("ConfigMap", True),
    "apps/v1/deployments": ("Deployment", True),
    "batch/v1/jobs": ("Job", True),
    "policy/v1/poddisruptionbudgets": ("PodDisruptionBudget", True),
    "networking.k8s.io/v1/networkpolicies": ("NetworkPolicy", True),
    "rbac.authorization.k8s.io/v1/roles": ("Role", True),
    "rbac.authorization.k8s.io/v1/rolebindings": ("RoleBinding", True),
    "rbac.authorization.k8s.io/v1/clusterroles": ("ClusterRole", False),
    "rbac.authorization.k8s.io/v1/clusterrolebindings": ("ClusterRoleBinding", False),
    "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations": ("MutatingWebhookConfiguration", False),
    "admissionregistration.k8s.io/v1/validatingadmissionpolicies": ("ValidatingAdmissionPolicy", False),
    "admissionregistration.k8s.io/v1/validatingadmissionpolicybindings": ("ValidatingAdmissionPolicyBinding", False),
}
# Custom resources: served only where cert-manager or the Prometheus operator runs.
CERT_MANAGER = {"cert-manager.io/v1/issuers": ("Issuer", True), "cert-manager.io/v1/certificates": ("Certificate", True)}
PROMETHEUS_OPERATOR = {"monitoring.coreos.com/v1/servicemonitors": ("ServiceMonitor", True),
                       "monitoring.coreos.com/v1/prometheusrules": ("PrometheusRule", True)}


class Cluster:
    """The real apiserver as Helm's target, and what it stores read back: the objects of the kinds
    a chart renders in the namespaces it installs into, the cluster-scoped ones labelled as the
    release's, and those namespaces."""

    NAMESPACES = ("kubevirt-colocate", "colocate-system")

    def __init__(self, plane: Any) -> None:
        import ssl

        self.plane = plane
        self.context = ssl.create_default_context(cafile=str(plane.ca_file))
        self.context.load_cert_chain(str(plane.admin_cert), str(plane.admin_key))

    def kubeconfig(self) -> str:
        return self.plane.kubeconfig.read_text()

    def request(self, method: str, path: str) -> tuple[int, Any]:
        import json
        import urllib.error
        import urllib.request

        import time

        for _ in range(20):  # 429 while a new CRD's watch cache starts: the apiserver says when to retry
            request = urllib.request.Request(self.plane.url + path, method=method)
            try:
                with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as error:
                code, got = error.code, json.loads(error.read() or b"{}")
            if code != 429:
                return code, got
            time.sleep(0.5)
        return code, got

    def kinds(self) -> dict[str, tuple[str, bool]]:
        return {**RESOURCES, **CERT_MANAGER, **PROMETHEUS_OPERATOR}

    def stored(self) -> list[dict[str, Any]]:
        found = []
        for path, (kind, namespaced) in self.kinds().items():
            prefix = "/api/" if path.startswith("v1/") else "/apis/"
            group_version, plural = path.rsplit("/", 1)
            if kind == "Namespace":
                urls = [f"{prefix}{path}/{name}" for name in self.NAMESPACES]
            elif namespaced:
                urls = [f"{prefix}{group_version}/namespaces/{ns}/{plural}" for ns in self.NAMESPACES]
            else:
                urls = [f"{prefix}{path}?labelSelector=app.kubernetes.io/instance%3D{RELEASE}"]
            for url in urls:
                code, got = self.request("GET", url)
                if code == 404:
                    continue
                assert code == 200, (url, got)
                items = got["items"] if "items" in got else [got]
                found += [{"apiVersion": group_version, "kind": kind, **item} for item in items]
        return found

    @property
    def calls(self) -> list[tuple[str, str]]:
        """Every delete the apiserver answered, in order (its audit log)."""
        return [("DELETE", path) for path in self.plane.deletes()]

    def delete(self, path: str) -> None:
        code, got = self.request("DELETE", path)
        assert code in (200, 202), got

    def clean(self) -> None:
        """Whatever a test left: the release's objects and everything in its namespaces (the
        namespaces themselves stay: nothing would finish deleting them here)."""
        plurals = {kind: path for path, (kind, _) in self.kinds().items()}
        for obj in self.stored():
            if obj["kind"] == "Namespace":
                continue
            meta, path = obj["metadata"], plurals[obj["kind"]]
            prefix = "/api/" if path.startswith("v1/") else "/apis/"
            group_version, plural = path.rsplit("/", 1)
            scope = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
            self.request("DELETE", f"{prefix}{group_version}{scope}/{plural}/{meta['name']}")


def sdk() -> Any:
    """helm_sdkpy, loaded; skipped where it is not installed, failed in CI."""
    try:
        import helm_sdkpy

        helm_sdkpy.get_version()  # loads the Go library
    except Exception as exc:  # ImportError, HelmLibraryNotFound (a platform without a shipped library)
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"helm-sdkpy is not usable ({exc}); the Makefile installs it")
        pytest.skip(f"helm-sdkpy is not usable ({exc}); `make .venv/.installed` installs it")
    return helm_sdkpy


# --------------------------------------------------------------------------- the helm command line


def set_value(values: dict[str, Any], assignment: str) -> None:
    """One `--set path=value` as Helm reads it: dotted path; true, false, null and whole numbers typed."""
    path, sep, text = assignment.partition("=")
    if not sep or re.search(r"[,\[\]{}\\]", assignment):
        raise ValueError(f"--set {assignment}: only path=value is read here")
    value: Any = text
    if text in ("true", "false"):
        value = text == "true"
    elif text == "null":
        value = None
    elif re.fullmatch(r"-?[0-9]+", text) and (text == "0" or not text.lstrip("-").startswith("0")):
        value = int(text)
    *parents, leaf = path.split(".")
    for key in parents:
        values = values.setdefault(key, {})
    values[leaf] = value


class Command:
    """A `helm install|upgrade|uninstall|rollback|history` command line: the flags the docs use, no others."""

    def __init__(self, line: str):
        words = shlex.split(line)
        if words[:1] != ["helm"] or len(words) < 3:
            raise ValueError(f"not a helm command: {line}")
        self.line, self.verb, self.release = line, words[1], words[2]
        self.chart: str | None = None
        self.namespace = "default"
        self.create_namespace = self.reuse_values = self.reset_then_reuse_values = False
        self.values: dict[str, Any] = {}
        rest = words[3:]
        if self.verb in ("install", "upgrade"):
            self.chart, rest = rest[0], rest[1:]
        elif self.verb == "rollback" and rest[:1] and rest[0].isdigit():  # to this revision (else the one before)
            rest = rest[1:]
        elif self.verb not in ("uninstall", "rollback", "history"):
            raise ValueError(f"helm {self.verb}: not read here")
        while rest:
            flag, rest = rest[0], rest[1:]
            if flag in ("-n", "--namespace"):
                self.namespace, rest = rest[0], rest[1:]
            elif flag == "--create-namespace" and self.verb == "install":
                self.create_namespace = True
            elif flag == "--reuse-values" and self.verb == "upgrade":
                self.reuse_values = True
            elif flag == "--reset-then-reuse-values" and self.verb == "upgrade":
                self.reset_then_reuse_values = True
            elif flag == "--set" and self.verb in ("install", "upgrade"):
                set_value(self.values, rest[0])
                rest = rest[1:]
            else:
                raise ValueError(f"{line}: {flag} is not read here")

    def chart_path(self) -> str:
        assert self.chart is not None
        return str((ROOT / self.chart).resolve())


def commands(markdown: str) -> list[Command]:
    """The helm commands of the indented or fenced code in a markdown text, in order
    (`\\` continues a line; `#` starts a comment)."""
    found = []
    for line in re.sub(r"\\\n\s*", "", markdown).splitlines():
        line = line.strip()
        if line.startswith("helm "):
            found.append(Command(line.split(" #")[0]))
    return found


async def run(helm_sdkpy: Any, config: Any, command: Command) -> dict[str, Any]:
    """Run one command as the helm CLI does (no --wait: the CLI's default)."""
    if command.verb == "install":
        return await helm_sdkpy.Install(config).run(
            command.release, command.chart_path(), values=command.values, create_namespace=command.create_namespace,
            wait=False, timeout=60)
    if command.verb == "upgrade" and command.reset_then_reuse_values:
        # The chart's own defaults, then the values given before, then these: as Helm does it.
        given = await helm_sdkpy.GetValues(config).run(command.release)
        return await helm_sdkpy.Upgrade(config).run(
            command.release, command.chart_path(), values=merged(given or {}, command.values), reset_values=True,
            wait=False, timeout=60)
    if command.verb == "upgrade":
        return await helm_sdkpy.Upgrade(config).run(
            command.release, command.chart_path(), values=command.values, reuse_values=command.reuse_values,
            wait=False, timeout=60)
    return await helm_sdkpy.Uninstall(config).run(command.release, wait=False, timeout=60)


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into a copy of `base`, key by key (Helm's coalescing of values maps)."""
    result = dict(base)
    for name, value in over.items():
        result[name] = merged(result[name], value) if isinstance(value, dict) and isinstance(result.get(name), dict) else value
    return result


def objects(manifest: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(manifest) if o]


def render(values: dict[str, Any] | None = None, namespace: str = "kubevirt-colocate",
           chart: Path = CHART) -> list[dict[str, Any]]:
    """The objects `helm install kubevirt-colocate CHART -n NAMESPACE --create-namespace --dry-run=client`
    renders with these values; the values schema refuses first (helm_python.HelmReleaseError). The
    client is pointed at a port nothing listens on: a render that reached for a cluster would fail."""
    import helm_python

    helm_python.disable_logging()  # its INFO lines: the chart's links into manifests/ followed
    config = helm_python.Config(kube_apiserver="https://127.0.0.1:1", namespace=namespace)
    release = config.install(str(chart), RELEASE, values or {}, namespace=namespace, dry_run="client",
                             create_namespace=True)
    return objects(release["manifest"])
