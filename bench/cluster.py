"""The benchmark's synthetic cluster: many Longhorn claims, share-managers, VMs and pods of other
workloads spread over the nodes, built from kubefake's objects."""
from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubefake import objects

EXAMPLE_REVIEW = Path(__file__).resolve().parent.parent / "examples" / "admission-review.json"


def volume_name(i: int) -> str:
    """pvc-<uuid>, as the CSI provisioner names volumes (random, but the same on every run)."""
    return f"pvc-{uuid.UUID(int=random.Random(i).getrandbits(128), version=4)}"


def node_name(i: int, nodes: int) -> str:
    return f"node-{i % nodes:03d}"


def launcher(vm: str, namespace: str, claims: list[str], node: str) -> dict[str, Any]:
    """The running virt-launcher pod of VM `vm`, as virt-controller made it."""
    vmi = objects.vmi(vm, node, *claims, namespace=namespace, uid=objects.vmi_uid(vm, namespace))
    return objects.launcher_pod_of(vmi, name=f"virt-launcher-{vm}-abcde", started=objects.STAMP)


def cluster(pvcs: int, share_managers: int, pods: int, nodes: int = 20, other_pods: int = 0) -> Iterator[dict[str, Any]]:
    """`pvcs` bound Longhorn claims (each with its PV); the first `share_managers` volumes are
    shared, each with a ShareManager and, for half of `pods`, a share-manager pod; the other
    half are virt-launcher pods mounting two claims each; and `other_pods` pods of other
    workloads spread over the `nodes` (each with the labels of a production node)."""
    for i in range(nodes):
        yield objects.node(node_name(i, nodes), allocatable=objects.LARGE_ALLOCATABLE, full=True)
    for i in range(pvcs):
        namespace, claim, volume = f"vms-{i % 100:02d}", f"disk-{i:06d}", volume_name(i)
        yield objects.pvc(claim, volume, namespace=namespace)
        yield objects.pv(claim, volume, namespace=namespace)
        if i < share_managers:
            yield objects.share_manager(volume, node_name(i, nodes))
        if i < min(share_managers, pods // 2):
            yield objects.share_manager_pod(volume, node_name(i, nodes))
    for j in range(pods - min(share_managers, pods // 2)):
        a = j % max(1, pvcs - 100)
        b = a + 100 if a + 100 < pvcs else a  # same namespace (i % 100)
        yield launcher(f"vm-{j:06d}", f"vms-{a % 100:02d}", [f"disk-{a:06d}", f"disk-{b:06d}"], node_name(j, nodes))
    for k in range(other_pods):
        yield objects.workload_pod(k, node_name(k, nodes))


def two_disk_review(namespace: str, claims: list[str], uid: str = "bench") -> dict[str, Any]:
    """The example AdmissionReview (a virt-launcher pod being created) with two RWX disks."""
    review = json.loads(EXAMPLE_REVIEW.read_text())
    review["request"].update(uid=uid, namespace=namespace, object=objects.vm_pod(*claims))
    return review
