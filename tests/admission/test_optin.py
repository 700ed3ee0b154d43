"""`serve` reads its own MutatingWebhookConfiguration: when its matchConditions shut
--opt-in-annotation out, one log line and a /readyz note; readiness stays OK."""
import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest
import yaml
from tests.support.stores import api_host, for_host, seed
from tests.support.kube import fixture_cluster

from webhook.admission import tls
from webhook.process import listening
from webhook.admission.optin import OptInCheck, shut_out
from webhook.admission.service import Listen, Service
from webhook.stores.direct import ClusterStore
from webhook.stores.snapshot import SnapshotStore
from webhook.config import Settings
from webhook.kinds import MUTATING_WEBHOOK

SHIPPED = yaml.safe_load((Path(__file__).parents[2] / "manifests/base/mutatingwebhookconfiguration.yaml").read_text())
OTHER_KEY = "example.com/colocate"


def test_the_shipped_configuration_lets_the_default_key_through_and_no_other():
    assert shut_out(SHIPPED, Settings().opt_in_annotation) == []
    assert shut_out(SHIPPED, OTHER_KEY) == ["vm.colocate.kubevirt-scheduler.io"]
    assert shut_out({}, OTHER_KEY) == []  # nothing to tell: no note


@pytest.fixture
async def serving(kmock, tls_files):
    """`serve` with the check as its companion, against the emulator holding the shipped configuration."""
    seed(kmock, [])
    kmock.resources[MUTATING_WEBHOOK] = {}
    kmock.objects[MUTATING_WEBHOOK, None, "kubevirt-colocate"] = SHIPPED
    made = []

    async def start(key):
        api = for_host(api_host(kmock))
        check = OptInCheck(ClusterStore(api), key, period=0.1)
        svc = Service(SnapshotStore(fixture_cluster()), Settings(opt_in_annotation=key),
                      Listen(host="127.0.0.1", port=0, metrics_host="127.0.0.1", metrics_port=0, drain_delay=0),
                      tls.ReloadingTLS(tls_files["cert"], tls_files["key"]), companions=[check])
        await svc.start()
        made.append((svc, api))
        return f"http://127.0.0.1:{listening.bound_port(svc.ops_runner)}"

    yield start
    for svc, api in made:
        await svc.stop()
        await api.close()


async def readyz(ops):
    async with aiohttp.ClientSession() as session, session.get(f"{ops}/readyz") as answer:
        return answer.status, await answer.text()


async def test_a_key_the_configuration_shuts_out_is_said_once_and_noted_in_readyz(serving, caplog):
    caplog.set_level(logging.WARNING, logger="webhook.optin")
    ops = await serving(OTHER_KEY)
    for _ in range(100):
        status, text = await readyz(ops)
        if "degraded" in text:
            break
        await asyncio.sleep(0.05)
    assert status == 200
    assert text == ("ok, degraded: MutatingWebhookConfiguration kubevirt-colocate: the matchConditions of "
                    "vm.colocate.kubevirt-scheduler.io do not name --opt-in-annotation example.com/colocate: "
                    "no opted-in pod reaches the webhook\n")
    await asyncio.sleep(0.3)  # checked again, said no more
    said = [r for r in caplog.records if r.getMessage() == "opt-in annotation shut out"]
    assert len(said) == 1


async def test_a_key_the_configuration_lets_through_is_neither_logged_nor_noted(serving, kmock, caplog):
    caplog.set_level(logging.WARNING, logger="webhook.optin")
    ops = await serving(Settings().opt_in_annotation)
    await asyncio.sleep(0.3)  # a few checks
    assert any(r.method == "GET" and r.url.path.endswith("/mutatingwebhookconfigurations/kubevirt-colocate")
               for r in kmock)
    assert await readyz(ops) == (200, "ok\n")
    assert not [r for r in caplog.records if r.name == "webhook.optin"]
