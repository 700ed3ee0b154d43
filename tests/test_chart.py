"""charts/kubevirt-colocate: the Helm chart, rendered and installed by Helm's own engine.

One truth for two installs: the chart with the default values, and with the cert-manager and
monitoring choices, renders object by object what `kubectl kustomize` renders of the matching
manifests/ tree, apart from the labels Helm adds, the certificate Job's name (the chart names it
after its spec, so that an upgrade replaces it) and the Namespace (Helm's --create-namespace
makes it). Every rendered object validates strictly (kubernetes-validate, 1.30 and the newest).

Rendering needs no cluster: `helm install --dry-run=client` (helm-python-sdk, Helm 4's engine: values
schema, templates, the labels Helm adds), so it runs everywhere, CI included. What only a cluster shows
(Helm creates exactly what it rendered; the README's Helm commands run as written, with the certificate
Job played by the project's own `certs` verb in a process; upgrades and uninstall) runs against the real
kube-apiserver where KUBEBUILDER_ASSETS names one (tests/support/helm.py, kubefake/envtest.py).
"""
from __future__ import annotations

import asyncio
import copy
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from tests.support.admission_policy import UNTOUCHED, admit, create_request, evaluate, service_account
from tests.support.helm import (CERT_MANAGER, CHART, PROMETHEUS_OPERATOR, RELEASE, Cluster, Command, commands, objects,
                                render, run, sdk, set_value)
from tests.support.kube import VALIDATE_VERSIONS, kubectl

from webhook import __version__
from webhook.__main__ import build_parser, settings_from
from webhook.admission.optin import shut_out
from webhook.config import Settings
from webhook.tools import certs

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
NS = "kubevirt-colocate"
KEEPER = "kubevirt-colocate-keeper"  # the keeper's Deployment and ServiceAccount
HELM_LABELS = {"app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"}
CUSTOM_KINDS = {kind for kind, _ in (CERT_MANAGER | PROMETHEUS_OPERATOR).values()}
JOB_NAME = re.compile(r"kubevirt-colocate-certs-[0-9a-f]{8}")
VM_HOOK, SHARE_MANAGER_HOOK = "vm.colocate.kubevirt-scheduler.io", "share-manager.colocate.kubevirt-scheduler.io"
BOTH = {"certManager": {"enabled": True}, "monitoring": {"enabled": True}}
VARIANTS = {  # values -> the manifests/ trees of the same install
    "default": ({}, ["manifests"]),
    "cert-manager": ({"certManager": {"enabled": True}}, ["manifests/cert-manager"]),
    "monitoring": ({"monitoring": {"enabled": True}}, ["manifests", "manifests/monitoring"]),
    "cert-manager and monitoring": (BOTH, ["manifests/cert-manager", "manifests/monitoring"]),
    # An overlay (next to manifests/) with the install option's component.
    "spare VMs": ({"longhorn": {"spareVMs": True}},
                  [{"resources": ["../manifests"], "components": ["../manifests/spare-vms"]}]),
    "aim evacuations": ({"aimEvacuations": True},
                        [{"resources": ["../manifests"], "components": ["../manifests/aim-evacuations"]}]),
}


@pytest.fixture
def helm_sdkpy():
    return sdk()


@pytest.fixture
async def cluster(control_plane, helm_sdkpy):
    """The real apiserver (cert-manager's and the Prometheus operator's kinds served too); every
    release a test installed uninstalled after it, and whatever it left removed."""
    found = Cluster(control_plane)
    yield found
    for namespace in Cluster.NAMESPACES:
        try:
            await helm_sdkpy.Uninstall(configuration(helm_sdkpy, found, namespace)).run(RELEASE, wait=False, timeout=60)
        except helm_sdkpy.HelmError:
            pass  # nothing installed there
    found.clean()


def configuration(helm_sdkpy, cluster, namespace=NS):
    return helm_sdkpy.Configuration(namespace=namespace, kubeconfig=cluster.kubeconfig())


async def install(helm_sdkpy, cluster, values=None, namespace=NS) -> list[dict[str, Any]]:
    """`helm install kubevirt-colocate CHART -n NAMESPACE --create-namespace` with these values:
    the objects of the release's manifest."""
    release = await helm_sdkpy.Install(configuration(helm_sdkpy, cluster, namespace)).run(
        RELEASE, str(CHART), values=values or {}, create_namespace=True, wait=False, timeout=60)
    return objects(release["manifest"])


