"""The install as `kubectl kustomize` renders it: both variants, checked object by object.

Every object with a Kubernetes schema is validated strictly (1.30 and the newest schema
shipped with kubernetes-validate). cert-manager's Issuer and Certificate are custom
resources without a schema there, so their fields are checked by hand below.
"""
import copy
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.support import admission_policy
import kubernetes_validate
import pytest
import yaml
from tests.support.kube import LONGHORN_NS, VALIDATE_VERSIONS, kubectl, load, migration_target, rwx_disk

from webhook.tools import certs
from webhook.__main__ import DEFAULT_CERT_DIR, build_parser, settings_from
from webhook.config import Settings
from webhook.keeper.records import state_name
from webhook.keeper.lease import lease_namespace
from webhook.kinds import DEPLOYMENT, LEASE, LONGHORN_SETTING, LONGHORN_VOLUME, VMIM
from webhook.kinds import RULE_RESOURCES as RESOURCES

from webhook import __version__

ROOT = Path(__file__).parent.parent
NS = "kubevirt-colocate"
KEEPER = "kubevirt-colocate-keeper"  # the keeper's Deployment, ServiceAccount and ClusterRole
SECRET = "kubevirt-colocate-tls"
VERSION = __version__
IMAGE = f"ghcr.io/kubevirt-colocate/kubevirt-colocate:{VERSION}"
CERT_MANAGER_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}
VARIANTS = {"self-managed": "manifests", "cert-manager": "manifests/cert-manager"}


