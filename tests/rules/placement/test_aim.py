"""Pure: which migrations are a drain's evacuations that may be aimed, whether an aimed one failed
since the drain began, where the VM's storage is or will be, and the patch (table tests over
KubeVirt's own evacuation, tests/fixtures/vmim-evacuation.yaml, as virt-controller creates it)."""
import collections
import copy

import jsonpatch
import pytest
from tests.support.kube import evacuation, load, node, vm_pod, workload_pod

from webhook.rules.fit.usage import PodUsage
from webhook.rules.fit.view import StaticView
from webhook.rules.kubevirt.target import TargetPod
from webhook.rules.placement import aim
from webhook.rules.placement.promised import Promises
from webhook.rules.shared.facts import Fact

CONTROLLER = "system:serviceaccount:kubevirt:kubevirt-controller"


def created():
    """The fixture's evacuation as virt-controller sends it at CREATE: no name, uid or status yet."""
    migration = copy.deepcopy(load("vmim-evacuation.yaml"))
    for key in ("name", "uid", "creationTimestamp", "resourceVersion", "generation", "labels"):
        migration["metadata"].pop(key)
    migration.pop("status")
    return migration


def changed(**edits):
    migration = created()
    for path, value in edits.items():
        *parents, last = path.split("__")
        at = migration
        for key in parents:
            at = at.setdefault(key, {})
        if value is None:
            at.pop(last, None)
        else:
            at[last] = value
    return migration


EXEMPTIONS = [
    ("a drain's evacuation", created(), CONTROLLER, None),
    ("virt-controller of another namespace", created(), "system:serviceaccount:tenant-a:kubevirt-controller",
     "not created by virt-controller"),
    ("a user's", created(), "kubernetes-admin", "not created by virt-controller"),
    ("an account that only ends alike", created(), "system:serviceaccount:kubevirt:my-kubevirt-controller",
     "not created by virt-controller"),
    ("the descheduler's", changed(spec__priority="system-maintenance"), CONTROLLER, "a descheduler's evacuation"),
    ("no priority", changed(spec__priority=None), CONTROLLER, "not a drain's evacuation"),
    ("no evacuation annotation", changed(metadata__annotations={}), CONTROLLER, "not a drain's evacuation"),
    ("another name", changed(metadata__generateName="kubevirt-workload-update-"), CONTROLLER, "not a drain's evacuation"),
    ("the keeper's", changed(metadata__labels={"app.kubernetes.io/managed-by": "kubevirt-colocate"}), CONTROLLER,
     "not a drain's evacuation"),
    ("aimed already", changed(spec__addedNodeSelector={"kubernetes.io/hostname": "node-c"}), CONTROLLER, "already aimed"),
    ("not an object", "nonsense", CONTROLLER, "not a drain's evacuation"),
]


@pytest.mark.parametrize("name, migration, user, why", EXEMPTIONS, ids=[c[0] for c in EXEMPTIONS])
def test_only_virt_controllers_drain_evacuations_are_aimed(name, migration, user, why):
    assert aim.exemption(migration, user, "kubevirt") == why


def test_kubevirts_namespace_is_the_installs_own():
    assert aim.exemption(created(), "system:serviceaccount:harvester-system:kubevirt-controller", "harvester-system") is None


def earlier(name, created_at, phase, aimed_at=None, source="node-b", vmi="vm1"):
    migration = evacuation(vmi, source, added={"kubernetes.io/hostname": aimed_at} if aimed_at else None)
    migration["metadata"].update(name=name, creationTimestamp=created_at, uid=f"uid-{name}")
    migration["status"] = {"phase": phase}
    return aim.read_evacuation(migration)


