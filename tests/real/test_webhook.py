"""The webhook as a cluster runs it: `serve` watching a real kube-apiserver, registered by URL in
the install's own MutatingWebhookConfiguration, and pods created through the apiserver, which
calls the server, applies its patch, validates the result and hands it to the real kube-scheduler."""
from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
from kubefake.envtest import Api, Refused
from tests.support.kubevirt_api import eventually
from tests.support.kube import Serving, annotations, registered_while, registration, nodes, pin_of, required_terms, running_vm, rwx_disk, share_manager_pod, vm_pod

ROOT = Path(__file__).parent.parent.parent
CONFIGURATION = "kubevirt-colocate-real"
LONGHORN = "longhorn-system"
VMS = "default"


@pytest.fixture
async def cluster(scheduler):
    """Three KubeVirt nodes; vm1's root disk served from node-b; vm2's disk stopped (no
    share-manager pod) while vm2 runs on node-c. Removed again after the test."""
    objects = [*nodes("node-a", "node-b", "node-c"), *rwx_disk("vm1-rootdisk", "node-b"),
               *rwx_disk("vm2-data", "node-a", state="stopped", pod=False), running_vm("vm2", "node-c", "vm2-data")]
    made = []
    async with Api(scheduler, owns=True) as api:
        await api.namespace(VMS)
        await api.longhorn()
        for obj in objects:
            made.append(await api.create(obj))
        yield api
        for obj in reversed(made):
            await api.delete(obj)
        for pod in await api.list({"apiVersion": "v1", "kind": "Pod"}, VMS) + await api.list(
                {"apiVersion": "v1", "kind": "Pod"}, LONGHORN):
            await api.delete(pod)


@pytest.fixture
async def registered(scheduler, cluster, tls_files):
    """`serve` on the real apiserver (the admin's kubeconfig), registered by URL, and ready."""
    serving = await Serving.start(tls_files, "--kubeconfig", str(scheduler.kubeconfig),
                                  "--drain-delay", "0", "--webhook-configuration", CONFIGURATION)
    async for ready in registered_while(cluster, serving, registration(serving, tls_files["ca"], CONFIGURATION)):
        yield ready


async def admitted(api: Api, pod: dict[str, Any], namespace: str, decided: bool = True) -> dict[str, Any]:
    """Create the pod once the apiserver calls the webhook (the registration reaches its informer
    a moment after it is created: dry runs until the answer shows); the pod as created."""
    async def answered():
        got = await api.create(pod, dry_run=True, namespace=namespace)
        return got if "kubevirt-scheduler/decision" in annotations(got) else None

    if decided:
        await eventually(answered, 20, 0.2)  # else the apiserver never called the webhook
    return await api.create(pod, namespace=namespace)


async def test_a_vm_pod_created_through_the_apiserver_is_pinned_and_bound_next_to_its_disk(registered, cluster):
    pod = await admitted(cluster, vm_pod("vm1-rootdisk"), VMS)
    assert annotations(pod)["kubevirt-scheduler/decision"] == "pinned", annotations(pod)["kubevirt-scheduler/reason"]
    assert all(pin_of("node-b") in term["matchFields"] for term in required_terms(pod))

    async def bound():
        got = await cluster.get(pod)
        return got["spec"].get("nodeName")

    assert await eventually(bound, 20, 0.2) == "node-b"  # the real kube-scheduler honours the pin


async def test_a_share_manager_created_through_the_apiserver_follows_its_running_vm(registered, cluster):
    """Cold start: Longhorn creates the share-manager of vm2's disk while vm2 runs on node-c."""
    pod = await admitted(cluster, share_manager_pod("pvc-vm2-data"), LONGHORN)
    assert annotations(pod)["kubevirt-scheduler/decision"] == "pinned", annotations(pod)
    assert all(pin_of("node-c") in term["matchFields"] for term in required_terms(pod))

    async def bound():
        got = await cluster.get(pod)
        return got["spec"].get("nodeName")

    assert await eventually(bound, 20, 0.2) == "node-c"


async def test_a_pod_is_created_untouched_when_the_webhook_is_gone(registered, cluster):
    """failurePolicy Ignore, as installed: with the server stopped, a VM still starts (unpinned)."""
    await admitted(cluster, vm_pod("vm1-rootdisk"), VMS)
    await registered.stop()
    started = time.monotonic()
    pod = await cluster.create(vm_pod("vm1-rootdisk"), namespace=VMS)
    assert "kubevirt-scheduler/decision" not in annotations(pod)
    assert time.monotonic() - started < 5


async def test_every_decision_the_server_gives_a_launcher_pod_is_one_the_apiserver_accepts(registered, cluster):
    """The pod as KubeVirt 1.8 created it, with the VM's own required and preferred node affinity:
    the webhook's answer (pinned) applies and the apiserver validates and stores the result."""
    from tests.support.kube import load

    pod = copy.deepcopy(load("kubevirt-1.8/launcher-pod.yaml"))
    for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "ownerReferences", "managedFields"):
        pod["metadata"].pop(key, None)
    pod["metadata"]["generateName"] = "virt-launcher-vm1-"
    pod["spec"].pop("nodeName", None)
    pod.pop("status", None)
    for volume in pod["spec"]["volumes"]:
        if "persistentVolumeClaim" in volume:
            volume["persistentVolumeClaim"]["claimName"] = "vm1-rootdisk"
    try:
        created = await admitted(cluster, pod, VMS)
    except Refused as refused:
        pytest.fail(f"the apiserver refused the webhook's answer: {refused}")
    assert annotations(created)["kubevirt-scheduler/decision"] in ("pinned", "preferred")


