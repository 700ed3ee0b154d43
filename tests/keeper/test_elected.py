"""`keep`'s term, in the test's process: a keeper that fails ends its term, hands the Lease over
and holds this replica off before it campaigns again, so that another replica can lead."""
import asyncio

from tests.support.kube import kubeconfig_for
from tests.support.kubevirt_api import eventually, three_nodes
from tests.support.stores import api_host, for_host

from webhook.config import Settings
from webhook.keeper.elected import ElectedKeeper
from webhook.kinds import LEASE

NS = "kubevirt-colocate"


async def test_a_keeper_that_fails_hands_the_lease_over_and_holds_off(cluster, kmock, tmp_path, caplog):
    cluster.seed(three_nodes())
    api = for_host(api_host(kmock))
    # A keeper that cannot run (its mode is off): the term starts, the keeper fails at once.
    elected = ElectedKeeper(api, Settings(keep="off"), namespace=NS, identity="replica-a",
                            kubeconfig=kubeconfig_for(tmp_path, api_host(kmock)))
    elected.start()
    try:
        notes = await eventually(lambda: elected.degraded(), timeout=10)
        assert notes == ["the keeper failed: ValueError: the keeper runs in report or migrate mode, not 'off'; "
                         "campaigning again in 5s"]
        lease = kmock.objects[LEASE, NS, "kubevirt-colocate-keeper"].raw["spec"]
        assert lease["holderIdentity"] == ""  # handed over: another replica may take it at once
        assert not elected.elector.leading and elected.keeper is None
        reads = elected.elector.reads
        await asyncio.sleep(3)
        assert elected.elector.reads == reads  # held off: no campaign for 5 s
        # Then it campaigns again, and fails again: twice the pause.
        notes = await eventually(lambda: "10s" in " ".join(elected.degraded()) and elected.degraded(), timeout=10)
        assert notes[0].endswith("campaigning again in 10s") and elected.failures == 2
    finally:
        await elected.stop()
        await api.close()
    assert [r.message for r in caplog.records].count("keeper failed") == 2
