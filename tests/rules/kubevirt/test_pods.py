"""A VM's pods as virt-controller renders them: the VM's pod as started again from a migration target."""
import copy

from tests.support.kube import load

from webhook.rules.kubevirt.pods import as_started


def test_a_target_pod_as_the_vm_would_start():
    target = load("migration-target-pod.yaml")
    before = copy.deepcopy(target)
    started = as_started(target)
    assert "kubevirt.io/migrationJobUID" not in started["metadata"]["labels"]
    assert "podAntiAffinity" not in started["spec"]["affinity"]
    assert started["spec"]["affinity"]["nodeAffinity"] == target["spec"]["affinity"]["nodeAffinity"]
    assert target == before  # the pod read is not changed
    plain = load("virt-launcher-pod.yaml")
    assert as_started(plain) is plain


def test_the_next_target_is_free_of_the_node_an_earlier_targeted_migration_asked_for():
    target = load("migration-target-pod.yaml")
    target["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "node-a"  # spec.addedNodeSelector, merged in
    started = as_started(target, {"kubevirt.io/schedulable": "true"})
    assert "kubernetes.io/hostname" not in started["spec"]["nodeSelector"]
    assert started["spec"]["nodeSelector"]["kubevirt.io/schedulable"] == "true"
    pinned_by_the_vm = as_started(target, {"kubernetes.io/hostname": "node-a"})  # the VM's own choice stays
    assert pinned_by_the_vm["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "node-a"
    assert target["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "node-a"  # the pod read is not changed
