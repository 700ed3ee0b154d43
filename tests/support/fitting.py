"""Builders and the one table of rows for the scheduler-filter checks (tests/rules/fit/).

Every failing row names the one check that turns the pod away; each plugin's test module holds
its rows to that, and `test_every_check_decides_some_row` proves no check is dead weight.
"""
from __future__ import annotations

from typing import Any

import pytest
from tests.support.kube import node, rwx_disk, vm_pod

from webhook.rules.fit.checks import CHECKS, why_not_fit, why_not_pass
from webhook.rules.fit.demand import Demand
from webhook.rules.fit.fields import Unreadable
from webhook.rules.fit.view import StaticView

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
KVM = "devices.kubevirt.io/kvm"
GI, MI = 2**30, 2**20
NS = "default"
PARAMS = "pod, node_name, objects, nodes, check, fragment"


def sized(name: str, zone: str = "zone-a", *, cpu: str = "4", memory: str = "16Gi", pods: str = "110",
          kvm: str | None = "1k", extra: dict[str, str] | None = None, **labels: Any) -> dict[str, Any]:
    """A Ready node with the allocatable a kubelet reports (KubeVirt's device plugin adds kvm)."""
    result = node(name, **{ZONE: zone}, **labels)
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "95551679124",
                   "hugepages-1Gi": "0", "hugepages-2Mi": "0", **(extra or {})}
    if kvm is not None:
        allocatable[KVM] = kvm
    result["status"]["allocatable"] = allocatable
    result["status"]["capacity"] = dict(allocatable)
    return result


def workload(name: str, node_name: str, *, namespace: str = NS, labels: dict[str, str] | None = None,
             requests: dict[str, Any] | None = None, ports: list[dict[str, Any]] | None = None,
             anti: list[dict[str, Any]] | None = None, phase: str = "Running", terminating: bool = False) -> dict[str, Any]:
    """A pod some controller created and the scheduler bound to `node_name`."""
    container: dict[str, Any] = {"name": "app", "image": "registry.example/app:1",
                                 "resources": {"requests": requests or {"cpu": "100m", "memory": "128Mi"}}}
    if ports:
        container["ports"] = ports
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels or {"app": name}},
        "spec": {"nodeName": node_name, "containers": [container]},
        "status": {"phase": phase},
    }
    if anti:
        pod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti}}
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    return pod


def term(key: str = HOSTNAME, **selector: Any) -> dict[str, Any]:
    """A PodAffinityTerm; `selector` is the labelSelector (matchLabels=..., matchExpressions=...)."""
    raw: dict[str, Any] = {"topologyKey": key, "labelSelector": selector}
    for field in ("namespaces", "namespaceSelector"):
        if field in selector:
            raw[field] = selector.pop(field)
    return raw


def vm(*, affinity: list | None = None, anti: list | None = None, spread: list | None = None,
       ports: list | None = None, requests: dict | None = None, claims: tuple[str, ...] = (),
       labels: dict | None = None, **spec: Any) -> dict[str, Any]:
    """The fixture virt-launcher pod (cpu 100m, memory 2294Mi, one kvm device), varied."""
    pod = vm_pod(*claims, **spec)
    compute = pod["spec"]["containers"][0]
    if requests is not None:
        compute["resources"]["requests"].update(requests)
    if ports:
        compute["ports"] = ports
    if affinity:
        pod["spec"]["affinity"]["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": affinity}
    if anti:
        pod["spec"]["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": anti}
    if spread:
        pod["spec"]["topologySpreadConstraints"] = spread
    if labels:
        pod["metadata"]["labels"].update(labels)
    return pod