def stored(cluster, kind=None, name=None) -> list[dict[str, Any]]:
    """The objects in the apiserver (what Helm created), by kind and name."""
    return [obj for obj in cluster.stored()
            if (kind is None or obj.get("kind") == kind) and (name is None or obj["metadata"]["name"] == name)]


def one(found: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matching = [o for o in found if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matching) == 1, f"{kind} {name}: {len(matching)} found"
    return matching[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    assert only["name"] == {NS: "webhook", KEEPER: "keeper"}[deployment["metadata"]["name"]]
    return only


def served_settings(deployment: dict[str, Any], env: dict[str, str] | None = None) -> Settings:
    """What `serve` (or `keep`, for the keeper's Deployment) runs with, from the Deployment's flags
    (and COLOCATE_* of its env)."""
    verb = "keep" if deployment["metadata"]["name"] == KEEPER else "serve"
    with pytest.MonkeyPatch.context() as patch:
        for name, value in (env or {}).items():
            patch.setenv(name, value)
        return settings_from(build_parser().parse_args([verb, *container(deployment)["args"]]))


def hooks(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in one(found, "MutatingWebhookConfiguration", NS)["webhooks"]}


def validate_strictly(found: list[dict[str, Any]]) -> None:
    for obj in found:
        if obj["kind"] not in CUSTOM_KINDS:  # no schema shipped for custom resources
            for version in VALIDATE_VERSIONS:
                kubernetes_validate.validate(obj, version, strict=True)


# --------------------------------------------------------------------------- one truth for two installs


@functools.cache
def _kustomize(source: str) -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize` of a path, or of an overlay (a kustomization as JSON) next to manifests/."""
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    if not source.startswith("{"):
        done = subprocess.run([tool, "kustomize", source], cwd=ROOT, capture_output=True, text=True, timeout=60)
    else:
        overlay = ROOT / f".chart-overlay-{os.getpid()}"  # kustomize loads ../manifests relative to it
        overlay.mkdir()
        try:
            (overlay / "kustomization.yaml").write_text(yaml.safe_dump(json.loads(source)))
            done = subprocess.run([tool, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
        finally:
            shutil.rmtree(overlay)
    assert done.returncode == 0, done.stderr
    return tuple(objects(done.stdout))


def kustomized(sources: list[str | dict[str, Any]]) -> list[dict[str, Any]]:
    return [copy.deepcopy(o) for source in sources
            for o in _kustomize(source if isinstance(source, str) else json.dumps(source, sort_keys=True))]


def key(obj: dict[str, Any]) -> tuple[str, str, str | None, str]:
    return obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def as_kustomize_has_it(obj: dict[str, Any]) -> dict[str, Any]:
    """A rendered object without what only Helm adds: its labels, the Job's name suffix."""
    obj = copy.deepcopy(obj)
    labels = obj["metadata"].get("labels") or {}
    for label in HELM_LABELS:
        assert label in labels, (key(obj), label)
        del labels[label]
    if obj["kind"] == "Job":
        assert JOB_NAME.fullmatch(obj["metadata"]["name"]), obj["metadata"]["name"]
        obj["metadata"]["name"] = "kubevirt-colocate-certs"
    return obj


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_chart_renders_the_same_install_as_the_manifests(variant):
    values, sources = VARIANTS[variant]
    rendered = render(copy.deepcopy(values))
    validate_strictly(rendered)
    chart = {key(o): o for o in map(as_kustomize_has_it, rendered)}
    assert len(chart) == len(rendered)
    manifests = {key(o): o for o in kustomized(sources)}
    # The namespace is Helm's (--create-namespace), the one object a chart cannot own.
    assert set(manifests) - set(chart) == {("v1", "Namespace", None, NS)}
    assert set(chart) - set(manifests) == set()
    for name in chart:
        assert chart[name] == manifests[name], name


# "spare VMs" puts its Role into Longhorn's namespace, which the install does not create.
@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "spare VMs"])
async def test_helm_creates_exactly_what_it_renders(cluster, helm_sdkpy, variant):
    rendered = await install(helm_sdkpy, cluster, copy.deepcopy(VARIANTS[variant][0]))
    assert sorted(map(key, rendered)) == sorted(map(key, render(copy.deepcopy(VARIANTS[variant][0]))))
    # What it rendered, its namespace and its release record: nothing else.
    created = {key(o) for o in stored(cluster) if o["kind"] != "Secret" or not o["metadata"]["name"].startswith("sh.helm.")}
    assert created == {key(o) for o in rendered} | {("v1", "Namespace", None, NS)}


def test_the_opt_in_key_is_named_once_for_the_flag_and_the_match_conditions():
    """`--set keeper.mode=report --set optInAnnotation=example.com/colocate`."""
    command = Command(f"helm install {RELEASE} ./charts/kubevirt-colocate -n {NS} --create-namespace "
                      "--set keeper.mode=report --set optInAnnotation=example.com/colocate")
    rendered = render(command.values, command.namespace)
    deployment, configuration_ = one(rendered, "Deployment", NS), one(rendered, "MutatingWebhookConfiguration")
    keeper = served_settings(one(rendered, "Deployment", KEEPER))
    assert (served_settings(deployment).opt_in_annotation, keeper.opt_in_annotation) == ("example.com/colocate",) * 2
    assert keeper.keep == "report"
    # The server's own check of its webhook configuration lets that key through, and not the default.
    assert shut_out(configuration_, "example.com/colocate") == []
    assert shut_out(configuration_, Settings().opt_in_annotation) == [VM_HOOK]
    # The condition itself, evaluated (CEL) on pods as the apiserver sees them.
    [condition] = hooks([configuration_])[VM_HOOK]["matchConditions"]

    def lets_through(annotations):
        return evaluate(condition["expression"], {"object": {"metadata": {"annotations": annotations}}})

    assert lets_through({"example.com/colocate": "true"})
    assert not lets_through({"example.com/colocate": "false"})
    assert not lets_through({Settings().opt_in_annotation: "true"})
    assert not evaluate(condition["expression"], {"object": {"metadata": {}}})
    validate_strictly([deployment, configuration_])


async def test_helm_lint_is_clean(helm_sdkpy):
    result = await helm_sdkpy.Lint(helm_sdkpy.Configuration(namespace=NS)).run(str(CHART))
    assert result["TotalChartsLinted"] == 1 and not result["Errors"]
    # INFO (severity 1) is only "icon is recommended"; no warning (2) nor error (3).
    assert [m for m in result["Messages"] if m["Severity"] >= 2] == []


# --------------------------------------------------------------------------- values


def values_file() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


def leaves(values: dict[str, Any], prefix: str = "") -> list[str]:
    found = []
    for name, value in values.items():
        path = f"{prefix}{name}"
        found += leaves(value, f"{path}.") if isinstance(value, dict) and value and name not in ("resources",) else [path]
    return found


def schema_of(path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema()
    for name in path.split("."):
        node = ((node or {}).get("properties") or {}).get(name)
    return node


def test_every_value_is_documented_and_typed():
    values = values_file()
    jsonschema.Draft7Validator(schema()).validate(values)
    text = (CHART / "values.yaml").read_text().splitlines()
    for path in leaves(values):
        assert schema_of(path), f"{path} has no type in values.schema.json"
        # a comment on the line before the key, or before its parent's key
        names = path.split(".")
        documented = False
        for depth in range(len(names), 0, -1):
            indent = "  " * (depth - 1)
            lines = [i for i, line in enumerate(text) if line.startswith(f"{indent}{names[depth - 1]}:")]
            documented = documented or any(i > 0 and text[i - 1].strip().startswith("#") for i in lines)
        assert documented, f"{path} has no comment in values.yaml"
    assert set(schema()["properties"]) - {"global"} == set(values)


def server_defaults() -> dict[str, Any]:
    """The `kubevirt-colocate.serverDefaults` block of _helpers.tpl."""
    text = (CHART / "templates" / "_helpers.tpl").read_text()
    block = re.search(r'define "kubevirt-colocate.serverDefaults" -}}\n(.*?)\n{{- end', text, re.S)
    assert block, "no serverDefaults in _helpers.tpl"
    return yaml.safe_load(block[1])


def test_the_defaults_are_the_servers():
    """A value equal to the server's default gives no flag: both must be the server's own defaults."""
    server, values = Settings(), values_file()
    assert server_defaults() == {
        "keepAfter": server.keep_after, "keepAfterDescheduled": server.keep_after_descheduled,
        "keepMaxInflight": server.keep_max_inflight,
        "keepMaxPerDay": server.keep_max_per_day, "pin": server.pin, "optInAnnotation": server.opt_in_annotation,
        "longhornNamespace": server.longhorn_namespace, "shareManagerRule": server.share_manager_rule,
        "spareVMs": server.spare_vms, "aimEvacuations": server.aim_evacuations,
        "kubevirtNamespace": server.kubevirt_namespace, "bodyBudgetMiB": serve_default("--body-budget")}
    keeper = values["keeper"]
    assert (keeper["after"], keeper["afterDescheduled"], keeper["maxInflight"], keeper["maxPerDay"], values["pin"],
            values["optInAnnotation"], values["longhorn"]["namespace"], values["shareManagerRule"],
            values["longhorn"]["spareVMs"], values["aimEvacuations"]) == (
        server.keep_after, server.keep_after_descheduled, server.keep_max_inflight, server.keep_max_per_day, server.pin,
        server.opt_in_annotation, server.longhorn_namespace, server.share_manager_rule, server.spare_vms,
        server.aim_evacuations)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__  # the default image tag: the image of this version
    assert chart["apiVersion"] == "v2"


@pytest.mark.parametrize("assignment, complaint", [
    ("keeper.mode=sometimes", "/keeper/mode"),
    ("keeper.mdoe=report", "mdoe"),
    ("optInAnnotation=example.com/co'schedule", "/optInAnnotation"),
    ("replicas=0", "/replicas"),
    ("keeper.maxPerDay=0", "/keeper/maxPerDay"),
    ("longhorn.namespace=Longhorn_System", "/longhorn/namespace"),
    ("image.digest=latest", "/image/digest"),
    ("bodyBudgetMiB=2", "/bodyBudgetMiB"),
    ("migrationTargets=prefer", "migrationTargets"),  # removed: targets are always left untouched
])
def test_the_schema_refuses_a_bad_value(assignment, complaint):
    import helm_python

    values: dict[str, Any] = {}
    set_value(values, assignment)
    with pytest.raises(helm_python.HelmReleaseError, match="schema") as refused:
        render(values)
    assert complaint in str(refused.value)


async def test_the_schema_refuses_a_bad_value_before_anything_is_created(cluster, helm_sdkpy):
    values: dict[str, Any] = {}
    set_value(values, "replicas=0")
    complaint = "/replicas"
    with pytest.raises(helm_sdkpy.InstallError, match="schema") as refused:
        await install(helm_sdkpy, cluster, values)
    assert complaint in str(refused.value)
    assert stored(cluster, "Deployment") == []


def test_the_settings_become_flags_that_serve_and_keep_read():
    rendered = render({
        "keeper": {"mode": "off", "after": 120, "afterDescheduled": 0, "maxInflight": 4, "maxPerDay": 1, "replicas": 3,
                   "resources": {"requests": {"memory": "300Mi"}, "limits": {"memory": "600Mi"}}},
        "pin": "preferred",
        "longhorn": {"namespace": "storage"}, "logLevel": "debug", "replicas": 3,
        "env": [{"name": "COLOCATE_KEEP_MAX_OUTBOUND_PER_NODE", "value": "3"}]})
    validate_strictly(rendered)
    keeper = one(rendered, "Deployment", KEEPER)
    env = {e["name"]: e.get("value") for e in container(keeper)["env"]}
    assert env["LOG_LEVEL"] == "debug" and keeper["spec"]["replicas"] == 3
    resources = container(keeper)["resources"]
    assert (resources["requests"]["memory"], resources["limits"]["memory"]) == ("300Mi", "600Mi")
    settings = served_settings(keeper, {"COLOCATE_KEEP_MAX_OUTBOUND_PER_NODE": env["COLOCATE_KEEP_MAX_OUTBOUND_PER_NODE"]})
    assert (settings.keep, settings.keep_after, settings.keep_after_descheduled, settings.keep_max_inflight,
            settings.keep_max_per_day, settings.longhorn_namespace, settings.keep_max_outbound_per_node) == (
        "off", 120.0, 0.0, 4, 1, "storage", 3)
    webhook = one(rendered, "Deployment", NS)
    env = {e["name"]: e.get("value") for e in container(webhook)["env"]}
    assert env["LOG_LEVEL"] == "debug" and webhook["spec"]["replicas"] == 3
    settings = served_settings(webhook)
    assert (settings.pin, settings.longhorn_namespace, settings.share_manager_rule) == ("preferred", "storage", True)
    assert not [a for a in container(webhook)["args"] if a.startswith("--keep")]  # serve runs no keeper
    # The share-manager entry follows Longhorn to its namespace, and only there.
    assert hooks(rendered)[SHARE_MANAGER_HOOK]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["storage"]}]


def serve_default(option: str) -> Any:
    """The default of one of serve's own flags (not a setting)."""
    return build_parser().parse_args(["serve"]).__dict__[option.lstrip("-").replace("-", "_")]


def test_the_body_budget_is_a_flag_only_when_it_is_not_the_default():
    default = container(one(render({}), "Deployment", NS))["args"]
    assert not [a for a in default if a.startswith("--body-budget")]
    rendered = render({"bodyBudgetMiB": 384})
    validate_strictly(rendered)
    args = container(one(rendered, "Deployment", NS))["args"]
    assert "--body-budget=384" in args
    assert build_parser().parse_args(["serve", *args]).body_budget == 384


def test_without_the_share_manager_rule_no_share_manager_pod_reaches_the_webhook():
    rendered = render({"shareManagerRule": False})
    validate_strictly(rendered)
    assert served_settings(one(rendered, "Deployment", NS)).share_manager_rule is False
    assert set(hooks(rendered)) == {VM_HOOK}


def test_placement_values_reach_the_webhook_and_the_certificate_job():
    digest = "sha256:" + "ab" * 32
    placement = {
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "system-cluster-critical",
        "imagePullSecrets": [{"name": "registry"}],
    }
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}}
    annotations = {"sidecar.istio.io/inject": "false"}
    resources = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
    rendered = render({
        **placement, "affinity": affinity, "podAnnotations": annotations, "resources": resources,
        "image": {"repository": "registry.example.com/kubevirt-colocate", "digest": digest, "pullPolicy": "Always"}})
    validate_strictly(rendered)
    [job] = [o for o in rendered if o["kind"] == "Job"]
    for workload in (one(rendered, "Deployment", NS), one(rendered, "Deployment", KEEPER), job):
        pod = workload["spec"]["template"]
        assert {k: pod["spec"].get(k) for k in placement} == placement, workload["kind"]
        assert pod["metadata"]["annotations"] == annotations
        assert [(c["image"], c["imagePullPolicy"]) for c in pod["spec"]["containers"]] == [
            (f"registry.example.com/kubevirt-colocate@{digest}", "Always")]
        assert pod["spec"].get("affinity") == (affinity if workload["metadata"]["name"] == NS else None)
    assert container(one(rendered, "Deployment", NS))["resources"] == resources


def namespaces_named(value: Any) -> list[str]:
    """Every `namespace` field anywhere in an object."""
    if isinstance(value, dict):
        return [v for k, v in value.items() if k == "namespace" and isinstance(v, str)] + \
            [n for v in value.values() for n in namespaces_named(v)]
    if isinstance(value, list):
        return [n for v in value for n in namespaces_named(v)]
    return []


@pytest.mark.parametrize("values", [{"monitoring": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}},
                                    BOTH], ids=["self-managed", "cert-manager"])
def test_another_namespace_is_followed_everywhere(values):
    """Installed into another namespace, every reference follows: the webhook's Service, its own
    namespace left out of the webhook, the bindings, the certificate's names and the CA injection."""
    rendered = render(copy.deepcopy(values), namespace="colocate-system")
    validate_strictly(rendered)
    assert {n for o in rendered for n in namespaces_named(o)} == {"colocate-system"}
    for hook in hooks(rendered).values():
        assert hook["clientConfig"]["service"]["namespace"] == "colocate-system"
    assert hooks(rendered)[VM_HOOK]["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system",
                                                                                             "colocate-system"]
    # The policy holds the ServiceAccount of this namespace to its own migrations, and no other.
    policy = one(rendered, "ValidatingAdmissionPolicy")
    foreign = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
               "metadata": {"generateName": "not-ours-", "namespace": "default"}, "spec": {"vmiName": "vm1"}}
    ours = service_account("colocate-system", KEEPER, pod="kubevirt-colocate-keeper-7d9c6b5f4-x2x9q")
    assert admit(policy, create_request(foreign, ours)).rules == ("create-labelled", "create-targeted")
    elsewhere = service_account(NS, KEEPER, pod="kubevirt-colocate-keeper-7d9c6b5f4-x2x9q")
    assert admit(policy, create_request(foreign, elsewhere)) == UNTOUCHED
    names = certs.service_names("kubevirt-colocate", "colocate-system")
    if values is BOTH:
        assert sorted(one(rendered, "Certificate", "kubevirt-colocate-serving")["spec"]["dnsNames"]) == sorted(names)
        annotations = one(rendered, "MutatingWebhookConfiguration")["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "colocate-system/kubevirt-colocate-serving"
    else:
        [job] = [o for o in rendered if o["kind"] == "Job"]
        args = build_parser().parse_args(["certs", *job["spec"]["template"]["spec"]["containers"][0]["args"]])
        assert certs.service_names(args.service, args.namespace) == names
        for kind in ("ServiceMonitor", "PrometheusRule", "ConfigMap"):
            assert one(rendered, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"


# --------------------------------------------------------------------------- the README, run as written


def section(title: str) -> str:
    """The text of one `## title` section of the README."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.S | re.M)
    assert found, f"README has no section {title!r}"
    return found[1]


def test_every_helm_command_of_the_readme_is_read_and_sets_known_values():
    found = commands(README)
    assert {c.verb for c in found} == {"install", "upgrade", "uninstall"}
    for command in found:
        assert command.release == RELEASE and command.namespace == NS, command.line
        assert command.chart in (None, "./charts/kubevirt-colocate"), command.line
        for path in leaves(command.values):
            assert schema_of(path), f"{command.line}: {path} is not a value of the chart"


def test_the_readme_kustomize_overlay_sets_the_image_and_report_mode(tmp_path):
    """The one paragraph on kustomize: its overlay, next to manifests/, renders what it says."""
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", section("Install"), re.S) if "../manifests" in b]
    overlay = ROOT / f".readme-overlay-{tmp_path.name}"  # next to manifests/, as the README's my-cluster/
    overlay.mkdir()
    try:
        (overlay / "kustomization.yaml").write_text(block)
        done = subprocess.run([tool, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(overlay)
    assert done.returncode == 0, done.stderr
    rendered = objects(done.stdout)
    keeper, job = one(rendered, "Deployment", KEEPER), one(rendered, "Job")
    assert served_settings(keeper).keep == "report"
    for workload in (one(rendered, "Deployment", NS), keeper, job):
        [image] = [c["image"] for c in workload["spec"]["template"]["spec"]["containers"]]
        assert image == f"registry.example.com/kubevirt-colocate:{__version__}"


async def job_runs(cluster, job: dict[str, Any], tmp_path: Path) -> str:
    """What the certificate Job's pod runs, as a process against the apiserver (with --kubeconfig
    for its in-cluster credentials)."""
    [certs] = job["spec"]["template"]["spec"]["containers"]
    assert certs["command"][:3] == ["python", "-m", "webhook"]
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, *certs["command"][1:], *certs["args"], "--kubeconfig",
        str(cluster.plane.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    return stdout.decode()


def the_job(cluster) -> dict[str, Any]:
    [job] = stored(cluster, "Job")
    return job


def certificate(cluster) -> tuple[dict[str, str], list[str]]:
    """The Secret's data and each webhook's caBundle."""
    secret = one(stored(cluster), "Secret", "kubevirt-colocate-tls")
    config = one(stored(cluster), "MutatingWebhookConfiguration")
    return secret.get("data") or {}, [w["clientConfig"].get("caBundle", "") for w in config["webhooks"]]


async def test_the_readme_install_upgrade_and_uninstall(cluster, helm_sdkpy, tmp_path):
    """Install in report mode, opt in with another key, switch to migrate, a new image, uninstall:
    each README command as written; `helm upgrade` keeps the certificate and replaces the Job."""
    install_, *upgrades, uninstall = steps = [c for c in commands(section("Install")) + commands(section("Opting a VM in"))
                                              + commands(section("Upgrade")) + commands(section("Uninstall"))]
    assert [c.verb for c in steps] == ["install"] + ["upgrade"] * len(upgrades) + ["uninstall"]
    config = configuration(helm_sdkpy, cluster)
    await run(helm_sdkpy, config, install_)
    deployments = {d["metadata"]["name"]: d for d in stored(cluster, "Deployment")}
    assert set(deployments) == {NS, KEEPER}  # the webhook and the keeper
    assert served_settings(deployments[KEEPER]).keep == "report"
    for deployment in deployments.values():
        assert container(deployment)["image"] == f"registry.example.com/kubevirt-colocate:{__version__}"
    # The Secret is there, empty, until the Job fills it and puts the CA into the webhook configuration.
    assert certificate(cluster) == ({}, ["", ""])
    first_job = the_job(cluster)
    out = await job_runs(cluster, first_job, tmp_path)
    assert "created" in out and "caBundle set on 2 webhook(s)" in out
    issued = certificate(cluster)
    assert issued[0] and all(issued[1])

    for number, upgrade in enumerate(upgrades):
        if number == 0:  # 10 minutes later: the finished Job has removed itself (ttlSecondsAfterFinished)
            cluster.delete(f"/apis/batch/v1/namespaces/{NS}/jobs/{first_job['metadata']['name']}")
        await run(helm_sdkpy, config, upgrade)
        # The certificate is untouched by Helm: same pair, same caBundle.
        assert certificate(cluster) == issued, upgrade.line
        job = the_job(cluster)  # one Job, created again; it keeps the pair (not due)
        assert "kept" in await job_runs(cluster, job, tmp_path)
        assert certificate(cluster) == issued
    # What the commands asked for, in the cluster: the flags and the webhook configuration agree.
    release = await helm_sdkpy.GetValues(config).run(RELEASE, all=True)
    assert (release["keeper"]["mode"], release["optInAnnotation"]) == ("migrate", "example.com/colocate")
    webhook, keeper = one(stored(cluster), "Deployment", NS), one(stored(cluster), "Deployment", KEEPER)
    configuration_ = one(stored(cluster), "MutatingWebhookConfiguration")
    assert served_settings(keeper).keep == "migrate"
    assert served_settings(webhook).opt_in_annotation == served_settings(keeper).opt_in_annotation == "example.com/colocate"
    assert shut_out(configuration_, "example.com/colocate") == []
    validate_strictly([webhook, keeper, configuration_])

    # Uninstall: the webhook configuration goes first (no call to a webhook being removed), then the rest.
    deleted_from = len(cluster.calls)
    await run(helm_sdkpy, config, uninstall)
    deletes = [path for method, path in cluster.calls[deleted_from:] if method == "DELETE"]
    assert deletes and "/mutatingwebhookconfigurations/" in deletes[0]
    left = {(o["kind"], o["metadata"]["name"]) for o in stored(cluster)}
    assert ("Namespace", NS) in left and {k for k in left if k[0] != "Namespace"} == set()  # the namespace stays


async def test_a_new_image_replaces_the_certificate_job_and_keeps_the_certificate(cluster, helm_sdkpy, tmp_path):
    """A Job's pod template cannot change in place: a new image is a new Job, the old one goes."""
    config = configuration(helm_sdkpy, cluster)
    await install(helm_sdkpy, cluster)
    old = the_job(cluster)
    await job_runs(cluster, old, tmp_path)
    issued = certificate(cluster)
    await helm_sdkpy.Upgrade(config).run(RELEASE, str(CHART), values={"image": {"tag": "0.1.1"}}, reuse_values=True,
                                         wait=False, timeout=60)
    new = the_job(cluster)
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert new["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":0.1.1")
    assert "kept" in await job_runs(cluster, new, tmp_path)
    assert certificate(cluster) == issued
    # An upgrade that changes nothing of the Job leaves it as it is.
    await helm_sdkpy.Upgrade(config).run(RELEASE, str(CHART), values={"keeper": {"mode": "report"}}, reuse_values=True,
                                         wait=False, timeout=60)
    assert the_job(cluster)["metadata"]["uid"] == new["metadata"]["uid"]
