"""Upgrading from the install whose webhook replicas also ran the keeper (one Deployment, the
release before the keeper had a Deployment of its own), and from 0.2.0 (the keeper's namespaced
grants named otherwise), with `helm upgrade` and with `kubectl apply -k`, judged on both versions
as rendered: never a moment without a webhook replica answering, never two keepers acting at
once, nothing of the old grants left behind, and a keeper in report mode (or off) before the
upgrade in report mode (or off) after it, with the admin's overlay, values and variables as an
earlier README had them written.

The previous versions' charts and manifests are read from git (tests/support/releases.py);
without those commits (a shallow clone) these tests skip.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.support.helm import merged, objects, render
from tests.support.kube import LONGHORN_NS, kubectl
from tests.support.releases import (deleted_by, deletes, ONE_DEPLOYMENT, RELEASE_0_2_0, RIGHTS_AND_REQUESTS, ROLLING_BACK,
                                    table, tree_at, TURNING_OFF, upgrade_step)

from webhook.__main__ import build_parser, settings_from
from webhook.lookup.deployments import Container
from webhook.config import KeeperSettings, KeepMode, Settings
from webhook.keeper.lease import lease_namespace
from webhook.keeper.upgrade import WEBHOOK, hold, least

ROOT = Path(__file__).resolve().parents[1]
NS = "kubevirt-colocate"
KEEPER = "kubevirt-colocate-keeper"
RBAC = ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


@pytest.fixture(scope="module")
def previous(tmp_path_factory):
    """charts/ and manifests/ of the install with one Deployment, extracted into a directory of their own."""
    return tree_at(ONE_DEPLOYMENT, tmp_path_factory.mktemp("previous"))


@pytest.fixture(scope="module")
def release_0_2_0(tmp_path_factory):
    return tree_at(RELEASE_0_2_0, tmp_path_factory.mktemp("release-0.2.0"))


def kustomized(root: Path, *components: str) -> list[dict]:
    """`kubectl kustomize` of root's manifests/, or of an overlay beside them with these components."""
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    target = root / "manifests"
    if components:
        target = root / "overlay"
        target.mkdir(exist_ok=True)
        (target / "kustomization.yaml").write_text(yaml.safe_dump(
            {"resources": ["../manifests"], "components": [f"../manifests/{c}" for c in components]}))
    done = subprocess.run([tool, "kustomize", str(target)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return objects(done.stdout)


@pytest.fixture(params=["kubectl apply -k", "helm upgrade"])
def versions(request, previous):
    """(before, after): the objects of the previous install and of this one, as each tool renders them."""
    if request.param == "helm upgrade":
        return request.param, render(chart=previous / "charts" / "kubevirt-colocate"), render()
    return request.param, kustomized(previous), kustomized(ROOT)


def one(found, kind, name):
    [obj] = [o for o in found if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def key(obj):
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def test_the_webhook_is_the_same_deployment_rolled_one_replica_at_a_time(versions):
    """Same name and selector (a selector cannot change): the upgrade is a rolling update of the
    Deployment that answers now, a new replica ready before an old one goes, and drains take one."""
    _, before, after = versions
    old, new = one(before, "Deployment", NS), one(after, "Deployment", NS)
    assert new["spec"]["selector"] == old["spec"]["selector"]
    assert new["spec"]["replicas"] >= 2
    assert new["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert new["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"
    budget = one(after, "PodDisruptionBudget", NS)
    assert budget["spec"]["maxUnavailable"] == 1 and budget["spec"]["selector"] == new["spec"]["selector"]
    # The Service goes on sending reviews to the same pods (old and new replicas alike).
    assert one(after, "Service", NS)["spec"]["selector"] == one(before, "Service", NS)["spec"]["selector"]


def test_the_old_replicas_and_the_new_keeper_campaign_for_one_lease(versions, tmp_path):
    """While old replicas still run, they and the new keeper's replicas contend for the same Lease
    in the same namespace: one holder acts at a time, whichever it is."""
    _, before, after = versions
    old = one(before, "Deployment", NS)["spec"]["template"]["spec"]["containers"][0]
    new = one(after, "Deployment", KEEPER)["spec"]["template"]["spec"]["containers"][0]
    # The old release's serve took the keeper's flags; today's keep reads them the same way.
    old_settings = Settings.from_command(old["args"], {})
    new_settings = settings_from(build_parser().parse_args(["keep", *new["args"]]))
    assert old_settings.keep == new_settings.keep == "migrate"
    assert old_settings.lease_name == new_settings.lease_name
    for container in (old, new):
        env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
        assert env["POD_NAMESPACE"] == "metadata.namespace"
    assert one(before, "Deployment", NS)["metadata"].get("namespace") == one(after, "Deployment", KEEPER)[
        "metadata"].get("namespace")
    assert lease_namespace(new_settings, {"POD_NAMESPACE": NS}, tmp_path / "no-mount") == NS


def test_the_old_replicas_lose_the_keepers_rights_at_once(versions):
    """RBAC changes with the upgrade, before the old pods are gone: the webhook's account can no
    longer renew the Lease nor create a migration, so an old replica leading stops acting within
    the renew deadline (10 s) and the new keeper takes the Lease over when it expires."""
    _, _, after = versions
    grants = set()
    for binding in [o for o in after if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]:
        if {"kind": "ServiceAccount", "name": NS, "namespace": NS} in binding["subjects"]:
            role = one(after, binding["roleRef"]["kind"], binding["roleRef"]["name"])
            grants |= {(resource, verb) for rule in role["rules"] for resource in rule["resources"]
                       for verb in rule["verbs"]}
    assert not {(r, v) for r, v in grants if r == "leases" or v not in ("get", "list", "watch")} - {
        ("events", "create"), ("events", "patch")}


def documented_deletes() -> set[tuple]:
    """What docs/operations.md's `kubectl delete` lines, run after `kubectl apply -k`, delete."""
    return {what for command in upgrade_step() for what in deleted_by(command)}


def left_behind(tool: str, before: list[dict], after: list[dict], deleted: set[tuple]) -> list[tuple]:
    """What of the previous install stays once the upgrade is done: `kubectl apply -k` deletes
    nothing, the `deleted` step after it deletes what it names; Helm deletes what it no longer
    renders. Each kept object is updated in place: a binding's roleRef, which cannot change, and
    a Deployment's selector, unchanged."""
    now = {key(o): o for o in after}
    left = []
    for obj in before:
        if key(obj) in now:
            if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
                assert now[key(obj)]["roleRef"] == obj["roleRef"], key(obj)
            if obj["kind"] == "Deployment":
                assert now[key(obj)]["spec"]["selector"] == obj["spec"]["selector"], key(obj)
        elif obj["kind"] != "Job" and tool == "kubectl apply -k" and key(obj) not in deleted:
            left.append(key(obj))  # (the certificate Job removes itself 10 minutes after it ran)
    return left


def test_apply_leaves_nothing_of_the_previous_install_behind(versions):
    """As docs/operations.md says the upgrade is done, nothing of the install with one Deployment
    stays (its Role and RoleBinding `kubevirt-colocate` gave the webhook's account the Lease)."""
    tool, before, after = versions
    assert left_behind(tool, before, after, documented_deletes()) == []


@pytest.fixture(params=["kubectl apply -k", "helm upgrade"])
def from_0_2_0(request, release_0_2_0, tmp_path):
    """(tool, before, after): 0.2.0's install and this one, with the spare-vms option, as each tool renders them."""
    if request.param == "helm upgrade":
        values = {"longhorn": {"spareVMs": True}}
        return request.param, render(values, chart=release_0_2_0 / "charts" / "kubevirt-colocate"), render(values)
    shutil.copytree(ROOT / "manifests", tmp_path / "now" / "manifests")
    return request.param, kustomized(release_0_2_0, "spare-vms"), kustomized(tmp_path / "now", "spare-vms")


def grants(found: list[dict]) -> set[tuple]:
    """(account, namespace or None, group, resource, name or None, verb): every right the install's bindings give."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in found if o["kind"] in RBAC}
    given = set()
    for binding in [o for o in found if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]:
        where = binding["metadata"].get("namespace")
        role = roles[binding["roleRef"]["kind"], where if binding["roleRef"]["kind"] == "Role" else None,
                     binding["roleRef"]["name"]]
        given |= {(subject["name"], where, group, resource, name, verb) for subject in binding["subjects"]
                  for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
                  for name in rule.get("resourceNames") or [None] for verb in rule["verbs"]}
    return given


def test_an_upgrade_from_0_2_0_renames_the_keepers_grants_and_moves_no_right(from_0_2_0):
    """0.2.0's keeper grants named `kubevirt-colocate` (the webhook's name) and
    `kubevirt-colocate-spare-vms` are not in the new install: Helm deletes them, the documented
    lines delete them after `kubectl apply -k`. Every account keeps the rights it had, and gains only what
    this release needs."""
    tool, before, after = from_0_2_0
    renamed = {(kind, NS, NS) for kind in ("Role", "RoleBinding")} | {
        (kind, LONGHORN_NS, "kubevirt-colocate-spare-vms") for kind in ("Role", "RoleBinding")}
    gone = {key(o) for o in before if o["kind"] in RBAC} - {key(o) for o in after}
    assert gone == renamed
    assert left_behind(tool, before, after, documented_deletes()) == []
    # What the keeper gains is what docs/operations.md lists (the next test); nobody loses a right.
    assert {grant[0] for grant in grants(after) - grants(before)} == {KEEPER}
    assert grants(before) <= grants(after)
    assert {name for kind, _, name in map(key, after) if kind in ("Role", "RoleBinding")} == {KEEPER, f"{NS}-certs"}


def documented_rights() -> set[tuple]:
    """The rights docs/operations.md says the install gained since 0.2.0, as `grants` gives them."""
    found = set()
    for account, namespace, verbs, resources in table(RIGHTS_AND_REQUESTS, "account"):
        for resource in resources.replace("`", "").split(", "):
            what, _, name = resource.partition("/")
            plural, _, group = what.partition(".")
            found |= {(account.strip("`"), None if namespace == "(cluster)" else namespace.strip("`"), group, plural,
                       name or None, verb) for verb in verbs.replace("`", "").split(", ")}
    return found


def test_the_upgrade_notes_list_every_right_gained_since_0_2_0(from_0_2_0):
    """An auditor reads in docs/operations.md every right the upgrade adds: the list is the
    difference of 0.2.0's and this release's renders, with Helm and with kustomize."""
    _, before, after = from_0_2_0
    assert documented_rights() == grants(after) - grants(before)


def requests(found: list[dict]) -> dict[tuple[str, str], str]:
    """(container, "memory request"...) -> quantity, of every Deployment's containers."""
    sizes = {}
    for deployment in [o for o in found if o["kind"] == "Deployment"]:
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            for kind, word in (("requests", "request"), ("limits", "limit")):
                for resource, quantity in container.get("resources", {}).get(kind, {}).items():
                    sizes[container["name"], f"{resource} {word}"] = str(quantity)
    return sizes


def test_the_upgrade_notes_list_every_request_and_limit_that_changed_since_0_2_0(from_0_2_0):
    """A larger request can leave a new pod Pending (the rollout waits on it): the notes list each
    request and limit that differs between 0.2.0's render and this one, with both values."""
    _, before, after = from_0_2_0
    old, new = requests(before), requests(after)
    changed = {what: (old.get(what), new.get(what)) for what in old.keys() | new.keys() if old.get(what) != new.get(what)}
    assert changed
    assert {(c.strip("`"), what): (was, now) for c, what, was, now in table(RIGHTS_AND_REQUESTS, "container")} == changed


def test_the_documented_step_deletes_nothing_the_new_install_has(from_0_2_0):
    """The `kubectl delete` lines are safe to run on any install of this release: they name no
    object it renders (so a second run, or a run on a fresh install, removes nothing it needs)."""
    _, _, after = from_0_2_0
    deleted = documented_deletes()
    assert deleted and not deleted & {key(o) for o in after}
    assert all("--ignore-not-found" in command.words for command in upgrade_step())


def test_without_the_documented_step_the_old_grants_stay(release_0_2_0, tmp_path):
    """Not vacuous: with no `kubectl delete` line, `kubectl apply -k` leaves 0.2.0's four objects behind."""
    shutil.copytree(ROOT / "manifests", tmp_path / "now" / "manifests")
    before, after = kustomized(release_0_2_0, "spare-vms"), kustomized(tmp_path / "now", "spare-vms")
    assert sorted(left_behind("kubectl apply -k", before, after, set())) == sorted(
        [("Role", NS, NS), ("RoleBinding", NS, NS), ("Role", LONGHORN_NS, "kubevirt-colocate-spare-vms"),
         ("RoleBinding", LONGHORN_NS, "kubevirt-colocate-spare-vms")])


# --------------------------------------------------------------------------- the admin's choice kept

# How an earlier README had an admin choose report mode with kustomize: a patch on the webhook's
# Deployment (its container ran the keeper); and the same choice written other ways an overlay
# could: the newer path, an added flag, the environment.
OVERLAYS = {
    "README's patch, args/4": {"patches": [{"target": {"kind": "Deployment", "name": NS}, "patch":
        '[{"op": "replace", "path": "/spec/template/spec/containers/0/args/4", "value": "--keep=report"}]'}]},
    "patch at args/1": {"patches": [{"target": {"kind": "Deployment", "name": NS}, "patch":
        '[{"op": "replace", "path": "/spec/template/spec/containers/0/args/1", "value": "--keep=report"}]'}]},
    "flag added": {"patches": [{"target": {"kind": "Deployment", "name": NS}, "patch":
        '[{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--keep=report"}]'}]},
    "COLOCATE_KEEP=report": {"patches": [{"target": {"kind": "Deployment", "name": NS}, "patch":
        '[{"op": "add", "path": "/spec/template/spec/containers/0/env/-", '
        '"value": {"name": "COLOCATE_KEEP", "value": "report"}}]'}]},
    "COLOCATE_KEEP=off": {"patches": [{"target": {"kind": "Deployment", "name": NS}, "patch":
        '[{"op": "add", "path": "/spec/template/spec/containers/0/env/-", '
        '"value": {"name": "COLOCATE_KEEP", "value": "off"}}]'}]},
    "flag removed, COLOCATE_KEEP=report": {"patches": [{"target": {"kind": "Deployment", "name": NS}, "patch":
        '[{"op": "remove", "path": "/spec/template/spec/containers/0/args/4"}, '
        '{"op": "add", "path": "/spec/template/spec/containers/0/env/-", '
        '"value": {"name": "COLOCATE_KEEP", "value": "report"}}]'}]},
}


def overlay(tmp_path: Path, manifests: Path, name: str, extra: dict) -> subprocess.CompletedProcess:
    """`kubectl kustomize` of an overlay of `manifests` (as the README has it, beside them)."""
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    where = tmp_path / name.replace(" ", "-").replace("/", "-").replace("'", "").replace("=", "-")
    where.mkdir(parents=True)
    (where / "kustomization.yaml").write_text(yaml.safe_dump(
        {"resources": [os.path.relpath(manifests, where)], **extra}))
    return subprocess.run([tool, "kustomize", str(where)], capture_output=True, text=True, timeout=60)


def container_of(found: list[dict], name: str) -> dict:
    return one(found, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]


def plain_env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env") or [] if isinstance(e.get("value"), str)}


def as_read(container: dict) -> Container:
    """A container as the keeper reads the webhook's (lookup/deployments.py)."""
    return Container(args=container.get("args"), env={e["name"]: e.get("value") for e in container.get("env") or []})


def mode_before(found: list[dict]) -> KeepMode:
    """What the previous release's webhook replicas ran the keeper in: its flags over its variables."""
    container = container_of(found, NS)
    return Settings.from_command(container.get("args"), plain_env(container)).keep


def mode_after(found: list[dict]) -> KeepMode:
    """What the new keeper acts in: its own Deployment's settings, held by the webhook's."""
    keeper = container_of(found, KEEPER)
    own = KeeperSettings.from_command(keeper.get("args"), plain_env(keeper))
    return hold(own, as_read(container_of(found, NS)), f"Deployment {NS}/{WEBHOOK[0]}").mode


def serve_refuses(found: list[dict]) -> bool:
    """Whether the new webhook's container exits 2 at once (its rollout then stops, the old replicas serving)."""
    container = container_of(found, NS)
    try:
        build_parser().parse_args(["serve", *container.get("args", [])])
    except SystemExit as exc:
        return exc.code == 2
    return False


@pytest.mark.parametrize("name", list(OVERLAYS))
def test_an_overlay_choosing_report_mode_keeps_the_keeper_from_migrating(name, previous, tmp_path, capsys):
    """The overlay applied to the previous release and then, unchanged, to this one: the keeper
    does no more after than before, and an install in report mode or off stays so. Either nothing
    renders (`kubectl apply -k` applies nothing, the old install stays as it was), or the new
    keeper reads the keeper's settings off the webhook's Deployment and holds to report (off, when
    they say off); a flag there also stops the webhook's rollout. (Where the old flag won over a
    variable, the old keeper migrated: the new one reports, and says why.)"""
    extra = OVERLAYS[name]
    done = overlay(tmp_path / "before", previous / "manifests", name, extra)
    assert done.returncode == 0, done.stderr
    before = mode_before(objects(done.stdout))
    done = overlay(tmp_path / "after", ROOT / "manifests", name, extra)
    if done.returncode != 0:
        assert "args/4" in done.stderr  # the patch has no arg to replace: the apply fails as a whole
        return
    after = objects(done.stdout)
    assert container_of(after, KEEPER)["args"] == ["--metrics-port=8081", "--keep=migrate"]  # the install's own
    assert least(mode_after(after), before) == mode_after(after)  # never more than before
    assert mode_after(after) == (KeepMode.OFF if "=off" in name else KeepMode.REPORT)
    assert serve_refuses(after) is any(a.startswith("--keep") for a in container_of(after, NS).get("args", []))
    capsys.readouterr()


def test_the_overlays_include_each_way_an_install_was_put_in_report_mode_or_off(previous, tmp_path):
    """Not vacuous: the README's patch and the variable without the flag each put the previous
    release's keeper in report mode; the variable set to off, with the flag removed, turns it off."""
    modes = {name: mode_before(objects(overlay(tmp_path, previous / "manifests", name, OVERLAYS[name]).stdout))
             for name in ("README's patch, args/4", "flag removed, COLOCATE_KEEP=report")}
    assert set(modes.values()) == {KeepMode.REPORT}


def test_the_readmes_patch_has_nothing_to_replace_on_the_new_webhook():
    """The previous README's patch replaces the webhook's fifth arg: the new webhook has four, so
    that patch can never land on another flag of `serve` (a test above shows kustomize refuses it)."""
    assert len(container_of(kustomized(ROOT), NS)["args"]) == 4


def reuse_values(new_chart: Path, old_chart: Path, given: dict, where: Path) -> Path:
    """The chart `helm upgrade --reuse-values` renders: the new templates, with the values of the
    release before (the old chart's defaults and what was given then, the new chart's defaults not
    read) in place of its values.yaml."""
    chart = where / "chart"
    shutil.copytree(new_chart, chart, symlinks=False)
    old = yaml.safe_load((old_chart / "values.yaml").read_text())
    (chart / "values.yaml").write_text(yaml.safe_dump(merged(old, given)))
    return chart


@pytest.mark.parametrize("given, expected, held", [
    ({"keeper": {"mode": "report"}}, KeepMode.REPORT, KeepMode.REPORT),
    ({"keeper": {"mode": "off"}}, KeepMode.OFF, KeepMode.OFF),
    # The flag won over the variable before (migrate); now the two disagree: the keeper reports.
    ({"env": [{"name": "COLOCATE_KEEP", "value": "report"}]}, KeepMode.MIGRATE, KeepMode.REPORT),
], ids=["keeper.mode=report", "keeper.mode=off", "env COLOCATE_KEEP"])
@pytest.mark.parametrize("how", ["--reuse-values", "--reset-then-reuse-values"])
def test_a_helm_upgrade_keeps_the_mode_the_values_chose(given, expected, held, how, previous, tmp_path):
    """`helm install --set keeper.mode=report` on the previous release, then `helm upgrade`:
    with `--reuse-values` the new chart's schema refuses the old values (no `keeper.replicas`, a
    removed `migrationTargets`), so the upgrade fails and the release stays as it was; with
    `--reset-then-reuse-values` (the README's) the values given before are rendered by the new
    chart, and the keeper acts in no more than it did."""
    from helm_python import HelmReleaseError

    old_chart = previous / "charts" / "kubevirt-colocate"
    before = mode_before(render(given, chart=old_chart))
    assert before == expected
    if how == "--reuse-values":
        with pytest.raises(HelmReleaseError, match="replicas"):
            render(chart=reuse_values(ROOT / "charts" / "kubevirt-colocate", old_chart, given, tmp_path))
        return
    assert mode_after(render(given)) == held


# --------------------------------------------------------------------------- rolling back to 0.2.0

def unserved(found: list[dict]) -> list[str]:
    """The webhook entries whose call no pod of the install would answer: the Service port they name
    must exist, and its target be a port the selected Deployment's container serves."""
    missing = []
    for hook in [h for o in found if o["kind"] == "MutatingWebhookConfiguration" for h in o["webhooks"]]:
        ref = hook["clientConfig"]["service"]
        service = one(found, "Service", ref["name"])
        [port] = [p for p in service["spec"]["ports"] if p["port"] == ref.get("port", 443)] or [None]
        pods = [d["spec"]["template"] for d in found if d["kind"] == "Deployment"
                and service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        served = {p.get(k) for pod in pods for c in pod["spec"]["containers"] for p in c.get("ports", [])
                  for k in ("name", "containerPort")}
        if port is None or port.get("targetPort", port["port"]) not in served:
            missing.append(f"{hook['name']} -> {ref['name']}:{ref.get('port', 443)}")
    return missing


@pytest.fixture(params=["kubectl apply -k", "helm rollback"])
def rollback(request, release_0_2_0, tmp_path):
    """(tool, from, to): this release's install and 0.2.0's, with the spare-vms option, as each tool renders them."""
    if request.param == "helm rollback":
        values = {"longhorn": {"spareVMs": True}}
        return request.param, render(values), render(values, chart=release_0_2_0 / "charts" / "kubevirt-colocate")
    shutil.copytree(ROOT / "manifests", tmp_path / "now" / "manifests")
    return request.param, kustomized(tmp_path / "now", "spare-vms"), kustomized(release_0_2_0, "spare-vms")


def test_a_rollback_leaves_every_webhook_entry_on_a_port_the_pods_serve(rollback):
    """The configuration, its Service and the webhook's Deployment go back together (Helm's
    rollback; kustomize's apply of 0.2.0's manifests, which replaces each of them): share-managers
    and VMs are decided before, during (old pods answer 0.2.0's entries) and after."""
    _, now, then = rollback
    assert unserved(now) == [] and unserved(then) == []
    assert {h["name"] for o in then if o["kind"] == "MutatingWebhookConfiguration" for h in o["webhooks"]} >= {
        "vm.colocate.kubevirt-scheduler.io", "share-manager.colocate.kubevirt-scheduler.io"}


def test_a_rollback_as_documented_leaves_nothing_of_this_release_behind(rollback):
    """Helm deletes what 0.2.0 did not render; after kustomize's apply, the documented delete lines
    remove exactly what 0.2.0 names otherwise, and nothing 0.2.0 has."""
    tool, now, then = rollback
    documented = {what for command in deletes(ROLLING_BACK) for what in deleted_by(command)}
    assert documented and not documented & {key(o) for o in then}
    assert left_behind(tool, now, then, documented) == []
    assert not any("undo" in command.words for command in deletes(ROLLING_BACK))


def old_keeper(tree: Path, args: list[str]) -> dict:
    """What 0.2.0's own code makes of its keeper's arguments: its mode and Lease (run from its tree)."""
    script = ("import json, sys; from webhook.__main__ import build_parser, settings_from; "
              "s = settings_from(build_parser().parse_args(['keep', *sys.argv[1:]])); "
              "print(json.dumps({'keep': str(s.keep.value), 'lease': s.lease_name}))")
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=tree, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_after_a_rollback_the_old_keeper_acts(rollback, tmp_path):
    """0.2.0's keeper starts with the arguments 0.2.0's install gives it (its own parser reads
    them), campaigns for the Lease this release's keeper held, holds every right it had, and reads
    no record this release wrote: its account may not read ConfigMaps, so no record of any version
    holds it. (This release's pause is not 0.2.0's: docs/operations.md says so.)"""
    tool, now, then = rollback
    code = tree_at(RELEASE_0_2_0, tmp_path / "code", "webhook")
    args = one(then, "Deployment", KEEPER)["spec"]["template"]["spec"]["containers"][0]["args"]
    started = old_keeper(code, args)
    ours = settings_from(build_parser().parse_args(["keep", *container_of(now, KEEPER)["args"]]))
    assert started == {"keep": "migrate", "lease": ours.lease_name}
    mine = {g for g in grants(then) if g[0] == KEEPER}
    assert ("kubevirt-colocate-keeper", NS, "coordination.k8s.io", "leases", ours.lease_name, "update") in mine
    assert not {g for g in mine if g[3] == "configmaps"}
    assert not (code / "webhook" / "keeper" / "records.py").exists()


# --------------------------------------------------------------------------- turning an option off

def documented_off() -> set[tuple]:
    return {what for command in deletes(TURNING_OFF) for what in deleted_by(command)}


@pytest.mark.parametrize("component", ["spare-vms", "aim-evacuations"])
def test_an_option_turned_off_with_kustomize_leaves_no_object_it_added(component, tmp_path):
    """The overlay applied with the component, then without it: the apply takes out what the
    component patched into shared objects (an entry, a flag, a rule); the objects of its own are
    what the documented delete lines remove (none for aim-evacuations)."""
    shutil.copytree(ROOT / "manifests", tmp_path / "now" / "manifests")
    added = {key(o) for o in kustomized(tmp_path / "now", component)} - {key(o) for o in kustomized(tmp_path / "now")}
    assert added <= documented_off()
    assert added or component != "spare-vms"  # not vacuous: its Role and RoleBinding in Longhorn's namespace


def test_cert_manager_turned_off_leaves_no_object_it_added(tmp_path):
    """From manifests/cert-manager to manifests: its Issuers and Certificates are deleted by the
    documented lines, and so are the Secrets cert-manager wrote from them (which no apply and no
    Helm release owns)."""
    with_, without = _render_root("manifests/cert-manager"), _render_root("manifests")
    added = {key(o) for o in with_} - {key(o) for o in without}
    written = {("Secret", NS, name) for o in with_ if o["kind"] == "Certificate"
               for name in (o["spec"]["secretName"],)}
    assert added and added | written <= documented_off()
    helm_written = {("Secret", NS, o["spec"]["secretName"]) for o in render({"certManager": {"enabled": True}})
                    if o["kind"] == "Certificate"}
    assert helm_written == written


def test_the_documented_off_lines_delete_nothing_an_install_without_the_option_has():
    """Safe to run again, or on an install that never had the option: no line names an object the
    install renders without any option (the serving Secret aside, which the certificate Job fills again)."""
    rendered = {key(o) for o in render()} | {key(o) for o in _render_root("manifests")}
    assert documented_off() & rendered <= {("Secret", NS, "kubevirt-colocate-tls")}
    assert all("--ignore-not-found" in command.words for command in deletes(TURNING_OFF))


def _render_root(path: str) -> list[dict]:
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    done = subprocess.run([tool, "kustomize", str(ROOT / path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return objects(done.stdout)
