"""Pausing the keeper in an incident, as docs/operations.md says (Pausing the keeper): the annotation
`kubevirt-colocate/keep` on its own Deployment holds it to report (`off`: to nothing) without a
rollout, read before it acts and again within a third of a pass; removing it lets it act again."""
import asyncio

import pytest
from tests.support.keep import Keeping
from tests.support.kube import kubeconfig_for, scrape
from tests.support.kubevirt_api import apart_vm, eventually, three_nodes
from tests.support.stores import api_host

from webhook.config import KeeperSettings, KeepMode
from webhook.keeper.keeper import KeeperTiming
from webhook.keeper.service import KeeperService
from webhook.keeper.upgrade import KEEPER, PAUSE, RECHECK, Hold, paused, read_mode
from webhook.kinds import DEPLOYMENT
from webhook.stores.store import StoreError

NS = "kubevirt-colocate"
WHERE = f"Deployment {NS}/{KEEPER}"
MIGRATE = KeeperSettings(keep="migrate")


def keeper_deployment(**annotations):
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": KEEPER, "namespace": NS, "annotations": annotations},
            "spec": {"template": {"spec": {"containers": [{"name": "keeper", "args": ["--keep=migrate"]}]}}}}


@pytest.mark.parametrize("own, annotations, mode", [
    (KeepMode.MIGRATE, {}, KeepMode.MIGRATE),
    (KeepMode.MIGRATE, {PAUSE: "report"}, KeepMode.REPORT),
    (KeepMode.MIGRATE, {PAUSE: "off"}, KeepMode.OFF),
    (KeepMode.MIGRATE, {PAUSE: "true"}, KeepMode.REPORT),  # any other value: in doubt, report
    (KeepMode.MIGRATE, {PAUSE: "migrate"}, KeepMode.REPORT),  # a pause never raises the mode, nor keeps it
    (KeepMode.REPORT, {PAUSE: "off"}, KeepMode.OFF),
    (KeepMode.OFF, {PAUSE: "report"}, KeepMode.OFF),
    (KeepMode.MIGRATE, {"other": "report"}, KeepMode.MIGRATE),
])
def test_the_annotation_holds_the_keeper_to_no_more_than_it_says(own, annotations, mode):
    held = paused(KeeperSettings(keep=own), annotations, WHERE)
    assert held.mode is mode
    assert (held.why is None) == (PAUSE not in annotations)
    if held.why:
        assert held.why.startswith(f"{WHERE} is annotated {PAUSE}={annotations[PAUSE]}: the keeper runs {mode} until")


class Store:
    """The install's two Deployments, the keeper's as given (None: none; a str: refused)."""

    def __init__(self, keeper):
        self.keeper = keeper

    async def get(self, resource, namespace, name, *, timeout=None):
        assert (resource, namespace) == (DEPLOYMENT, NS)
        if name == "kubevirt-colocate":
            return {"spec": {"template": {"spec": {"containers": [{"name": "webhook", "args": ["--port=9443"]}]}}}}
        assert name == KEEPER
        if isinstance(self.keeper, str):
            raise StoreError(self.keeper)
        return self.keeper


async def test_the_keepers_deployment_is_read_and_an_unreadable_one_holds_it_to_report():
    assert await read_mode(Store(keeper_deployment()), MIGRATE, NS) == Hold(KeepMode.MIGRATE)
    assert await read_mode(Store(None), MIGRATE, NS) == Hold(KeepMode.MIGRATE)  # outside a cluster
    assert (await read_mode(Store(keeper_deployment(**{PAUSE: "off"})), MIGRATE, NS)).mode is KeepMode.OFF
    held = await read_mode(Store("403 forbidden"), MIGRATE, NS)
    assert held == Hold(KeepMode.REPORT, f"{WHERE} not read (403 forbidden): the keeper runs report until it is")


class Elected:
    def __init__(self, settings):
        self.settings, self.stopped = settings, False

    def start(self):
        pass

    async def stop(self):
        self.stopped = True

    def degraded(self):
        return []


async def test_a_pause_stops_the_acting_keeper_at_its_next_read_within_one_pass():
    """The keeper acting (migrate), then annotated: the next read, at most RECHECK later, stops it (its
    pass in flight cancelled) and starts one that reports; the annotation removed, it migrates again."""
    assert RECHECK < KeeperTiming().period
    store, made = Store(keeper_deployment()), []

    def elect(settings):
        made.append(Elected(settings))
        return made[-1]

    service = KeeperService(MIGRATE, elect, metrics_host="127.0.0.1", metrics_port=0,
                            check=lambda: read_mode(store, MIGRATE, NS))
    await service.act_as(await service.check())
    store.keeper = keeper_deployment(**{PAUSE: "report"})
    await service.recheck()
    assert made[0].stopped and [e.settings.keep for e in made] == [KeepMode.MIGRATE, KeepMode.REPORT]
    assert service.degraded()[0].startswith(f"{WHERE} is annotated {PAUSE}=report")
    store.keeper = keeper_deployment()
    await service.recheck()
    assert made[1].stopped and made[2].settings.keep is KeepMode.MIGRATE and service.degraded() == []


@pytest.mark.parametrize("annotations, moved", [({PAUSE: "report"}, False), ({}, True)], ids=["paused", "not"])
async def test_keep_on_an_annotated_deployment_moves_nothing_and_says_why(cluster, kmock, tmp_path, annotations, moved):
    """`keep --keep migrate` whose Deployment carries the pause: it leads, decides, creates nothing,
    and its /readyz says why; without the annotation the same keeper moves the VM."""
    cluster.seed(three_nodes() + apart_vm())
    kmock.resources[DEPLOYMENT] = {}
    kmock.objects[DEPLOYMENT, NS, KEEPER] = keeper_deployment(**annotations)
    keeping = await Keeping.start("--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)), "--keep", "migrate",
                                  "--keep-after", "0", "--lease-namespace", NS, env={"POD_NAME": "replica-a"})
    try:
        if moved:
            assert await eventually(lambda: cluster.migrations() or None, timeout=15)
        else:
            assert await eventually(lambda: keeping.metrics_with("colocate_vms", state="apart"), timeout=15)
            await asyncio.sleep(1)
        status, said = await scrape(f"{keeping.ops}/readyz")
    finally:
        assert await keeping.stop() == 0
    assert bool(cluster.migrations()) is moved
    assert status == 200 and (f"is annotated {PAUSE}=report" in said) is not moved