@functools.cache
def _render(variant):
    tool = kubectl()
    if tool is None:
        return None
    done = subprocess.run([tool, "kustomize", VARIANTS[variant]], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def render(variant):
    """The objects of one variant, as `kubectl kustomize` renders them (fresh copies)."""
    objects = _render(variant)
    if objects is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    return copy.deepcopy(objects)


@pytest.fixture(params=list(VARIANTS))
def rendered(request):
    return request.param, render(request.param)


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def one(objects, kind, name=None):
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def pod_templates(objects):
    return [o["spec"]["template"] for o in objects if o["kind"] in ("Deployment", "Job")]


def selects(selector, labels):
    """metav1.LabelSelector semantics."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def namespace_labels(name):
    return {"kubernetes.io/metadata.name": name}


# --------------------------------------------------------------------------- schemas


def test_every_object_validates_strictly(rendered):
    variant, objects = rendered
    unchecked = []
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CERT_MANAGER_KINDS:
            unchecked.append(obj["kind"])
            continue
        for version in VALIDATE_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
    assert (variant == "cert-manager") == bool(unchecked)  # only the overlay has custom resources


def test_the_install_is_complete(rendered):
    variant, objects = rendered
    kinds = {o["kind"] for o in objects}
    assert kinds >= {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service",
                     "PodDisruptionBudget", "NetworkPolicy", "MutatingWebhookConfiguration",
                     "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Role", "RoleBinding"}
    # Two components, each with its account, Deployment, PDB and NetworkPolicy.
    for kind in ("ServiceAccount", "Deployment", "PodDisruptionBudget", "NetworkPolicy"):
        assert {NS, KEEPER} <= {o["metadata"]["name"] for o in by_kind(objects, kind)}, kind
    if variant == "self-managed":
        assert kinds >= {"Job", "Secret"}
        assert not kinds & {"Issuer", "Certificate"}
    else:
        assert not kinds & {"Job", "Secret"}  # nothing of the self-managed path
        assert {o["metadata"]["name"] for o in objects if o["kind"].startswith("Cluster")} == {NS, KEEPER}
        assert {o["metadata"]["name"] for o in objects if o["kind"] in ("Role", "RoleBinding")} == {KEEPER}  # the Lease's
    cluster_scoped = ("Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                      "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    namespaced = [o for o in objects if o["kind"] not in cluster_scoped]
    assert {o["metadata"].get("namespace") for o in namespaced} == {NS}
    # kustomize does not know the policy's kinds are cluster-scoped: the kustomizations take it off.
    assert not [o["kind"] for o in objects if o["kind"] in cluster_scoped and "namespace" in o["metadata"]]
    assert one(objects, "Namespace")["metadata"]["name"] == NS


# --------------------------------------------------------------------------- RBAC


def rules_of(objects, kind, name):
    return one(objects, kind, name)["rules"]


def test_no_wildcards_anywhere(rendered):
    _, objects = rendered
    for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in (rule.get(field) or []), (role["metadata"]["name"], rule)


def granted_to(objects, account):
    """(namespace or None, group, resource, name or None) -> verbs, for everything the bindings of the
    install grant to the ServiceAccount `account` of the install's namespace."""
    granted = {}
    for binding in by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding"):
        if {"kind": "ServiceAccount", "name": account, "namespace": NS} not in binding["subjects"]:
            continue
        role = one(objects, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for name in rule.get("resourceNames") or [None]:
                        granted.setdefault((where, group, resource, name), set()).update(rule["verbs"])
    return granted


def test_the_webhooks_account_reads_and_writes_only_events(rendered):
    """The pod the apiserver calls for every opted-in pod holds no write power but Events: it may
    get, list and watch what the rules read and its own webhook configuration (the opt-in key's
    check), and create and patch Events."""
    _, objects = rendered
    deployment = one(objects, "Deployment", NS)
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == NS
    args = build_parser().parse_args(["serve", *deployment["spec"]["template"]["spec"]["containers"][0].get("args", [])])
    assert args.webhook_configuration == NS == webhooks_configuration_name(objects)
    granted = granted_to(objects, NS)
    read = {"get", "list", "watch"}
    for resource in RESOURCES:  # what the webhook's store reads
        assert granted.pop((None, resource.group, resource.plural, None)) == read, resource
    assert granted.pop((None, "admissionregistration.k8s.io", "mutatingwebhookconfigurations", NS)) == read
    assert granted.pop((None, "", "events", None)) == {"create", "patch"}
    assert granted.pop((None, "events.k8s.io", "events", None)) == {"create", "patch"}
    assert granted == {}  # nothing else: no Lease, no migration written, no Setting, no secrets
    verbs = {verb for (_, group, resource, _), given in granted_to(objects, NS).items() for verb in given
             if resource != "events"}
    assert verbs <= read


def test_the_keepers_account_reads_what_a_pass_reads_and_writes_its_migrations_lease_and_events(rendered):
    _, objects = rendered
    deployment = one(objects, "Deployment", KEEPER)
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == KEEPER
    granted = granted_to(objects, KEEPER)
    read = {"get", "list", "watch"}
    for resource in RESOURCES:  # its own caches, and VMIs with its KubeVirt watch
        assert granted.pop((None, resource.group, resource.plural, None)) == read, resource
    # Migrations watched, created and deleted (ours, to cancel them: the policy holds it to ours).
    assert granted.pop((None, VMIM.group, VMIM.plural, None)) == read | {"create", "delete"}
    # Longhorn's Settings each pass (does a share-manager restart reboot VMs?), and the Volumes of
    # a VM paused on an I/O error, one by name (is its mount stale?).
    assert granted.pop((None, LONGHORN_SETTING.group, LONGHORN_SETTING.plural, None)) == {"get", "list"}
    assert granted.pop((None, LONGHORN_VOLUME.group, LONGHORN_VOLUME.plural, None)) == {"get"}
    # A VM it recovered, unpaused (KubeVirt's subresource, as `virtctl unpause` calls it).
    assert granted.pop((None, "subresources.kubevirt.io", "virtualmachineinstances/unpause", None)) == {"update"}
    # Its Events written; KubeVirt's IOerror Events on VMIs watched (which disk failed, and why).
    assert granted.pop((None, "", "events", None)) == {"create", "patch", "list", "watch"}
    assert granted.pop((None, "events.k8s.io", "events", None)) == {"create", "patch"}
    # Its Lease, in the install namespace only.
    assert granted.pop((NS, LEASE.group, LEASE.plural, None)) == {"create"}
    assert granted.pop((NS, LEASE.group, LEASE.plural, Settings().lease_name)) == {"get", "update"}
    # Its state beside the Lease: one ConfigMap (create cannot be narrowed by name).
    assert granted.pop((NS, "", "configmaps", None)) == {"create"}
    assert granted.pop((NS, "", "configmaps", state_name(Settings()))) == {"get", "update"}
    # The webhook's Deployment, by name: keeper settings an older install left there hold it to report;
    # its own: the incident's pause (docs/operations.md, Pausing the keeper).
    assert granted.pop((NS, DEPLOYMENT.group, DEPLOYMENT.plural, NS)) == {"get"}
    assert granted.pop((NS, DEPLOYMENT.group, DEPLOYMENT.plural, KEEPER)) == {"get"}
    assert granted == {}  # nothing else: no secrets, no writes to what it reads


def test_the_keeper_may_hold_only_its_lease_and_state_and_read_the_two_deployments_in_the_install_namespace(
        rendered):
    _, objects = rendered
    role = one(objects, "Role", KEEPER)
    assert role["metadata"]["namespace"] == NS
    assert role["rules"] == [
        # create cannot be restricted by name (the name is not in the request's URL)
        {"apiGroups": [LEASE.group], "resources": [LEASE.plural], "verbs": ["create"]},
        {"apiGroups": [LEASE.group], "resources": [LEASE.plural], "resourceNames": [Settings().lease_name],
         "verbs": ["get", "update"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [state_name(Settings())],
         "verbs": ["get", "update"]},
        {"apiGroups": [DEPLOYMENT.group], "resources": [DEPLOYMENT.plural], "resourceNames": [NS, KEEPER],
         "verbs": ["get"]},
    ]
    binding = one(objects, "RoleBinding", KEEPER)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": KEEPER}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": KEEPER, "namespace": NS}]


def keeper_settings(objects):
    container = one(objects, "Deployment", KEEPER)["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "webhook", "keep"]
    return container, settings_from(build_parser().parse_args(["keep", *container["args"]]))


def test_the_keeper_deployment_runs_keep_with_its_lease_in_its_own_namespace(rendered, tmp_path):
    _, objects = rendered
    container, settings = keeper_settings(objects)
    assert settings.keep == "migrate" and settings.lease_name == Settings().lease_name
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_NAME"] == "metadata.name" and env["POD_NAMESPACE"] == "metadata.namespace"
    # The downward API gives the pod's namespace: the Lease goes where the Role allows it.
    assert lease_namespace(settings, {"POD_NAMESPACE": NS}, tmp_path / "no-mount") == NS
    # Two replicas, one acting; a rollout and a drain keep one, which takes the Lease over.
    keeper = one(objects, "Deployment", KEEPER)
    assert keeper["spec"]["replicas"] == 2
    assert keeper["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    budget = one(objects, "PodDisruptionBudget", KEEPER)
    assert budget["spec"]["maxUnavailable"] == 1
    assert selects(budget["spec"]["selector"], keeper["spec"]["template"]["metadata"]["labels"])
    resources = container["resources"]
    assert resources["requests"]["memory"] == "768Mi" and resources["limits"]["memory"] == "1280Mi"


def test_the_webhook_runs_no_keeper(rendered):
    _, objects = rendered
    container = one(objects, "Deployment", NS)["spec"]["template"]["spec"]["containers"][0]
    build_parser().parse_args(["serve", *container.get("args", [])])  # a keeper's flag would exit 2 here
    assert not [a for a in container.get("args", []) if a.startswith("--keep") or a.startswith("--lease")]
    assert "POD_NAMESPACE" not in {e["name"] for e in container["env"]}  # it holds no Lease


def test_the_certificate_job_may_touch_only_its_secret_and_webhook_configuration():
    objects = render("self-managed")
    assert rules_of(objects, "Role", "kubevirt-colocate-certs") == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SECRET], "verbs": ["get", "patch"]}]
    assert rules_of(objects, "ClusterRole", "kubevirt-colocate-certs") == [
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
         "resourceNames": [NS], "verbs": ["get", "patch"]}]
    # No `create` is needed: the Secret it fills is part of the install, and has no data to re-apply.
    secret = one(objects, "Secret", SECRET)
    assert "data" not in secret and "stringData" not in secret