NOW = aim.read_evacuation(created(), "default")
FAILURES = [
    ("none before", [], None, None),
    ("an aimed one failed", [earlier("e1", "2026-11-27T08:00:00Z", "Failed", "node-c")], None, "its aimed evacuation failed"),
    ("then an untouched one failed", [earlier("e1", "2026-11-27T08:00:00Z", "Failed", "node-c"),
                                      earlier("e2", "2026-11-27T08:06:00Z", "Failed")], None,
     "an earlier aimed evacuation failed"),
    ("an untouched one failed", [earlier("e1", "2026-11-27T08:00:00Z", "Failed")], None, None),
    ("before the VM's last move", [earlier("e1", "2026-11-20T08:00:00Z", "Failed", "node-c")], "2026-11-21T00:00:00Z", None),
    ("off another node", [earlier("e1", "2026-11-27T08:00:00Z", "Failed", "node-c", source="node-x")], None, None),
    ("of another VM", [earlier("e1", "2026-11-27T08:00:00Z", "Failed", "node-c", vmi="vm2")], None, None),
    ("an aimed one under way", [earlier("e1", "2026-11-27T08:00:00Z", "Running", "node-c")], None, None),
]


@pytest.mark.parametrize("name, before, since, why", FAILURES, ids=[c[0] for c in FAILURES])
def test_an_aimed_evacuation_that_failed_since_the_drain_began_leaves_the_next_untouched(name, before, since, why):
    assert aim.failed_aim(NOW, before, since) == why


STORAGE = [
    ("served elsewhere", [Fact("d1", "node-c", "", volume="pvc-d1")], aim.Candidates(("node-c",), "")),
    ("served from the drained node", [Fact("d1", "node-b", "", volume="pvc-d1")], "moving"),
    ("restarting", [Fact("d1", None, "share-manager of pvc-d1 is error", volume="pvc-d1")], "moving"),
    ("two disks, two nodes", [Fact("d1", "node-c", "", volume="pvc-d1"), Fact("d2", "node-d", "", volume="pvc-d2")],
     "storage on several nodes"),
    ("no Longhorn disk", [Fact("d1", None, "not a Longhorn volume")], "no storage to follow"),
]


@pytest.mark.parametrize("name, facts, expected", STORAGE, ids=[c[0] for c in STORAGE])
def test_where_the_storage_is_or_will_be(name, facts, expected):
    found = aim.storage_of(facts, "node-b")
    if expected == "moving":
        assert [f.subject for f in found] == [f.subject for f in facts]
    elif isinstance(expected, aim.Candidates):
        assert found.nodes == expected.nodes and not found.ranked and "disk d1" in found.why
    else:
        assert found == expected


