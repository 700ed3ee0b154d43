"""Which pods the rules act on, and the fixed phrase for each pod left untouched: the VM rule at
a pod's creation, and which launcher pods can say where a VM runs (cold start, explain, status,
the keeper)."""
import copy

import pytest
from tests.support.kube import LONGHORN_NS, launcher_pod, load, migration_target, running_vm, share_manager_pod, vm_pod

from webhook.config import Settings
from webhook.rules.shared.alone import Alone
from webhook.rules.shared.classify import is_share_manager_pod, opted_in_launcher, running_exemption, vm_exemption

SETTINGS = Settings()


def changed(pod, labels=None, annotations=None, **spec):
    """A copy of `pod` with labels, annotations and spec fields set (None removes one)."""
    pod = copy.deepcopy(pod)
    for part, fields in (("labels", labels or {}), ("annotations", annotations or {})):
        for key, value in fields.items():
            if value is None:
                pod["metadata"][part].pop(key, None)
            else:
                pod["metadata"][part][key] = value
    pod["spec"].update(spec)
    return pod


def launcher(node="node-b", phase="Running", **kw):
    return launcher_pod("virt-launcher-pod.yaml", "virt-launcher-vm1-abcde", node, "2026-11-01T08:00:00Z", phase, **kw)


@pytest.mark.parametrize("pod, why", [
    (vm_pod(), None),
    (migration_target(), Alone.MIGRATION_TARGET),
    (changed(vm_pod(), nodeName="node-a"), Alone.ALREADY_BOUND),
    (changed(vm_pod(), annotations={"kubevirt.io/ephemeral-provisioning": "true"}), Alone.EPHEMERAL),
    (changed(vm_pod(), annotations={"kubevirt-scheduler/co-schedule": "false"}), Alone.NOT_OPTED_IN),
    (changed(vm_pod(), annotations={"kubevirt-scheduler/co-schedule": "True"}), Alone.NOT_OPTED_IN),
    (changed(vm_pod(), annotations={"kubevirt-scheduler/co-schedule": None}), Alone.NOT_OPTED_IN),
    (changed(vm_pod(), labels={"kubevirt.io": "hotplug-disk"}), Alone.NOT_LAUNCHER),
    (share_manager_pod("pvc-vm1-rootdisk"), Alone.NOT_LAUNCHER),
    (changed(migration_target(), annotations={"kubevirt-scheduler/co-schedule": None}), Alone.NOT_OPTED_IN),
], ids=["vm", "migration-target", "already-bound", "ephemeral-provisioning", "opt-in-false",
        "opt-in-True-capitalised", "no-opt-in", "hotplug-disk-pod", "share-manager-pod", "target-not-opted-in"])
def test_vm_exemption(pod, why):
    assert vm_exemption(pod, SETTINGS) == why


def test_the_opt_in_annotation_is_the_configured_one():
    pod = changed(vm_pod(), annotations={"kubevirt-scheduler/co-schedule": None, "example.com/colocate": "true"})
    assert vm_exemption(pod, SETTINGS) == Alone.NOT_OPTED_IN
    assert vm_exemption(pod, Settings(opt_in_annotation="example.com/colocate")) is None
    assert opted_in_launcher(pod, Settings(opt_in_annotation="example.com/colocate")) is None


@pytest.mark.parametrize("pod, namespace, settings, expected", [
    (share_manager_pod("pvc-vm1-rootdisk", "node-b"), LONGHORN_NS, SETTINGS, True),
    (share_manager_pod("pvc-vm1-rootdisk", "node-b"), "default", SETTINGS, False),
    (share_manager_pod("pvc-vm1-rootdisk"), "storage", Settings(longhorn_namespace="storage"), True),
    (vm_pod(), LONGHORN_NS, SETTINGS, False),
    (changed(share_manager_pod("pvc-vm1-rootdisk"), labels={"longhorn.io/component": "instance-manager"}),
     LONGHORN_NS, SETTINGS, False),
], ids=["share-manager", "other-namespace", "configured-namespace", "vm-pod", "instance-manager"])
def test_is_share_manager_pod(pod, namespace, settings, expected):
    assert is_share_manager_pod(pod, namespace, settings) is expected


@pytest.mark.parametrize("pod, any_vm, why", [
    (launcher(), False, None),
    (load("migrated-launcher-pod.yaml"), False, None),  # a completed migration's target is the VM's pod
    (launcher(None, "Pending"), False, Alone.NOT_SCHEDULED),
    (launcher(terminating=True), False, Alone.TERMINATING),
    (launcher(phase="Failed"), False, Alone.FINISHED),
    (launcher(phase="Succeeded"), False, Alone.FINISHED),
    (changed(launcher(), annotations={"kubevirt.io/ephemeral-provisioning": "true"}), False, Alone.EPHEMERAL),
    (running_vm("vm2", "node-c", opted_in=False), False, Alone.NOT_OPTED_IN),
    (running_vm("vm2", "node-c", opted_in=False), True, None),  # explain answers for any VM
    (share_manager_pod("pvc-vm1-rootdisk", "node-b"), True, Alone.NOT_LAUNCHER),
], ids=["running", "migrated", "not-scheduled", "terminating", "failed", "succeeded", "ephemeral", "not-opted-in",
        "not-opted-in-any-vm", "share-manager-any-vm"])
def test_running_exemption(pod, any_vm, why):
    assert running_exemption(pod, SETTINGS, any_vm=any_vm) == why


def test_a_migrated_pod_counts_but_admission_still_leaves_targets_alone():
    migrated = load("migrated-launcher-pod.yaml")
    assert running_exemption(migrated, SETTINGS) is None
    assert vm_exemption(load("migration-target-pod.yaml"), SETTINGS) == Alone.MIGRATION_TARGET


@pytest.mark.parametrize("value, said", [("true", True), ("True", False), ("yes", False), ("", False), (None, False)])
def test_the_opt_in_is_exactly_true(value, said):
    """As the webhook configuration's matchConditions read it: anything but "true" is not opted in."""
    from webhook.rules.shared.classify import opted_in

    annotations = {} if value is None else {Settings().opt_in_annotation: value}
    assert opted_in(annotations, Settings()) is said