def misnamed_grants(objects):
    """The RBAC objects not named for the one account they serve: a binding whose name, role's name
    and ServiceAccount's name differ, a role no binding of its name binds."""
    found = []
    bindings = by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding")
    for binding in bindings:
        names = {binding["metadata"]["name"], binding["roleRef"]["name"]} | {s["name"] for s in binding["subjects"]}
        if len(binding["subjects"]) != 1 or len(names) != 1:
            found.append(f"{binding['kind']} {binding['metadata']['name']}: {sorted(names)}")
    bound = {(b["roleRef"]["kind"], b["metadata"].get("namespace"), b["metadata"]["name"]) for b in bindings}
    for role in by_kind(objects, "ClusterRole") + by_kind(objects, "Role"):
        if (role["kind"], role["metadata"].get("namespace"), role["metadata"]["name"]) not in bound:
            found.append(f"{role['kind']} {role['metadata']['name']}: no binding of its name")
    return found


@functools.cache
def _with_spare_vms(where):
    """The install with the spare-vms component (an overlay beside nothing: paths to manifests/)."""
    tool = kubectl()
    if tool is None:
        return None
    overlay = Path(where) / "spare-vms-overlay"
    overlay.mkdir(parents=True, exist_ok=True)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(ROOT / "manifests", overlay)],
        "components": [os.path.relpath(ROOT / "manifests" / "spare-vms", overlay)]}))
    done = subprocess.run([tool, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def test_every_grant_is_named_for_the_account_it_serves(rendered, tmp_path_factory):
    """An auditor reads whose a grant is from its name: every Role, ClusterRole and binding bears
    the name of the one ServiceAccount it serves (`kubevirt-colocate-keeper`: the keeper's, in the
    install namespace and in Longhorn's alike), and each pod runs as an account of the install."""
    _, objects = rendered
    spare = _with_spare_vms(str(tmp_path_factory.getbasetemp()))
    for found in (objects, spare or []):
        assert misnamed_grants(found) == []
        accounts = {o["metadata"]["name"] for o in by_kind(found, "ServiceAccount")}
        for binding in by_kind(found, "ClusterRoleBinding") + by_kind(found, "RoleBinding"):
            [subject] = binding["subjects"]
            assert (subject["kind"], subject["namespace"]) == ("ServiceAccount", NS) and subject["name"] in accounts
        for template in pod_templates(found):
            assert template["spec"]["serviceAccountName"] in accounts
    assert spare is None or {(o["kind"], o["metadata"]["namespace"]) for o in spare
                             if o["metadata"].get("namespace") == LONGHORN_NS} == {
        ("Role", LONGHORN_NS), ("RoleBinding", LONGHORN_NS)}


def test_the_naming_rule_finds_a_grant_named_for_another_account():
    """0.2.0's Role and RoleBinding `kubevirt-colocate`, the webhook's name, bound to the keeper."""
    role = {"kind": "Role", "metadata": {"name": NS, "namespace": NS}, "rules": []}
    binding = {"kind": "RoleBinding", "metadata": {"name": NS, "namespace": NS},
               "roleRef": {"kind": "Role", "name": NS}, "subjects": [{"kind": "ServiceAccount", "name": KEEPER}]}
    assert misnamed_grants([role, binding]) == [f"RoleBinding {NS}: ['{NS}', '{KEEPER}']"]
    assert misnamed_grants([role]) == [f"Role {NS}: no binding of its name"]


def test_the_policy_holds_the_account_the_keeper_runs_as_to_its_own_migrations(rendered):
    """What RBAC cannot narrow (create and delete on every migration), the ValidatingAdmissionPolicy
    does, for exactly the ServiceAccount the Deployment runs as and the ClusterRoleBinding grants:
    the policy tested in tests/test_admission_policy.py is the one installed."""
    _, objects = rendered
    vap = one(objects, "ValidatingAdmissionPolicy")
    assert {k: v for k, v in vap.items() if k != "metadata"} == {
        k: v for k, v in admission_policy.policy().items() if k != "metadata"}
    deployment = one(objects, "Deployment", KEEPER)
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    binding = one(objects, "ClusterRoleBinding", KEEPER)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                    "namespace": deployment["metadata"]["namespace"]}]
    username = f"system:serviceaccount:{deployment['metadata']['namespace']}:{account}"
    assert username == admission_policy.service_account_user()["username"]
    [condition] = vap["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{username}'"
    # The rules cover what the ClusterRole grants beyond reading: create and delete of migrations.
    granted = {verb for rule in rules_of(objects, "ClusterRole", KEEPER) if VMIM.plural in rule["resources"]
               for verb in rule["verbs"]} - {"get", "list", "watch"}
    [constraint] = vap["spec"]["matchConstraints"]["resourceRules"]
    assert (constraint["apiGroups"], constraint["resources"]) == ([VMIM.group], [VMIM.plural])
    assert {op.lower() for op in constraint["operations"]} == granted == {"create", "delete"}
    assert vap["spec"]["failurePolicy"] == "Fail"
    policy_binding = one(objects, "ValidatingAdmissionPolicyBinding")
    assert policy_binding["spec"]["policyName"] == vap["metadata"]["name"]
    assert "Deny" in policy_binding["spec"]["validationActions"]
    assert set(policy_binding["spec"]) == {"policyName", "validationActions"}  # no params, every request it matches


def test_the_keeper_may_write_its_own_state_and_no_other_configmap(rendered):
    """The keeper keeps what must outlive a leader in one ConfigMap named after its Lease: it may get
    and update that one alone (and create ConfigMaps: Kubernetes cannot narrow `create` by name)."""
    _, objects = rendered
    grants = [rule for rule in rules_of(objects, "Role", KEEPER) if "configmaps" in rule["resources"]]
    assert sorted((rule["verbs"], rule.get("resourceNames")) for rule in grants) == [
        (["create"], None), (["get", "update"], [state_name(Settings())])]
    binding = one(objects, "RoleBinding", KEEPER)
    assert [s["name"] for s in binding["subjects"]] == [KEEPER]


# --------------------------------------------------------------------------- workloads


def test_every_pod_is_hardened_and_meets_the_restricted_standard(rendered):
    _, objects = rendered
    assert one(objects, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    templates = pod_templates(objects)
    assert templates
    for template in templates:
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
        for container in spec["containers"] + spec.get("initContainers", []):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert container["image"] == IMAGE
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"]


def test_the_webhook_deployment_is_highly_available(rendered):
    _, objects = rendered
    deployment = one(objects, "Deployment", NS)
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert selects(deployment["spec"]["selector"], labels)
    spread = pod["spec"]["topologySpreadConstraints"]
    assert "kubernetes.io/hostname" in {c["topologyKey"] for c in spread}
    assert all(selects(c["labelSelector"], labels) for c in spread)
    pdb = one(objects, "PodDisruptionBudget", NS)
    assert selects(pdb["spec"]["selector"], labels)
    assert pdb["spec"].get("maxUnavailable") == 1 or pdb["spec"].get("minAvailable") == 1


def ports_of(container):
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def test_probes_and_ports(rendered):
    _, objects = rendered
    container = one(objects, "Deployment", NS)["spec"]["template"]["spec"]["containers"][0]
    ports = ports_of(container)
    assert ports == {"webhook": 9443, "metrics": 8080}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in (container["readinessProbe"], container["livenessProbe"]):
        assert ports[probe["httpGet"]["port"]] == 8080 and probe["httpGet"].get("scheme", "HTTP") == "HTTP"


def test_the_server_reads_the_certificate_where_the_secret_is_mounted(rendered):
    _, objects = rendered
    spec = one(objects, "Deployment", NS)["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert "command" not in container  # the image's entrypoint: python -m webhook serve
    args = build_parser().parse_args(["serve", *container.get("args", [])])
    assert args.port == ports_of(container)["webhook"]
    assert (args.tls_cert_file, args.tls_key_file) == (f"{DEFAULT_CERT_DIR}/tls.crt", f"{DEFAULT_CERT_DIR}/tls.key")
    mount = one([{"kind": "m", **m} for m in container["volumeMounts"]], "m")
    assert mount["mountPath"] == DEFAULT_CERT_DIR and mount["readOnly"] is True and "subPath" not in mount
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == SECRET
    # The kubelet waits for these keys (filled after install), then keeps them current.
    assert [i["key"] for i in volume["secret"]["items"]] == ["tls.crt", "tls.key"]
    assert volume["secret"]["defaultMode"] == 0o440 and spec["securityContext"]["fsGroup"] == 65532


def test_the_certificate_job_runs_certs_for_the_service():
    objects = render("self-managed")
    job = one(objects, "Job", "kubevirt-colocate-certs")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "webhook", "certs"]
    args = build_parser().parse_args(["certs", *container["args"]])
    service = one(objects, "Service", NS)
    assert (args.service, args.namespace) == (service["metadata"]["name"], service["metadata"]["namespace"])
    assert args.secret == SECRET and args.patch_webhook == one(objects, "MutatingWebhookConfiguration")["metadata"]["name"]
    assert args.out is None  # nothing written to the read-only filesystem
    assert job["spec"]["ttlSecondsAfterFinished"] > 0


def test_the_service_and_network_policy_reach_exactly_the_webhook_and_metrics_ports(rendered):
    _, objects = rendered
    pod = one(objects, "Deployment", NS)["spec"]["template"]
    ports = ports_of(pod["spec"]["containers"][0])
    service = one(objects, "Service", NS)
    assert selects({"matchLabels": service["spec"]["selector"]}, pod["metadata"]["labels"])
    webhook_port = next(p for p in service["spec"]["ports"] if p["port"] == 443)
    assert ports[webhook_port["targetPort"]] == 9443
    policy = one(objects, "NetworkPolicy", NS)
    assert selects(policy["spec"]["podSelector"], pod["metadata"]["labels"])
    assert "Ingress" in policy["spec"]["policyTypes"]
    allowed = {(p["port"], p.get("protocol", "TCP")) for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == {(9443, "TCP"), (8080, "TCP")}


# --------------------------------------------------------------------------- webhook configuration


def webhooks(objects):
    return {w["name"]: w for w in one(objects, "MutatingWebhookConfiguration", NS)["webhooks"]}


def test_both_webhooks_are_safe_to_run_in_front_of_every_pod(rendered):
    _, objects = rendered
    service = one(objects, "Service", NS)
    hooks = webhooks(objects)
    assert set(hooks) == {"vm.colocate.kubevirt-scheduler.io", "share-manager.colocate.kubevirt-scheduler.io"}
    for hook in hooks.values():
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] in ("None", "NoneOnDryRun")
        assert hook["failurePolicy"] == "Ignore"
        assert hook["timeoutSeconds"] <= 10
        assert hook["reinvocationPolicy"] == "IfNeeded"
        assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                  "resources": ["pods"], "scope": "Namespaced"}]
        target = hook["clientConfig"]["service"]
        assert (target["name"], target["namespace"], target["path"]) == (NS, NS, "/mutate")
        assert target["port"] in [p["port"] for p in service["spec"]["ports"]]
        for namespace in ("kube-system", NS):
            assert not selects(hook["namespaceSelector"], namespace_labels(namespace)), (hook["name"], namespace)


