"""The cluster as the checks read it: pods count on their node until they finish, a placed pod's
anti-affinity is found by the labels it may select, KubeVirt's own label is indexed, claims and
volumes by name. A StaticView means what the caches mean."""
import pytest
from tests.support.fitting import NS, term, workload
from tests.support.kube import launcher_pod, migration_target, node, rwx_disk, share_manager_pod

from webhook.rules.fit.usage import PodUsage
from webhook.rules.fit.view import StaticView, bound_node, has_required_anti_affinity, takes_room_only

UID = "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"  # vm1's VMI
CREATED_BY = "kubevirt.io/created-by"


def launcher(node_name="node-b", phase="Running", **kw):
    return launcher_pod("virt-launcher-pod.yaml", "virt-launcher-vm1-abcde", node_name, "2026-11-01T08:00:00Z", phase,
                        **kw)


def target(node_name="node-c", phase="Running"):
    return launcher_pod("migration-target-pod.yaml", "virt-launcher-vm1-q8w4z", node_name, "2026-11-20T09:57:40Z",
                        phase)


@pytest.mark.parametrize("pod, node_name", [
    (launcher(), "node-b"),
    (launcher(phase="Pending"), "node-b"),  # bound, not started yet: it takes its room already
    (launcher(terminating=True), "node-b"),  # being deleted, until it has stopped
    (launcher(phase="Succeeded"), None),
    (launcher(phase="Failed"), None),
    (launcher(None, "Pending"), None),
    (share_manager_pod("pvc-d1", "node-a"), "node-a"),
], ids=["running", "bound", "terminating", "succeeded", "failed", "not-scheduled", "share-manager"])
def test_bound_node(pod, node_name):
    assert bound_node(pod) == node_name


@pytest.mark.parametrize("pod, anti", [
    (migration_target(), True),  # KubeVirt's term apart from its VMI's own pods
    (launcher(), False),
    (workload("guard", "node-b", anti=[term(matchLabels={"app": "db"})]), True),
    (share_manager_pod("pvc-d1", "node-a"), False),
], ids=["migration-target", "launcher", "guarded-workload", "share-manager"])
def test_has_required_anti_affinity(pod, anti):
    assert has_required_anti_affinity(pod) is anti


def cluster():
    guard = workload("guard", "node-c", anti=[term(matchLabels={"app": "db"})])
    disk = rwx_disk("vm1-rootdisk", "node-a")
    return StaticView(
        nodes=[node("node-a"), node("node-b"), node("node-c")],
        pods=[launcher(), target(), guard, workload("done", "node-b", phase="Succeeded"),
              *[obj for obj in disk if obj["kind"] == "Pod"]],
        claims=[obj for obj in disk if obj["kind"] == "PersistentVolumeClaim"],
        volumes=[obj for obj in disk if obj["kind"] == "PersistentVolume"])


def names(pods):
    return sorted(pod["metadata"]["name"] for pod in pods)


def test_the_pods_on_a_node_are_those_bound_there_and_not_finished():
    view = cluster()
    assert names(view.pods_on("node-b")) == ["virt-launcher-vm1-abcde"]
    assert names(view.pods_on("node-a")) == ["share-manager-pvc-vm1-rootdisk"]
    assert names(view.pods_on("node-x")) == []
    assert [n["metadata"]["name"] for n in view.nodes()] == ["node-a", "node-b", "node-c"]
    assert view.node("node-b")["metadata"]["name"] == "node-b" and view.node("node-x") is None


def test_what_the_pods_on_a_node_use_counts_those_not_finished():
    view = cluster()
    on_b = view.usage("node-b")  # the VM's pod; the finished workload takes nothing
    assert (on_b.pods, on_b.requested.get("devices.kubevirt.io/kvm")) == (1, 1)
    assert on_b.requested.get("cpu") and on_b.requested.get("memory")
    nothing = view.usage("node-x")
    assert (nothing.pods, nothing.requested) == (0, {})


@pytest.mark.parametrize("labels, found", [
    ({"app": "db"}, ["guard"]),
    ({CREATED_BY: UID, "kubevirt.io": "virt-launcher"}, ["virt-launcher-vm1-q8w4z"]),  # the target's own term
    ({"app": "web"}, []),
], ids=["the-guards-app", "vm1s-pods", "nobody"])
def test_placed_pods_whose_anti_affinity_may_select_a_pod(labels, found):
    assert names(cluster().pods_with_anti_affinity_toward(labels)) == found


def test_kubevirts_own_label_is_indexed_and_no_other():
    view = cluster()
    assert names(view.pods_labelled(CREATED_BY, UID)) == ["virt-launcher-vm1-abcde", "virt-launcher-vm1-q8w4z"]
    assert names(view.pods_labelled(CREATED_BY, "another-vmi")) == []
    assert view.pods_labelled("app", "guard") is None  # not indexed: the check walks the nodes' pods


def test_claims_and_volumes_by_name():
    view = cluster()
    assert view.pvc(NS, "vm1-rootdisk")["spec"]["volumeName"] == "pvc-vm1-rootdisk"
    assert view.pvc("other", "vm1-rootdisk") is None
    assert view.pv("pvc-vm1-rootdisk")["spec"]["csi"]["volumeHandle"] == "pvc-vm1-rootdisk"
    assert view.pv("pvc-other") is None


@pytest.mark.parametrize("pod, room_only", [
    (share_manager_pod("pvc-d1", "node-b"), True),  # a drain's share-manager: no ports, no terms, no KubeVirt label
    (workload("web", "node-b"), True),
    (workload("web", "node-b", ports=[{"containerPort": 80, "hostPort": 8080}]), False),
    (workload("web", "node-b", anti=[term(matchLabels={"app": "web"})]), False),
    (launcher(), False),  # KubeVirt's label, which a migration target's anti-affinity selects
    (target(), False),
], ids=["share-manager", "plain pod", "host port", "anti-affinity", "launcher", "migration target"])
def test_what_other_pods_filters_read_of_a_pod_is_its_room_alone_or_more(pod, room_only):
    assert takes_room_only(pod, PodUsage.of(pod)) is room_only