async def test_a_drained_vms_share_manager_is_created_among_the_nodes_its_vm_can_follow(registered, cluster):
    """A drain: vm1's node is cordoned and tainted, Longhorn re-creates the share-manager it
    evicted. The webhook answers "among the nodes where the VM's migration can land too": the
    apiserver must accept that answer (a node field selector takes one value), and kube-scheduler
    binds the NFS server to one of those nodes, never to the drained one or an older CPU's."""
    from tests.support.kube import OLD_CPU, launcher_pod_of, node, vmi

    drain = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}
    made = [await cluster.create(node("node-d", unschedulable=True, taints=[drain])),
            await cluster.create(node("old-1", cpu=OLD_CPU))]
    for obj in rwx_disk("d1", None, state="stopped", owner="node-d"):
        made.append(await cluster.create(obj))
    the_vmi = await cluster.create(vmi("vm1", "node-d", "d1"))
    made += [the_vmi, await cluster.create(launcher_pod_of({**the_vmi, "status": {"nodeName": "node-d"}}))]
    try:
        pod = await admitted(cluster, share_manager_pod("pvc-d1"), LONGHORN)
        assert annotations(pod)["kubevirt-scheduler/decision"] == "pinned-among", annotations(pod)
        assert set(annotations(pod)["kubevirt-scheduler/node"].split(",")) == {"node-a", "node-b", "node-c"}

        async def bound():
            got = await cluster.get(pod)
            return got["spec"].get("nodeName")

        assert await eventually(bound, 20, 0.2) in {"node-a", "node-b", "node-c"}
    finally:
        for obj in reversed(made):
            await cluster.delete(obj)


async def test_a_hotplugged_disks_share_manager_created_through_the_apiserver_follows_its_vm(registered, cluster):
    """vm3 runs on node-c; its disk vm3-data was hotplugged (the VMI lists it, the launcher pod
    does not mount it: an attachment pod does). serve's VMI cache, watching the real apiserver,
    finds vm3 by the claim, and the share-manager Longhorn creates is bound to node-c."""
    from tests.support.kube import launcher_pod_of, vmi

    made = [await cluster.create(obj) for obj in rwx_disk("vm3-data", "node-a", state="stopped", pod=False)]
    the_vmi = vmi("vm3", "node-c")  # no disk in its pod
    the_vmi["spec"]["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": "vm3-data",
                                                                                  "hotpluggable": True}})
    stored = await cluster.create(the_vmi)
    unplugged = {**stored, "spec": {**stored["spec"], "volumes": [v for v in stored["spec"]["volumes"]
                                                                  if not v.get("persistentVolumeClaim", {}).get("hotpluggable")]}}
    made += [stored, await cluster.create(launcher_pod_of({**unplugged, "status": {"nodeName": "node-c"}}))]
    try:
        async def listed():  # the VMI reaches serve's cache a moment after it is created
            got = await cluster.create(share_manager_pod("pvc-vm3-data"), dry_run=True, namespace=LONGHORN)
            return annotations(got).get("kubevirt-scheduler/decision") == "pinned"

        await eventually(listed, 20, 0.2)
        pod = await admitted(cluster, share_manager_pod("pvc-vm3-data"), LONGHORN)
        assert all(pin_of("node-c") in term["matchFields"] for term in required_terms(pod)), annotations(pod)

        async def bound():
            got = await cluster.get(pod)
            return got["spec"].get("nodeName")

        assert await eventually(bound, 20, 0.2) == "node-c"
    finally:
        for obj in reversed(made):
            await cluster.delete(obj)


async def test_a_patch_that_replaces_what_the_pod_had_is_applied_by_the_apiserver(registered, cluster):
    """A launcher pod copied from one answered before: a stale decision of ours, and beside
    KubeVirt's term one that already names node-b. The patch sets the node affinity whole and
    the annotation over the stale one; the apiserver applies it as sent."""
    from webhook.config import Settings
    from webhook.rules.placement.decide import PINNED, Decision
    from webhook.rules.placement.patch import patch_for

    pod = vm_pod("vm1-rootdisk")
    own = copy.deepcopy(required_terms(pod))
    required_terms(pod).append({**own[0], "matchFields": [pin_of("node-b")]})
    annotations(pod)["kubevirt-scheduler/decision"] = "not-pinned"
    decision = Decision(PINNED, node="node-b", preferences=(("node-b", 100),), reason="pinned to node-b")
    ops = patch_for(pod, decision, Settings())
    assert "/metadata/annotations/kubevirt-scheduler~1decision" in [op["path"] for op in ops]  # over the stale one

    async def answered():
        got = await cluster.create(pod, dry_run=True, namespace=VMS)
        return got if annotations(got)["kubevirt-scheduler/decision"] == "pinned" else None

    await eventually(answered, 20, 0.2)
    created = await cluster.create(pod, namespace=VMS)
    assert required_terms(created) == [{**own[0], "matchFields": [pin_of("node-b")]},
                                       {**own[0], "matchFields": [pin_of("node-b"), pin_of("node-b")]}]
    assert annotations(created)["kubevirt-scheduler/node"] == "node-b"
