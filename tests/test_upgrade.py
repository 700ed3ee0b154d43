"""Upgrading from the install whose webhook replicas also ran the keeper (one Deployment, the
release before the keeper had a Deployment of its own) with `helm upgrade` and with
`kubectl apply -k`, judged on both versions as rendered: never a moment without a webhook
replica answering, never two keepers acting at once, nothing of the old grants left behind,
and a keeper in report mode (or off) before the upgrade in report mode (or off) after it, with
the admin's overlay, values and variables as an earlier README had them written.

The previous version's chart and manifests are read from git (PREVIOUS); without that commit (a
shallow clone) these tests skip.
"""
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from tests.support.helm import merged, objects, render
from tests.support.kube import kubectl

from webhook.__main__ import build_parser, settings_from
from webhook.lookup.deployments import Container
from webhook.config import KeeperSettings, KeepMode, Settings
from webhook.keeper.lease import lease_namespace
from webhook.keeper.upgrade import WEBHOOK, hold, least

ROOT = Path(__file__).resolve().parents[1]
PREVIOUS = "e1ca05a"  # the last commit with one Deployment for the webhook and the keeper
NS = "kubevirt-colocate"
KEEPER = "kubevirt-colocate-keeper"


@pytest.fixture(scope="module")
def previous(tmp_path_factory):
    """charts/ and manifests/ of PREVIOUS, extracted into a directory of their own."""
    done = subprocess.run(["git", "archive", "--format=tar", PREVIOUS, "charts", "manifests"], cwd=ROOT,
                          capture_output=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"git has no {PREVIOUS}: {done.stderr.decode().strip()}")
    where = tmp_path_factory.mktemp("previous")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        archive.extractall(where, filter="tar")
    return where


def kustomized(root: Path) -> list[dict]:
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    done = subprocess.run([tool, "kustomize", str(root / "manifests")], capture_output=True, text=True, timeout=60)
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


def test_apply_leaves_nothing_of_the_previous_install_behind(versions):
    """`kubectl apply -k` deletes nothing: every object of the previous install is one of this
    install's, updated in place (a binding's roleRef, which cannot change, unchanged), so no old
    grant stays behind. Helm deletes what it no longer renders; the same holds for it."""
    tool, before, after = versions
    now = {key(o): o for o in after}
    for obj in before:
        if obj["kind"] == "Job":
            continue  # the certificate Job: removed 10 minutes after it ran, named after its spec by Helm
        assert key(obj) in now, f"{tool}: {key(obj)} would be left behind"
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert now[key(obj)]["roleRef"] == obj["roleRef"], key(obj)
        if obj["kind"] == "Deployment":
            assert now[key(obj)]["spec"]["selector"] == obj["spec"]["selector"], key(obj)


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