def test_the_vm_webhook_sees_only_virt_launcher_pods_and_never_migration_targets(rendered):
    _, objects = rendered
    hook = webhooks(objects)["vm.colocate.kubevirt-scheduler.io"]
    assert selects(hook["objectSelector"], load("virt-launcher-pod.yaml")["metadata"]["labels"])
    assert not selects(hook["objectSelector"], migration_target()["metadata"]["labels"])
    share_manager_pod = next(o for o in rwx_disk("d", "node-a") if o["kind"] == "Pod")
    assert not selects(hook["objectSelector"], share_manager_pod["metadata"]["labels"])
    assert selects(hook["namespaceSelector"], namespace_labels("default"))
    [condition] = hook["matchConditions"]
    annotation = Settings().opt_in_annotation
    assert f"'{annotation}' in object.metadata.annotations" in condition["expression"]
    assert re.search(rf"annotations\['{re.escape(annotation)}'\] == 'true'", condition["expression"])


def test_the_share_manager_webhook_sees_only_longhorn_share_managers(rendered):
    _, objects = rendered
    hook = webhooks(objects)["share-manager.colocate.kubevirt-scheduler.io"]
    share_manager_pod = next(o for o in rwx_disk("d", "node-a") if o["kind"] == "Pod")
    assert selects(hook["objectSelector"], share_manager_pod["metadata"]["labels"])
    assert not selects(hook["objectSelector"], load("virt-launcher-pod.yaml")["metadata"]["labels"])
    assert selects(hook["namespaceSelector"], namespace_labels(LONGHORN_NS))
    assert LONGHORN_NS == Settings().longhorn_namespace
    for other in ("default", "kube-system", NS):
        assert not selects(hook["namespaceSelector"], namespace_labels(other))
    assert "matchConditions" not in hook  # share-manager pods carry no opt-in