def local_volume(claim: str, on: str, *, key: str = HOSTNAME, required: dict | None = None) -> list[dict[str, Any]]:
    """A bound claim on a local PV, which only one node (or zone) can mount."""
    pvc, pv = rwx_disk(claim, None, access="ReadWriteOnce", driver="local.csi.example", share_manager=False)[:2]
    pvc["metadata"]["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    if required is None:
        required = {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": [on]}]}]}
    pv["spec"]["nodeAffinity"] = {"required": required}
    return [pvc, pv]


def zonal_volume(claim: str, zones: str, key: str = ZONE) -> list[dict[str, Any]]:
    """A bound claim on a cloud disk whose PV carries the zone label its provisioner set."""
    pvc, pv = rwx_disk(claim, None, access="ReadWriteOnce", driver="pd.csi.example", share_manager=False,
                       pv_name=f"pv-{claim}")[:2]
    pv["metadata"]["labels"] = {key: zones}
    return [pvc, pv]


def without_label(the_node: dict[str, Any], key: str) -> dict[str, Any]:
    del the_node["metadata"]["labels"][key]
    return the_node


def three_nodes(**overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """node-a and node-b in zone-a, node-c in zone-b."""
    specs = {"node-a": {"zone": "zone-a"}, "node-b": {"zone": "zone-a"}, "node-c": {"zone": "zone-b"}}
    return [sized(name, **{**spec, **overrides.get(name.replace("-", "_"), {})}) for name, spec in specs.items()]


ROOTDISK = rwx_disk("vm1-rootdisk", "node-a")  # the fixture pod's disk, served from node-a


def view_of(*objects: dict[str, Any], nodes: list[dict[str, Any]] | None = None) -> StaticView:
    everything = [*(nodes if nodes is not None else three_nodes()), *ROOTDISK, *objects]
    by_kind: dict[str, list] = {"Node": [], "Pod": [], "PersistentVolumeClaim": [], "PersistentVolume": []}
    for obj in everything:
        by_kind.get(obj["kind"], []).append(obj)
    return StaticView(by_kind["Node"], by_kind["Pod"], by_kind["PersistentVolumeClaim"], by_kind["PersistentVolume"])


def on(view: StaticView, name: str) -> dict[str, Any]:
    found = view.node(name)
    assert found is not None
    return found


def init_container(name: str, cpu: str, memory: str = "64Mi", sidecar: bool = False) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "x", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container



# A pod on node-a holding most of the node: the VM (100m, 2294Mi, 1 kvm) no longer fits beside it.
BUSY = {"cpu": "3950m", "memory": "8Gi"}
DB = {"app": "db"}
RESTRICTED = [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]

# (pod, node, extra objects, nodes (None: three_nodes()), the check that fails or None, reason fragment)
CASES = [
    # ---- passes
    pytest.param(vm(), "node-b", [], None, None, None, id="empty-cluster-fits"),
    pytest.param(vm(), "node-a", [workload("web", "node-a", requests={"cpu": "3900m", "memory": "13Gi"})],
                 None, None, None, id="fits-exactly"),
    # ---- NodeResourcesFit
    pytest.param(vm(), "node-a", [workload("busy", "node-a", requests=BUSY)], None, "node_resources_fit",
                 "node node-a has no room: cpu 3950m of 4 requested, the VM asks 100m", id="full-node-cpu"),
    pytest.param(vm(), "node-a", [workload("big", "node-a", requests={"cpu": "1", "memory": "14Gi"})], None,
                 "node_resources_fit", "memory 14Gi of 16Gi requested, the VM asks 2.24Gi", id="full-node-memory"),
    pytest.param(vm(), "node-a", [workload("one", "node-a"), workload("two", "node-a")],
                 three_nodes(node_a={"pods": "3"}), "node_resources_fit", "node node-a has no room: 3 of 3 pods",
                 id="no-pod-slot"),  # the share-manager pod takes the third slot
    pytest.param(vm(requests={"memory": "32Gi"}), "node-b", [], None, "node_resources_fit",
                 "node node-b is too small: the VM asks memory 32Gi, the node has 16Gi in all", id="oversized-vm"),
    pytest.param(vm(), "node-b", [], three_nodes(node_b={"kvm": None}), "node_resources_fit",
                 "node node-b offers no devices.kubevirt.io/kvm", id="no-kvm-device"),
    pytest.param(vm(requests={"nvidia.com/gpu": "1"}), "node-b",
                 [workload("train", "node-b", requests={"nvidia.com/gpu": 1})],
                 three_nodes(node_b={"extra": {"nvidia.com/gpu": "1"}}), "node_resources_fit",
                 "nvidia.com/gpu 1 of 1 requested, the VM asks 1", id="gpu-taken"),
    pytest.param(vm(requests={"hugepages-2Mi": "1Gi"}), "node-b", [], None, "node_resources_fit",
                 "node node-b offers no hugepages-2Mi", id="no-hugepages"),
    pytest.param(vm(requests={"hugepages-2Mi": "1Gi"}), "node-b", [],
                 three_nodes(node_b={"extra": {"hugepages-2Mi": "2Gi"}}), None, None, id="hugepages-offered"),
    pytest.param(vm(initContainers=[init_container("disk-prep", "4")]), "node-a", [workload("web", "node-a")], None,
                 "node_resources_fit", "cpu 100m of 4 requested, the VM asks 4", id="init-container-counts"),
    pytest.param(vm(overhead={"memory": "2Gi"}), "node-a", [workload("big", "node-a", requests={"memory": "12Gi"})],
                 None, "node_resources_fit", "the VM asks 4.24Gi", id="overhead-counts"),
    # ---- NodePorts
    pytest.param(vm(ports=[{"containerPort": 8080, "hostPort": 8080}]), "node-b",
                 [workload("proxy", "node-b", ports=[{"containerPort": 80, "hostPort": 8080}])], None, "node_ports",
                 "node node-b has host port 8080/TCP in use", id="host-port-taken"),
    pytest.param(vm(ports=[{"containerPort": 8080, "hostPort": 8080, "protocol": "UDP"}]), "node-b",
                 [workload("proxy", "node-b", ports=[{"containerPort": 80, "hostPort": 8080}])], None, None, None,
                 id="host-port-other-protocol"),
    pytest.param(vm(ports=[{"containerPort": 8080, "hostPort": 8080, "hostIP": "10.0.0.2"}]), "node-b",
                 [workload("proxy", "node-b", ports=[{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}])],
                 None, None, None, id="host-port-other-address"),
    pytest.param(vm(ports=[{"containerPort": 8080, "hostPort": 8080, "hostIP": "10.0.0.2"}]), "node-b",
                 [workload("proxy", "node-b", ports=[{"containerPort": 80, "hostPort": 8080}])], None, "node_ports",
                 "8080/TCP on 10.0.0.2 in use", id="host-port-held-on-every-address"),
    pytest.param(vm(ports=[{"containerPort": 8080, "hostPort": 8080}]), "node-b",
                 [workload("proxy", "node-b", ports=[{"containerPort": 80, "hostPort": 8080, "hostIP": "10.0.0.1"}])],
                 None, "node_ports", "8080/TCP in use", id="host-port-wanted-on-every-address"),
    # ---- VolumeBinding
    pytest.param(vm(claims=("vm1-rootdisk", "scratch")), "node-b", local_volume("scratch", "node-a"), None,
                 "volumes", "node node-b is outside the node affinity of volume pvc-scratch (claim scratch)",
                 id="local-volume-on-other-node"),
    pytest.param(vm(claims=("vm1-rootdisk", "scratch")), "node-a", local_volume("scratch", "node-a"), None,
                 None, None, id="local-volume-here"),
    pytest.param(vm(claims=("scratch",)), "node-b", local_volume("scratch", "zone-a", key=ZONE), None, None, None,
                 id="zonal-volume-same-zone"),
    pytest.param(vm(claims=("scratch",)), "node-c", local_volume("scratch", "zone-a", key=ZONE), None,
                 "volumes", "outside the node affinity of volume pvc-scratch", id="zonal-volume-other-zone"),
    pytest.param(vm(claims=("scratch",)), "node-a", local_volume("scratch", "node-a", required={"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}), None,
                 "volumes", "outside the node affinity", id="volume-matchfields-never-match"),
    pytest.param(vm(claims=("disk",)), "node-c", zonal_volume("disk", "zone-a"), None, "volumes",
                 "node node-c is outside the zone of volume pv-disk (claim disk): topology.kubernetes.io/zone=zone-a",
                 id="volume-zone-label"),
    pytest.param(vm(claims=("disk",)), "node-c", zonal_volume("disk", "zone-a__zone-b"), None, None, None,
                 id="volume-zone-label-lists-zones"),
    pytest.param(vm(claims=("disk",)), "node-c", zonal_volume("disk", "zone-a", key="failure-domain.beta.kubernetes.io/zone"),
                 None, "volumes", "failure-domain.beta.kubernetes.io/zone=zone-a", id="volume-zone-beta-label"),
    pytest.param(vm(claims=("disk",)), "node-c", zonal_volume("disk", "zone-a"),
                 [without_label(n, ZONE) for n in three_nodes()], None, None, id="volume-zone-node-without-zones"),
    # ---- InterPodAffinity: the VM's anti-affinity
    pytest.param(vm(anti=[term(matchLabels=DB)]), "node-b", [workload("db-0", "node-b", labels=DB)], None,
                 "inter_pod_affinity", "node node-b fails the VM's pod anti-affinity: pod default/db-0 runs in "
                 "kubernetes.io/hostname=node-b", id="anti-affinity-hostname"),
    pytest.param(vm(anti=[term(matchLabels=DB)]), "node-c", [workload("db-0", "node-b", labels=DB)], None,
                 None, None, id="anti-affinity-other-host"),
    pytest.param(vm(anti=[term(ZONE, matchExpressions=[{"key": "app", "operator": "In", "values": ["db", "cache"]}])]),
                 "node-b", [workload("db-0", "node-a", labels=DB)], None, "inter_pod_affinity",
                 "pod default/db-0 runs in topology.kubernetes.io/zone=zone-a", id="anti-affinity-zone"),
    pytest.param(vm(anti=[term(ZONE, matchLabels=DB)]), "node-c", [workload("db-0", "node-a", labels=DB)], None,
                 None, None, id="anti-affinity-other-zone"),
    pytest.param(vm(anti=[term(ZONE, matchLabels=DB)]), "node-b", [workload("db-0", "node-b", labels=DB)],
                 [without_label(n, ZONE) for n in three_nodes()], None, None, id="anti-affinity-node-without-key"),
    pytest.param(vm(anti=[term(matchLabels=DB)]), "node-b", [workload("db-0", "node-b", labels=DB, namespace="prod")],
                 None, None, None, id="anti-affinity-own-namespace-only"),
    pytest.param(vm(anti=[term(matchLabels=DB, namespaces=["prod"])]), "node-b",
                 [workload("db-0", "node-b", labels=DB, namespace="prod")], None, "inter_pod_affinity",
                 "pod prod/db-0", id="anti-affinity-listed-namespace"),
    pytest.param(vm(anti=[term(matchLabels=DB, namespaceSelector={})]), "node-b",
                 [workload("db-0", "node-b", labels=DB, namespace="prod")], None, "inter_pod_affinity",
                 "pod prod/db-0", id="anti-affinity-every-namespace"),
    pytest.param(vm(anti=[term(matchExpressions=[{"key": "app", "operator": "NotIn", "values": ["web"]},
                                                 {"key": "tier", "operator": "DoesNotExist"}])]), "node-b",
                 [workload("db-0", "node-b", labels=DB)], None, "inter_pod_affinity", "db-0",
                 id="anti-affinity-notin-doesnotexist"),
    pytest.param(vm(anti=[term(matchExpressions=[{"key": "app", "operator": "Exists"}, {"key": "tier", "operator": "Exists"}])]),
                 "node-b", [workload("db-0", "node-b", labels=DB)], None, None, None, id="anti-affinity-exists-miss"),
    pytest.param(vm(anti=[{"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "db"}},
                           "matchLabelKeys": ["tenant"]}], labels={"tenant": "blue"}), "node-b",
                 [workload("db-0", "node-b", labels={"app": "db", "tenant": "red"})], None, None, None,
                 id="anti-affinity-match-label-keys"),
    # ---- InterPodAffinity: anti-affinity of pods already placed
    pytest.param(vm(), "node-b", [workload("guard", "node-b", anti=[term(matchLabels={"kubevirt.io": "virt-launcher"})])],
                 None, "inter_pod_affinity", "node node-b fails the pod anti-affinity of pod default/guard in "
                 "kubernetes.io/hostname=node-b", id="existing-anti-affinity"),
    pytest.param(vm(), "node-c", [workload("guard", "node-b", anti=[term(matchLabels={"kubevirt.io": "virt-launcher"})])],
                 None, None, None, id="existing-anti-affinity-elsewhere"),
    pytest.param(vm(), "node-a", [workload("guard", "node-b", anti=[term(ZONE, matchLabels={"kubevirt.io": "virt-launcher"})])],
                 None, "inter_pod_affinity", "pod default/guard in topology.kubernetes.io/zone=zone-a",
                 id="existing-anti-affinity-zone"),
    pytest.param(vm(), "node-b", [workload("guard", "node-b", namespace="prod",
                                           anti=[term(matchLabels={"kubevirt.io": "virt-launcher"})])],
                 None, None, None, id="existing-anti-affinity-other-namespace"),
    # ---- InterPodAffinity: the VM's required affinity
    pytest.param(vm(affinity=[term(ZONE, matchLabels={"app": "cache"})]), "node-b",
                 [workload("cache-0", "node-a", labels={"app": "cache"})], None, None, None, id="affinity-same-zone"),
    pytest.param(vm(affinity=[term(ZONE, matchLabels={"app": "cache"})]), "node-c",
                 [workload("cache-0", "node-a", labels={"app": "cache"})], None, "inter_pod_affinity",
                 "node node-c fails the VM's pod affinity: no matching pod in topology.kubernetes.io/zone=zone-b",
                 id="affinity-other-zone"),
    pytest.param(vm(affinity=[term(ZONE, matchLabels={"app": "cache"})]), "node-b", [], None, "inter_pod_affinity",
                 "no matching pod", id="affinity-nothing-to-follow"),
    pytest.param(vm(affinity=[term(ZONE, matchLabels={"vm.kubevirt.io/name": "vm1"})]), "node-c", [], None,
                 None, None, id="affinity-first-of-its-group"),
    pytest.param(vm(affinity=[term(ZONE, matchLabels={"vm.kubevirt.io/name": "vm1"})]), "node-c",
                 [workload("vm1-exporter", "node-a", labels={"vm.kubevirt.io/name": "vm1"})], None, "inter_pod_affinity",
                 "no matching pod in topology.kubernetes.io/zone=zone-b", id="affinity-group-started-elsewhere"),
    # ---- PodTopologySpread
    pytest.param(vm(labels={"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": HOSTNAME,
                                                      "whenUnsatisfiable": "DoNotSchedule",
                                                      "labelSelector": {"matchLabels": {"app": "web"}}}]),
                 "node-a", [workload("web-0", "node-a", labels={"app": "web"}), workload("web-1", "node-b", labels={"app": "web"})],
                 None, "pod_topology_spread", "node node-a fails the VM's topology spread on kubernetes.io/hostname: "
                 "2 matching pods in node-a against 0 in the emptiest domain, maxSkew 1", id="spread-skew"),
    pytest.param(vm(labels={"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": HOSTNAME,
                                                      "whenUnsatisfiable": "DoNotSchedule",
                                                      "labelSelector": {"matchLabels": {"app": "web"}}}]),
                 "node-c", [workload("web-0", "node-a", labels={"app": "web"}), workload("web-1", "node-b", labels={"app": "web"})],
                 None, None, None, id="spread-emptiest"),
    pytest.param(vm(labels={"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": HOSTNAME,
                                                      "whenUnsatisfiable": "ScheduleAnyway",
                                                      "labelSelector": {"matchLabels": {"app": "web"}}}]),
                 "node-a", [workload("web-0", "node-a", labels={"app": "web"})], None, None, None,
                 id="spread-schedule-anyway"),
    pytest.param(vm(labels={"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": HOSTNAME,
                                                      "whenUnsatisfiable": "DoNotSchedule",
                                                      "labelSelector": {"matchLabels": {"app": "web"}}}]),
                 "node-a", [workload("web-0", "node-a", labels={"app": "web"}), workload("web-1", "node-b", labels={"app": "web"})],
                 [*three_nodes()[:2], sized("node-c", zone="zone-b", schedulable_label=False)], None, None,
                 id="spread-ignores-nodes-the-vm-cannot-use"),
    pytest.param(vm(labels={"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": HOSTNAME,
                                                      "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "Honor",
                                                      "labelSelector": {"matchLabels": {"app": "web"}}}]),
                 "node-a", [workload("web-0", "node-a", labels={"app": "web"}), workload("web-1", "node-b", labels={"app": "web"})],
                 [*three_nodes()[:2], sized("node-c", zone="zone-b", taints=RESTRICTED)], None, None,
                 id="spread-honors-taints"),
    pytest.param(vm(labels={"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": HOSTNAME,
                                                      "whenUnsatisfiable": "DoNotSchedule",
                                                      "labelSelector": {"matchLabels": {"app": "web"}}}]),
                 "node-a", [workload("web-0", "node-a", labels={"app": "web"}), workload("web-1", "node-b", labels={"app": "web"})],
                 [*three_nodes()[:2], sized("node-c", zone="zone-b", taints=RESTRICTED)], "pod_topology_spread",
                 "against 0", id="spread-counts-tainted-nodes-by-default"),
    pytest.param(vm(labels={"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": ZONE, "minDomains": 3,
                                                      "whenUnsatisfiable": "DoNotSchedule",
                                                      "labelSelector": {"matchLabels": {"app": "web"}}}]),
                 "node-c", [workload("web-0", "node-a", labels={"app": "web"}), workload("web-1", "node-c", labels={"app": "web"})],
                 None, "pod_topology_spread", "2 matching pods in zone-b against 0", id="spread-min-domains"),
    pytest.param(vm(labels={"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": ZONE,
                                                      "whenUnsatisfiable": "DoNotSchedule",
                                                      "labelSelector": {"matchLabels": {"app": "web"}}}]),
                 "node-c", [workload("web-0", "node-a", labels={"app": "web"}), workload("web-1", "node-c", labels={"app": "web"})],
                 None, None, None, id="spread-zones-even"),
    pytest.param(vm(labels={"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": HOSTNAME,
                                                      "whenUnsatisfiable": "DoNotSchedule",
                                                      "labelSelector": {"matchLabels": {"app": "web"}}}]),
                 "node-b", [workload("web-0", "node-a", labels={"app": "web"}),
                            workload("web-1", "node-b", labels={"app": "web"}, namespace="prod"),
                            workload("web-2", "node-b", labels={"app": "web"}, terminating=True)],
                 [*three_nodes()[:2]], None, None, id="spread-counts-own-namespace-live-pods"),
    pytest.param(vm(labels={"app": "web"}, spread=[{"maxSkew": 1, "topologyKey": "rack",
                                                      "whenUnsatisfiable": "DoNotSchedule",
                                                      "labelSelector": {"matchLabels": {"app": "web"}}}]),
                 "node-b", [], None, "pod_topology_spread", "node node-b has no rack label",
                 id="spread-node-without-key"),
    # ---- cannot tell
    pytest.param(vm(requests={"cpu": "lots"}), "node-b", [], None, "*",
                 "cannot tell whether node node-b fits the VM: the VM cannot be read: container 0 request cpu 'lots' "
                 "is not a quantity", id="unparsable-request"),
    pytest.param(vm(containers="compute"), "node-b", [], None, "*", "cannot tell", id="containers-not-a-list"),
    pytest.param(vm(), "node-a", [workload("odd", "node-a", requests={"memory": "12 GB"})], None, "node_resources_fit",
                 "cannot tell whether node node-a fits the VM: 1 pod(s) on it have requests that do not parse",
                 id="unparsable-request-on-node"),
    pytest.param(vm(), "node-b", [], [sized("node-a"), {**sized("node-b"), "status": {"conditions": []}}],
                 "node_resources_fit", "cannot tell whether node node-b fits the VM: it has no status.allocatable",
                 id="node-without-allocatable"),
    pytest.param(vm(), "node-b", [], three_nodes(node_b={"memory": "16 gigs"}), "node_resources_fit",
                 "allocatable memory '16 gigs' is not a quantity", id="unparsable-allocatable"),
    pytest.param(vm(claims=("vm1-rootdisk", "unknown")), "node-b", [], None, "volumes",
                 "claim unknown is not known", id="claim-not-in-cache"),
    pytest.param(vm(claims=("vm1-rootdisk", "fresh")), "node-b", rwx_disk("fresh", None, bound=False), None,
                 "volumes", "claim fresh is not bound yet", id="claim-unbound"),
    pytest.param(vm(anti=[term(matchExpressions=[{"key": "app", "operator": "In", "values": []}])]), "node-b", [],
                 None, "*", "cannot tell", id="selector-in-without-values"),
    pytest.param(vm(anti=[term(matchLabels=DB, namespaceSelector={"matchLabels": {"team": "db"}})]), "node-b", [],
                 None, "inter_pod_affinity", "selects namespaces by label", id="namespace-selector"),
    pytest.param(vm(), "node-b", [workload("guard", "node-b", anti=[term(matchLabels={"kubevirt.io": "virt-launcher"},
                                                                         namespaceSelector={"matchLabels": {"t": "x"}})])],
                 None, "inter_pod_affinity", "the pod anti-affinity of pod default/guard selects namespaces by label",
                 id="existing-namespace-selector"),
    pytest.param(vm(spread=[{"maxSkew": 0, "topologyKey": HOSTNAME, "whenUnsatisfiable": "DoNotSchedule"}]),
                 "node-b", [], None, "*", "maxSkew 0 is not an integer >= 1", id="spread-max-skew-zero"),
]



