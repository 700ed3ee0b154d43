"""`spare-vms`: the VMI kind put on Longhorn's blacklist for pod deletion beside the kinds there,
once however often it runs, taken out alone by `--undo`; a concurrent change never overwritten; an
Event on the Setting; a value it cannot read left alone. On kubefake's apiserver, which applies JSON
patches and refuses a failed `test` as kube-apiserver does (tests/test_refusals.py)."""
from __future__ import annotations

import pytest
from tests.support.kube import longhorn_settings, run_verb
from tests.support.stores import seed

from kubefake.apiserver import KubernetesApi
from webhook.kinds import LONGHORN_SETTING
from webhook.rules.shared.longhorn import restarts_vms

BLACKLIST = "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly"
VMI_KIND = "kubevirt.io/VirtualMachineInstance"


@pytest.fixture
def kmock_options(kmock_options):
    return {**kmock_options, "cls": KubernetesApi}


def value(kmock, name=BLACKLIST):
    return kmock.objects[LONGHORN_SETTING, "longhorn-system", name].raw["value"]


def events(kmock):
    return [obj.raw for (resource, _, _), obj in kmock.objects.items()
            if resource.plural == "events" and not obj.deleted]


def settings_now(kmock):
    return {name: obj.raw["value"] for (resource, _, name), obj in kmock.objects.items()
            if resource == LONGHORN_SETTING and not obj.deleted}


async def test_twice_beside_other_kinds_then_undone(tmp_path, kmock):
    kmock.resources["v1/events"] = {}
    seed(kmock, longhorn_settings(blacklist="apps/StatefulSet;apps/DaemonSet"))
    assert restarts_vms(settings_now(kmock)).answer == "yes"

    code, out, err = await run_verb(tmp_path, kmock, "spare-vms")
    assert code == 0, err
    assert value(kmock) == f"apps/StatefulSet;apps/DaemonSet;{VMI_KIND}"
    assert out.strip() == (f"Setting longhorn-system/{BLACKLIST}: 'apps/StatefulSet;apps/DaemonSet' -> "
                           f"'apps/StatefulSet;apps/DaemonSet;{VMI_KIND}'")
    assert restarts_vms(settings_now(kmock)).answer == "no"
    [event] = events(kmock)
    assert (event["reason"], event["involvedObject"]["kind"], event["involvedObject"]["name"]) == (
        "VMsSpared", "Setting", BLACKLIST)
    assert "'apps/StatefulSet;apps/DaemonSet'" in event["message"] and event["metadata"]["namespace"] == "longhorn-system"

    code, out, err = await run_verb(tmp_path, kmock, "spare-vms")  # again: nothing to do, nothing said to the cluster
    assert code == 0, err
    assert "already has kubevirt.io/VirtualMachineInstance: nothing changed" in out
    assert value(kmock) == f"apps/StatefulSet;apps/DaemonSet;{VMI_KIND}" and len(events(kmock)) == 1

    code, out, err = await run_verb(tmp_path, kmock, "spare-vms", "--undo")
    assert code == 0, err
    assert value(kmock) == "apps/StatefulSet;apps/DaemonSet"
    assert [e["reason"] for e in events(kmock)] == ["VMsSpared", "VMsNoLongerSpared"]


async def test_a_change_made_meanwhile_is_read_again_never_overwritten(tmp_path, kmock):
    """Someone adds a kind between our read and our write: the write's test fails, we read again."""
    seed(kmock, longhorn_settings())
    kmock.resources["v1/events"] = {}
    first = []

    original = kmock.apiserver.patch

    async def patch_after_a_change(call):
        if not first:  # the admin's change lands just before our first write
            first.append(True)
            kmock.objects[LONGHORN_SETTING, "longhorn-system", BLACKLIST].patch(
                {"value": "apps/StatefulSet", "metadata": {"resourceVersion": "7"}})
        return await original(call)

    kmock.apiserver.patch = patch_after_a_change  # the emulator's own write, run after the change
    code, out, err = await run_verb(tmp_path, kmock, "spare-vms")
    assert code == 0, err
    assert value(kmock) == f"apps/StatefulSet;{VMI_KIND}"


@pytest.mark.parametrize("garbled", ["apps/StatefulSet, apps/DaemonSet", "kubevirt.io VirtualMachineInstance"])
async def test_a_value_that_is_not_owner_kinds_is_left_alone(tmp_path, kmock, garbled):
    seed(kmock, longhorn_settings(blacklist=garbled))
    code, out, err = await run_verb(tmp_path, kmock, "spare-vms")
    assert code == 1 and out == ""
    assert err.startswith("error: nothing changed: ") and "correct it by hand" in err
    assert value(kmock) == garbled


async def test_without_longhorn_it_says_where_it_looked(tmp_path, kmock):
    seed(kmock, [])
    code, out, err = await run_verb(tmp_path, kmock, "spare-vms", "--longhorn-namespace", "storage")
    assert code == 1
    assert err.strip().splitlines() == [
        f"error: Longhorn has no Setting {BLACKLIST} in namespace storage (Longhorn 1.4 or newer there? see "
        "--longhorn-namespace)"]