def test_the_ca_bundle_is_left_to_whoever_manages_certificates(rendered):
    variant, objects = rendered
    config = one(objects, "MutatingWebhookConfiguration", NS)
    assert all("caBundle" not in w["clientConfig"] for w in config["webhooks"])
    annotations = config["metadata"].get("annotations") or {}
    if variant == "self-managed":
        assert "cert-manager.io/inject-ca-from" not in annotations
        return
    namespace, name = annotations["cert-manager.io/inject-ca-from"].split("/")
    serving = one(objects, "Certificate", name)
    assert serving["metadata"]["namespace"] == namespace == NS


# --------------------------------------------------------------------------- cert-manager (no schema: by hand)


def test_cert_manager_issues_the_serving_certificate_from_its_own_ca():
    objects = render("cert-manager")
    issuers = {o["metadata"]["name"]: o for o in by_kind(objects, "Issuer")}
    certificates = {o["metadata"]["name"]: o for o in by_kind(objects, "Certificate")}
    for obj in list(issuers.values()) + list(certificates.values()):
        assert obj["apiVersion"] == "cert-manager.io/v1" and obj["metadata"]["namespace"] == NS
        assert set(obj) == {"apiVersion", "kind", "metadata", "spec"}
    serving = certificates["kubevirt-colocate-serving"]["spec"]
    assert serving["secretName"] == SECRET
    assert sorted(serving["dnsNames"]) == sorted(certs.service_names(NS, NS))
    assert "server auth" in serving["usages"] and not serving.get("isCA")
    assert serving["privateKey"]["algorithm"] in ("ECDSA", "RSA")
    assert serving["privateKey"]["size"] >= (256 if serving["privateKey"]["algorithm"] == "ECDSA" else 2048)
    # serving <- CA Issuer <- CA Certificate <- self-signed Issuer: each reference resolves.
    ca_issuer = issuers[serving["issuerRef"]["name"]]
    assert serving["issuerRef"]["kind"] == "Issuer"
    ca_certificate = next(c for c in certificates.values() if c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"])
    assert ca_certificate["spec"]["isCA"] is True
    assert "selfSigned" in issuers[ca_certificate["spec"]["issuerRef"]["name"]]["spec"]


def test_the_opt_in_component_sets_the_flag_and_the_match_condition_from_one_value(tmp_path):
    """An overlay names another opt-in key once (manifests/opt-in): the server reads it and the
    vm webhook's matchConditions let exactly that key through, so the two cannot disagree."""
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    overlay = ROOT / ".opt-in-test" / tmp_path.name  # inside the repository: kustomize loads bases by relative path
    overlay.mkdir(parents=True)
    try:
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
            "namespace": NS, "resources": ["../../manifests"], "components": ["../../manifests/opt-in"],
            "configMapGenerator": [{"name": "kubevirt-colocate-opt-in", "literals": ["annotation=example.com/colocate"]}],
        }))
        done = subprocess.run([tool, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(ROOT / ".opt-in-test")
    assert done.returncode == 0, done.stderr
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    [config] = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].startswith("kubevirt-colocate-opt-in")]
    assert config["metadata"]["namespace"] == NS and config["data"] == {"annotation": "example.com/colocate"}
    [deployment] = [o for o in by_kind(objects, "Deployment") if o["metadata"]["name"] == "kubevirt-colocate"]
    [container] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "webhook"]
    env = {e["name"]: e for e in container["env"]}
    assert env["COLOCATE_OPT_IN_ANNOTATION"]["valueFrom"]["configMapKeyRef"] == {
        "name": config["metadata"]["name"], "key": "annotation"}
    args = build_parser().parse_args(["serve", *container.get("args", [])])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLOCATE_OPT_IN_ANNOTATION", config["data"]["annotation"])
        assert settings_from(args).opt_in_annotation == "example.com/colocate"
    [condition] = webhooks(objects)["vm.colocate.kubevirt-scheduler.io"]["matchConditions"]
    assert "kubevirt-scheduler/co-schedule" not in condition["expression"]
    assert "'example.com/colocate' in object.metadata.annotations" in condition["expression"]
    assert "annotations['example.com/colocate'] == 'true'" in condition["expression"]
    for version in VALIDATE_VERSIONS:
        kubernetes_validate.validate(deployment, version, strict=True)


def test_migration_targets_are_always_left_untouched_and_no_install_offers_otherwise(rendered):
    """The server has no such setting and the vm webhook never sees a target pod (its
    objectSelector, in both installs); no manifest, value or template offers another mode."""
    _, objects = rendered
    container = one(objects, "Deployment", NS)["spec"]["template"]["spec"]["containers"][0]
    settings_from(build_parser().parse_args(["serve", *container["args"]]))  # every argument a flag serve has
    assert not any("migration-targets" in arg for arg in container["args"])
    assert not selects(webhooks(objects)["vm.colocate.kubevirt-scheduler.io"]["objectSelector"],
                       migration_target()["metadata"]["labels"])
    offered = [str(path.relative_to(ROOT)) for folder in ("manifests", "charts") for path in (ROOT / folder).rglob("*")
               if path.is_file() and re.search(r"migration-?targets", path.read_text(), re.I)]
    assert offered == []


def webhooks_configuration_name(objects):
    [configuration] = by_kind(objects, "MutatingWebhookConfiguration")
    return configuration["metadata"]["name"]
