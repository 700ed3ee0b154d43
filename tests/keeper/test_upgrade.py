"""The keeper's settings an older install left on the webhook's Deployment hold the keeper to
report (or off), and say so, until they are moved; the webhook's Deployment read as `keep` reads it."""
import asyncio

import pytest
import yaml
from tests.support.keep import Keeping
from tests.support.kube import kubeconfig_for, scrape
from tests.support.kubevirt_api import apart_vm, eventually, three_nodes
from tests.support.stores import api_host

from webhook.lookup.deployments import Container
from webhook.stores.store import StoreError
from webhook.config import KeeperSettings, KeepMode
from webhook.keeper.service import KeeperService
from webhook.keeper.upgrade import Hold, hold, read_hold
from webhook.kinds import DEPLOYMENT

NS = "kubevirt-colocate"
WHERE = "Deployment kubevirt-colocate/kubevirt-colocate"
MIGRATE = KeeperSettings(keep="migrate")


@pytest.mark.parametrize("args, env, mode, said", [
    (["--port=9443"], {}, KeepMode.MIGRATE, None),
    (["--port=9443", "--keep=report"], {}, KeepMode.REPORT, "--keep=report"),
    (["--keep", "off"], {}, KeepMode.OFF, "--keep=off"),
    ([], {"COLOCATE_KEEP": "report"}, KeepMode.REPORT, "COLOCATE_KEEP=report"),
    (["--keep=report"], {"COLOCATE_KEEP": "migrate"}, KeepMode.REPORT, "--keep=report"),  # the flag over its variable
    ([], {"COLOCATE_KEEP": "migrate", "COLOCATE_KEEP_AFTER": "600"}, KeepMode.MIGRATE, None),  # as the keeper's own
    ([], {"COLOCATE_KEEP_MAX_INFLIGHT": "1"}, KeepMode.REPORT, "COLOCATE_KEEP_MAX_INFLIGHT=1"),
    ([], {"COLOCATE_KEEP": None}, KeepMode.REPORT, "COLOCATE_KEEP=(valueFrom)"),  # unknown: in doubt
    ([], {"COLOCATE_KEEP": "sometimes"}, KeepMode.REPORT, "COLOCATE_KEEP=sometimes"),
    ([], {"COLOCATE_PIN": "preferred", "LOG_LEVEL": "debug"}, KeepMode.MIGRATE, None),  # not the keeper's
], ids=["none", "flag", "flag off", "variable", "flag wins", "same", "a bound", "valueFrom", "unreadable", "others"])
def test_the_keeper_acts_in_no_more_than_the_webhooks_deployment_says(args, env, mode, said):
    held = hold(MIGRATE, Container(args=args, env=env), WHERE)
    assert held.mode is mode
    if said is None:
        assert held.why is None
    else:
        assert held.why.startswith(f"{WHERE} sets the keeper's {said}, unlike the keeper's own Deployment: the keeper "
                                   f"runs {mode} until they are moved there")


def test_a_keeper_in_report_mode_or_off_is_never_raised():
    for own in (KeepMode.REPORT, KeepMode.OFF):
        assert hold(KeeperSettings(keep=own), Container(args=["--keep=migrate"], env={}), WHERE).mode is own


class Store:
    """A Store answering one Deployment, or failing."""

    def __init__(self, found=None, error=None):
        self.found, self.error = found, error

    async def get(self, resource, namespace, name, *, timeout=None):
        assert (resource, namespace, name) == (DEPLOYMENT, NS, "kubevirt-colocate")
        if self.error:
            raise StoreError(self.error)
        return self.found


def webhook_deployment(*args, env=()):
    return {"spec": {"template": {"spec": {"containers": [
        {"name": "webhook", "args": list(args), "env": [{"name": k, "value": v} for k, v in env]}]}}}}


async def test_the_webhooks_deployment_is_read_and_an_unreadable_one_holds_the_keeper_to_report():
    assert await read_hold(Store(None), MIGRATE, NS) == Hold(KeepMode.MIGRATE)  # none: a keeper on its own
    assert (await read_hold(Store(webhook_deployment("--keep=report")), MIGRATE, NS)).mode is KeepMode.REPORT
    assert (await read_hold(Store(webhook_deployment(env=[("COLOCATE_KEEP", "off")])), MIGRATE, NS)).mode is KeepMode.OFF
    held = await read_hold(Store(error="403 forbidden"), MIGRATE, NS)
    assert held == Hold(KeepMode.REPORT, f"{WHERE} not read (403 forbidden): the keeper runs report until it is "
                                         "(docs/operations.md, Upgrading)")


class Elected:
    def __init__(self, settings):
        self.settings, self.started, self.stopped = settings, False, False

    def start(self):
        self.started = True

    async def stop(self):
        self.stopped = True

    def degraded(self):
        return []


async def test_the_keeper_starts_in_the_held_mode_and_follows_the_webhooks_deployment():
    """Nothing acts before the first read; a change of what the webhook's Deployment says stops the
    keeper of the mode before and starts one of the new mode (off: none)."""
    made, answers = [], [Hold(KeepMode.REPORT, "held"), Hold(KeepMode.MIGRATE), Hold(KeepMode.OFF, "off")]

    async def check():
        return answers.pop(0)

    def elect(settings):
        made.append(Elected(settings))
        return made[-1]

    service = KeeperService(MIGRATE, elect, metrics_host="127.0.0.1", metrics_port=0, check=check)
    await service.act_as(await service.check())
    assert [e.settings.keep for e in made] == [KeepMode.REPORT] and made[0].started
    assert service.degraded() == ["held"]
    await service.recheck()
    assert [e.settings.keep for e in made] == [KeepMode.REPORT, KeepMode.MIGRATE] and made[0].stopped
    assert service.degraded() == []
    await service.recheck()
    assert service.elected is None and made[1].stopped and service.degraded() == ["off"]


async def test_keep_with_report_on_the_webhooks_deployment_reports_and_moves_nothing(cluster, kmock, tmp_path):
    """`keep --keep migrate` beside a webhook Deployment that carries `--keep=report` (an overlay
    written for the release whose webhook ran the keeper): it leads, decides, and creates nothing;
    its /readyz and its log say why."""
    cluster.seed(three_nodes() + apart_vm())
    kmock.resources[DEPLOYMENT] = {}
    kmock.objects[DEPLOYMENT, NS, "kubevirt-colocate"] = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "kubevirt-colocate", "namespace": NS},
        **webhook_deployment("--port=9443", "--keep=report")}
    keeping = await Keeping.start("--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)), "--keep", "migrate",
                                  "--keep-after", "0", "--lease-namespace", NS, env={"POD_NAME": "replica-a"})
    try:
        text = await eventually(lambda: keeping.metrics_with("colocate_vms", state="apart"), timeout=15)
        assert text is not None
        await asyncio.sleep(1)
        status, said = await scrape(f"{keeping.ops}/readyz")
    finally:
        assert await keeping.stop() == 0
    assert cluster.migrations() == []
    assert status == 200 and "sets the keeper's --keep=report" in said
    [held] = [line for line in keeping.lines if line["msg"] == "keeper held"]
    assert held["level"] == "warning" and held["mode"] == "report"
    [keeping_line] = [line for line in keeping.lines if line["msg"] == "keeping"]
    assert keeping_line["mode"] == "report"