def test_the_patch_adds_the_selector_and_the_short_unschedulable_timeout_and_only_those():
    """kubevirt.io/migrationUnschedulablePodTimeoutSeconds: read by virt-controller's migration controller
    (pkg/virt-controller/watch/migration/migration.go, `getUnschedulablePendingTimeoutSeconds`)."""
    migration = created()
    patched = jsonpatch.apply_patch(migration, aim.aim_patch(migration, "node-c"))
    assert patched["spec"] == {**migration["spec"], "addedNodeSelector": {"kubernetes.io/hostname": "node-c"}}
    assert patched["metadata"]["annotations"] == {**migration["metadata"]["annotations"],
                                                  "kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "5"}
    assert {k: v for k, v in patched.items() if k not in ("spec", "metadata")} == \
        {k: v for k, v in migration.items() if k not in ("spec", "metadata")}
    bare = {"metadata": {}, "spec": {"vmiName": "vm1"}}
    assert jsonpatch.apply_patch(bare, aim.aim_patch(bare, "n")) == {
        "metadata": {"annotations": {"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "5"}},
        "spec": {"vmiName": "vm1", "addedNodeSelector": {"kubernetes.io/hostname": "n"}}}


def test_the_aims_under_way_oldest_first_which_a_share_manager_follows():
    aims = [earlier("e2", "2026-11-27T08:01:00Z", "Pending", "node-d", vmi="vm2"),
            earlier("e1", "2026-11-27T08:00:00Z", "Pending", "node-c", vmi="vm1"),
            earlier("e0", "2026-11-27T07:00:00Z", "Succeeded", "node-x", vmi="vm1")]
    assert [a.name for a in aim.unfinished_aims(aims)] == ["e1", "e2"]


def test_nodes_are_named_by_their_hostname_label():
    renamed = node("node-z", **{"kubernetes.io/hostname": "z.example.com"})
    nodes = StaticView([node("node-c"), renamed, node("z.example.com", **{"kubernetes.io/hostname": "z"})])
    assert [aim.node_of(nodes, h) for h in ("node-c", "z.example.com", "z", "node-z", None)] == \
        ["node-c", "node-z", "z.example.com", None, None]


def member(name, *claims, nodes=("node-b", "node-c", "node-d"), priority=None):
    """A VM of the drain off node-a: a launcher's target pod of 2294 MiB, free to go to `nodes` (ranked)."""
    pod = vm_pod()
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" not in v]  # the plan's
    pod["spec"]["nodeSelector"] = {"kubevirt.io/schedulable": "true"}
    if priority is not None:
        pod["spec"]["priority"] = priority
    return aim.Member(namespace="default", vmi=name, uid=f"uid-{name}", target=TargetPod(pod, {}),
                      claims=frozenset(claims or (f"{name}-disk",)),
                      candidates=aim.Candidates(tuple(nodes), "most room", ranked=True))


# Room for three VMs of 2294 MiB on each node.
THREE = {"cpu": "4", "memory": "7Gi", "pods": "110", "devices.kubevirt.io/kvm": "1k"}


def view(*pods):
    return StaticView([node(n, allocatable=THREE) for n in ("node-b", "node-c", "node-d")], pods)


def planned(members, promises=None):
    found = aim.plan(members, "node-a", promises or Promises(), view())
    return {vm: where[0] if isinstance(where, tuple) else where for (_, vm), where in found.items()}


def test_a_plan_spreads_the_drain_and_is_the_same_in_any_order():
    """Eight VMs, room for three on each of three nodes: 3 + 3 + 2, and each admission, whatever order
    it reads the VMs in, gives each VM the same node."""
    members = [member(f"vm{i}") for i in range(1, 9)]
    plan = planned(members)
    assert sorted(collections.Counter(plan.values()).values()) == [2, 3, 3]
    assert planned(list(reversed(members))) == plan


def test_the_vms_of_one_disk_go_to_a_node_that_takes_them_all():
    """vm7 and vm8 share a disk: planned first, together, where two still fit."""
    members = [member(f"vm{i}") for i in range(1, 7)] + [member("vm7", "shared"), member("vm8", "shared")]
    plan = planned(members)
    assert plan["vm7"] == plan["vm8"] and all(isinstance(v, str) and v.startswith("node-") for v in plan.values())


def test_what_is_already_aimed_and_not_landed_takes_its_room():
    promises = Promises()
    for i in range(3):  # three VMs of an earlier drain on their way to node-b
        promises.make(f"old{i}", "node-x", "node-b", ("", ""), PodUsage.of(vm_pod()), 0.0)
    plan = planned([member(f"vm{i}") for i in range(1, 7)], promises)
    assert "node-b" not in plan.values() and collections.Counter(plan.values()) == {"node-c": 3, "node-d": 3}


def test_no_node_left_no_aim():
    plan = planned([member(f"vm{i}") for i in range(1, 11)])
    assert sum(1 for where in plan.values() if where.startswith("no node takes")) == 1


def test_a_vm_that_outranks_a_pod_on_a_node_is_not_aimed_there():
    """A miss there would make kube-scheduler preempt the pod: the VM is aimed where it outranks no one."""
    high = [workload_pod(i, n) for i, n in enumerate(("node-c", "node-c", "node-d", "node-d"), 2)]
    for pod in high:
        pod["spec"]["priority"] = 2000
    pods = [workload_pod(1, "node-b"), *high]  # node-b: the most room, and a pod of priority 0
    assert aim.plan([member("vm1")], "node-a", Promises(), view(*pods))["default", "vm1"][0] == "node-b"
    found = aim.plan([member("vm1", priority=1000)], "node-a", Promises(), view(*pods))
    assert found["default", "vm1"][0] in ("node-c", "node-d")
