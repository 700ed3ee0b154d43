"""What must outlive one leader and KubeVirt's garbage collection of finished migrations: the
per-day limit, the backoff after failures and a refusal's hold, kept in the keeper's state in the
cluster (the ConfigMap `kubevirt-colocate-keeper-state`) and read by the next leader."""
from __future__ import annotations

import base64

from tests.support.stores import in_cache
from tests.support.kubevirt_api import VMIMS, apart_vm, eventually, three_nodes

from webhook import kinds
from webhook.rules.keeping.record import KEY, load
from webhook.rules.shared.alone import Alone

from .test_passes import record


async def gone(cluster, keeper, name):
    """virt-controller garbage-collected the finished migration (it keeps a VMI's 5 newest)."""
    async with cluster.api() as session:
        await session.delete(f"{VMIMS}/{name}")
    await eventually(lambda: in_cache(keeper.watch.migrations, "default", name) is None)


def kept(kmock):
    raw = kmock.objects[kinds.CONFIGMAP, "default", "kubevirt-colocate-keeper-state"].raw
    return load(base64.b64decode(raw["binaryData"][KEY]))[0]


async def test_a_backoff_survives_a_new_leader_and_the_migrations_garbage_collection(cluster, make_keeper, kmock):
    cluster.seed(three_nodes() + apart_vm())
    first = await make_keeper()
    [created] = (await first.run_pass()).created
    name = created.split("/")[1]
    await eventually(lambda: in_cache(first.watch.migrations, "default", name))
    await cluster.finish(name, "Failed")
    await eventually(lambda: in_cache(first.watch.migrations, "default", name)["status"].get("phase") == "Failed")
    assert record(await first.run_pass()).hold == Alone.BACKING_OFF
    assert kept(kmock).migrations == ()  # the watch shows it: the record keeps what it no longer shows
    await gone(cluster, first, name)
    await first.run_pass()
    assert [m.phase for m in kept(kmock).migrations] == ["Failed"]

    second = await make_keeper()  # a new leader: nothing in its memory, the failed migration gone
    report = await second.run_pass()
    assert report.created == () and cluster.migrations() == []
    assert record(report).hold == Alone.BACKING_OFF and "after 1 failed migration" in record(report).decision


async def test_the_daily_limit_survives_a_new_leader_and_the_migrations_garbage_collection(cluster, make_keeper, kmock):
    """Moved twice today (--keep-max-per-day 2), its storage moving away each time, both migrations
    since garbage-collected: a new leader still holds the VM at its daily limit."""
    cluster.seed(three_nodes() + apart_vm())
    first = await make_keeper()
    for node, storage_next in (("node-b", "node-c"), ("node-c", "node-a")):
        [created] = (await first.run_pass()).created
        name = created.split("/")[1]
        await eventually(lambda: in_cache(first.watch.migrations, "default", name))
        await cluster.finish(name, "Succeeded", "vm1", node)
        await eventually(lambda: in_cache(first.watch.migrations, "default", name)["status"].get("phase")
                         == "Succeeded")
        await first.run_pass()
        await gone(cluster, first, name)
        await cluster.move_storage("pvc-vm1-disk", storage_next)  # apart again
        await eventually(lambda: in_cache(first.store.pods, "longhorn-system", "share-manager-pvc-vm1-disk")["spec"][
            "nodeName"] == storage_next)
    assert record(await first.run_pass()).hold == Alone.DAILY_LIMIT
    assert len(kept(kmock).migrations) == 2

    second = await make_keeper()
    report = await second.run_pass()
    assert report.created == () and cluster.migrations() == []
    assert record(report).hold == Alone.DAILY_LIMIT
    assert record(report).decision == "migrated 2 times in the last 24h (limit 2)"
