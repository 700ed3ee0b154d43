"""The aim-evacuations install option (manifests/aim-evacuations, the chart's `aimEvacuations`): a
third webhook entry that only KubeVirt's own, not yet aimed evacuations reach, the webhook's flag, and
reading migrations the one grant it adds; without it, the install is as it was."""
import copy
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.support.admission_policy import evaluate
from tests.support.helm import render
from tests.support.kube import VIRT_CONTROLLER, evacuation, kubectl, migration, migration_review

from webhook.__main__ import build_parser, settings_from

ROOT = Path(__file__).parent.parent
NS = "kubevirt-colocate"
HOOK = "evacuation.colocate.kubevirt-scheduler.io"


def kustomized(tmp_path, component=None):
    """`kubectl kustomize` of the install, with the component when given (an overlay next to manifests/)."""
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    overlay = tmp_path / "overlay"
    overlay.mkdir(exist_ok=True)
    body = {"resources": [os.path.relpath(ROOT / "manifests", overlay)]}
    if component:
        body["components"] = [os.path.relpath(ROOT / "manifests" / component, overlay)]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(body))
    done = subprocess.run([tool, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def one(objects, kind, name):
    [found] = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def hooks(objects):
    return {w["name"]: w for w in one(objects, "MutatingWebhookConfiguration", NS)["webhooks"]}


@pytest.fixture(scope="module")
def installs(tmp_path_factory):
    return (kustomized(tmp_path_factory.mktemp("plain")),
            kustomized(tmp_path_factory.mktemp("aim"), "aim-evacuations"))


def test_the_option_adds_one_entry_one_flag_and_reading_migrations(installs):
    plain, aimed = installs
    assert set(hooks(aimed)) - set(hooks(plain)) == {HOOK}
    hook = hooks(aimed)[HOOK]
    assert hook["rules"] == [{"apiGroups": ["kubevirt.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["virtualmachineinstancemigrations"], "scope": "Namespaced"}]
    assert (hook["failurePolicy"], hook["sideEffects"]) == ("Ignore", "NoneOnDryRun") and hook["timeoutSeconds"] <= 5
    assert hook["reinvocationPolicy"] == "Never"  # one call per evacuation: virt-api's mutator keeps what we add
    assert hook["clientConfig"]["service"] | {"port": 0} == {"name": NS, "namespace": NS, "path": "/mutate", "port": 0}
    args = one(aimed, "Deployment", NS)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert settings_from(build_parser().parse_args(["serve", *args])).aim_evacuations is True
    added = [r for r in one(aimed, "ClusterRole", NS)["rules"] if r not in one(plain, "ClusterRole", NS)["rules"]]
    assert added == [{"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstancemigrations"],
                      "verbs": ["get", "list", "watch"]}]  # reads only: the webhook still writes nothing but Events
    changed = {(o["kind"], o["metadata"]["name"]) for o in aimed if o not in plain}
    assert changed == {("MutatingWebhookConfiguration", NS), ("Deployment", NS), ("ClusterRole", NS)}


def test_without_the_option_nothing_sees_a_migration(installs):
    plain, _ = installs
    args = one(plain, "Deployment", NS)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert settings_from(build_parser().parse_args(["serve", *args])).aim_evacuations is False
    assert all(rule["resources"] == ["pods"] for hook in hooks(plain).values() for rule in hook["rules"])
    assert not [r for r in one(plain, "ClusterRole", NS)["rules"] if "virtualmachineinstancemigrations" in r["resources"]]


def request(obj, user=VIRT_CONTROLLER):
    return migration_review(obj, user)["request"]


def keepers():
    ours = migration("kubevirt-colocate-x1", "vm1", ours=True)
    ours["metadata"]["annotations"] = {"kubevirt.io/evacuationMigration": "node-a"}  # never so, but even then
    return ours


CASES = [
    ("virt-controller's evacuation", request(evacuation("vm1", "node-a")), True),
    ("virt-controller's account in another namespace",
     request(evacuation("vm1", "node-a"), "system:serviceaccount:tenant-a:kubevirt-controller"), False),
    ("already aimed", request(evacuation("vm1", "node-a", added={"kubernetes.io/hostname": "node-b"})), False),
    ("a user's migration", request(evacuation("vm1", "node-a"), "kubernetes-admin"), False),
    ("the keeper's migration", request(keepers(), "system:serviceaccount:kubevirt-colocate:kubevirt-colocate-keeper"), False),
    ("a workload update", request(migration("kubevirt-workload-update-x", "vm1")), False),
    ("an account named alike", request(evacuation("vm1", "node-a"), "kubevirt-controller"), False),
]


@pytest.mark.parametrize("name, sent, reaches", CASES, ids=[c[0] for c in CASES])
def test_only_kubevirts_own_evacuations_not_yet_aimed_reach_the_webhook(installs, name, sent, reaches):
    """The entry's matchConditions, evaluated as the apiserver does (CEL): every one must be true."""
    _, aimed = installs
    conditions = hooks(aimed)[HOOK]["matchConditions"]
    assert all(evaluate(c["expression"], copy.deepcopy(sent)) for c in conditions) is reaches


def test_kubevirts_namespace_is_the_charts_value_for_the_flag_and_the_match_condition():
    """The chart's kubevirtNamespace: the webhook's --kubevirt-namespace and the entry's account alike."""
    rendered = render({"aimEvacuations": True, "kubevirtNamespace": "harvester-system"})
    args = one(rendered, "Deployment", NS)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert settings_from(build_parser().parse_args(["serve", *args])).kubevirt_namespace == "harvester-system"
    [condition] = hooks(rendered)[HOOK]["matchConditions"]
    other = request(evacuation("vm1", "node-a"), "system:serviceaccount:harvester-system:kubevirt-controller")
    assert evaluate(condition["expression"], other) and not evaluate(condition["expression"], request(evacuation("vm1", "node-a")))