def answer(check, demand, node, view):
    """One check's answer, as `why_not_fit` gives it (a check that raises: "cannot tell")."""
    return why_not_pass((check,), demand, node, view, "the VM")


def judged(pod, node_name, objects, nodes):
    view = view_of(*objects, nodes=nodes)
    return view, on(view, node_name), why_not_fit(pod, NS, on(view, node_name), view)


def rows(*checks: str | None) -> list[Any]:
    """The rows decided by these checks (None: the rows that pass)."""
    return [case for case in CASES if case.values[4] in checks]


def assert_row(pod, node_name, objects, nodes, check, fragment) -> None:
    """The row's answer: a pass, or a reason holding its fragment."""
    reason = judged(pod, node_name, objects, nodes)[2]
    if check is None:
        assert reason is None
    else:
        assert reason is not None and fragment in reason, reason


def row_tests(name: str) -> tuple[Any, Any]:
    """The tests of one check's rows: each row's answer, and that no other check fails it."""

    @pytest.mark.parametrize(PARAMS, rows(name))
    def test_why_not_fit(pod, node_name, objects, nodes, check, fragment):
        assert_row(pod, node_name, objects, nodes, check, fragment)

    @pytest.mark.parametrize(PARAMS, rows(name))
    def test_only_the_named_check_fails(pod, node_name, objects, nodes, check, fragment):
        """Each failing row is decided by exactly one check, so removing that check flips it."""
        view = view_of(*objects, nodes=nodes)
        demand = Demand.of(pod, NS)
        assert [c.__name__ for c in CHECKS if answer(c, demand, on(view, node_name), view) is not None] == [check]

    @pytest.mark.parametrize(PARAMS, rows(name))
    def test_one_demand_judged_on_every_node_decides_as_one_per_node(pod, node_name, objects, nodes, check, fragment):
        """What a check reads of the cluster once per pod (kept in its Demand, as a share-manager's
        judging tries a dozen nodes with one) decides every node as a fresh read would, in
        either order of the nodes."""
        view = view_of(*objects, nodes=nodes)
        names = [n["metadata"]["name"] for n in view.nodes()]
        fresh = {name: why_not_fit(pod, NS, on(view, name), view) for name in names}
        for order in (names, names[::-1]):
            try:
                demand = Demand.of(pod, NS, view.memo)
            except Unreadable:
                assert all(reason is not None and "cannot be read" in reason for reason in fresh.values())
                return
            assert {name: why_not_fit(pod, NS, on(view, name), view, demand=demand) for name in order} == fresh

    return test_why_not_fit, test_only_the_named_check_fails, test_one_demand_judged_on_every_node_decides_as_one_per_node
