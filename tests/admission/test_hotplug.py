"""Hotplugged disks: KubeVirt mounts them in an attachment pod, never in the launcher pod, and
lists them in the VMI's spec.volumes from the start; a VM's disks are the pod's and its VMI's."""
import copy

from tests.support.kube import LONGHORN_NS, answer, decode_patch, load, node, preferred_terms, required_terms, review, rwx_disk, \
    share_manager_pod, apply_valid

from webhook.admission.admit import admit
from webhook.admission.review import parse_review
from webhook.config import Settings
from webhook.deadline import Deadline

NS = "vms"
DEVICES = {"devices.kubevirt.io/tun": "1k", "devices.kubevirt.io/vhost-net": "1k"}  # what virt-handler offers


def kubevirt_node(name):
    made = node(name)
    made["status"]["allocatable"] |= DEVICES
    return made


def hotplugged_vmi(node_name):
    """VM colo running on `node_name`: root disk disk-b, disk-hp hotplugged (vmi-hotplugged.yaml)."""
    vmi = copy.deepcopy(load("kubevirt-1.8/vmi-hotplugged.yaml"))
    vmi["status"]["nodeName"] = node_name
    vmi["metadata"]["labels"]["kubevirt.io/nodeName"] = node_name
    return vmi


def launcher(node_name=None):
    """colo's launcher pod (launcher-pod.yaml): as created when `node_name` is None, else running there."""
    pod = copy.deepcopy(load("kubevirt-1.8/launcher-pod.yaml"))
    annotations = pod["metadata"]["annotations"]
    for key in [k for k in annotations if k.startswith("kubevirt-scheduler/") and k != "kubevirt-scheduler/co-schedule"]:
        del annotations[key]
    pod["spec"].pop("affinity", None)  # the pin an earlier answer added
    if node_name is None:
        for key in ("uid", "resourceVersion", "creationTimestamp", "name"):
            pod["metadata"].pop(key, None)
        pod["spec"].pop("nodeName", None)
        pod.pop("status", None)
    else:
        pod["spec"]["nodeName"] = node_name
        pod["metadata"]["labels"]["kubevirt.io/nodeName"] = node_name
    return pod


def disks(root, hotplugged):
    """disk-b served from `root`, disk-hp from `hotplugged` (None: its share-manager stopped, no pod)."""
    return [*rwx_disk("disk-b", root, namespace=NS),
            *(rwx_disk("disk-hp", hotplugged, namespace=NS) if hotplugged else
              rwx_disk("disk-hp", None, state="stopped", owner="node-a", namespace=NS))]


async def decided(store, pod, namespace):
    outcome = await admit(parse_review(review(pod, namespace=namespace)), store, Settings(), Deadline.after(10, 1))
    return outcome, apply_valid(pod, decode_patch(answer(outcome)))


async def test_a_vm_whose_hotplugged_disk_is_served_elsewhere_is_preferred_to_both_nodes(make_store):
    """Rule 7: disks served from different nodes, a preference for each by its share of the
    disks, never a pin to the root disk's node alone (the hotplugged disk's I/O would cross
    the network for as long as the VM runs)."""
    store = await make_store([kubevirt_node("node-a"), kubevirt_node("node-b"), hotplugged_vmi("node-a"), *disks("node-a", "node-b")])
    outcome, pod = await decided(store, launcher(), NS)
    assert outcome.decision.outcome.value == "preferred", outcome.decision.reason
    assert sorted(outcome.decision.preferences) == [("node-a", 50), ("node-b", 50)]
    assert required_terms(pod) == []
    assert {t["preference"]["matchFields"][0]["values"][0] for t in preferred_terms(pod)} == {"node-a", "node-b"}


async def test_a_vm_whose_disks_are_all_served_from_one_node_is_pinned_there(make_store):
    store = await make_store([kubevirt_node("node-a"), kubevirt_node("node-b"), hotplugged_vmi("node-b"), *disks("node-b", "node-b")])
    outcome, _ = await decided(store, launcher(), NS)
    assert outcome.decision.node == "node-b", outcome.decision.reason
    assert "disk-b, disk-hp" in outcome.decision.reason


async def test_a_hotplugged_disks_share_manager_follows_the_running_vm(make_store):
    """Longhorn re-creates the NFS server of the hotplugged disk (a cold start, a failover)
    while the VM runs on node-c: the launcher pod does not mount the disk (the attachment pod
    does), the VMI lists it, and the share-manager goes to the VM's node."""
    store = await make_store([kubevirt_node("node-a"), kubevirt_node("node-b"), kubevirt_node("node-c"), hotplugged_vmi("node-c"),
                              launcher("node-c"), load("kubevirt-1.8/hotplug-attachment-pod.yaml") | {},
                              *disks("node-c", None)])
    outcome, pod = await decided(store, share_manager_pod("pvc-disk-hp"), LONGHORN_NS)
    assert outcome.decision.node == "node-c", outcome.decision.reason
    assert all({"key": "metadata.name", "operator": "In", "values": ["node-c"]} in t["matchFields"]
               for t in required_terms(pod))
