"""Longhorn Settings that turn every share-manager restart into a reboot of its VMs: Longhorn 1.12
on any network, earlier ones where RWX volumes are served on a network of their own, unless VMIs are
on the blacklist; "cannot tell" where a value is one we do not know. Values as Longhorn's Setting
objects hold them."""
import pytest

from webhook.rules.shared.longhorn import restarts_vms, rwx_network, sparing

ENDPOINT = {"endpoint-network-for-rwx-volume": "longhorn-system/rwx-net"}
STORAGE = {"storage-network": "kube-system/storage", "storage-network-for-rwx-volume-enabled": "true"}
AUTO_DELETE_ON = {"auto-delete-pod-when-volume-detached-unexpectedly": "true"}
BLACKLIST = "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly"


@pytest.mark.parametrize("values, network", [
    ({}, None),
    (ENDPOINT, "endpoint-network-for-rwx-volume is longhorn-system/rwx-net"),
    (STORAGE, "storage-network kube-system/storage serves RWX volumes (storage-network-for-rwx-volume-enabled)"),
    ({**STORAGE, "storage-network-for-rwx-volume-enabled": "TRUE "},
     "storage-network kube-system/storage serves RWX volumes (storage-network-for-rwx-volume-enabled)"),
    ({**STORAGE, "storage-network-for-rwx-volume-enabled": "false"}, None),  # the storage network for RWO only
    ({**ENDPOINT, **STORAGE}, "endpoint-network-for-rwx-volume is longhorn-system/rwx-net"),  # Longhorn 1.11 first
    ({"endpoint-network-for-rwx-volume": "  ", "storage-network": ""}, None),
], ids=["defaults", "endpoint-network", "storage-network-for-rwx", "written-loosely", "storage-network-rwo-only",
        "both", "empty"])
def test_rwx_network(values, network):
    assert rwx_network(values) == network


V112, V111 = {"current-longhorn-version": "v1.12.0"}, {"current-longhorn-version": "v1.11.2"}
VMI_ALONE = {BLACKLIST: "kubevirt.io/VirtualMachineInstance"}
VMI_BESIDE = {BLACKLIST: "apps/StatefulSet; kubevirt.io/VirtualMachineInstance ;apps/DaemonSet"}


@pytest.mark.parametrize("values, answer", [
    (V112, "yes"),  # 1.12's defaults: on the cluster network too
    ({"current-longhorn-version": "1.12.1-rc2"}, "yes"),
    ({"current-longhorn-version": "v1.13.0"}, "yes"),
    ({**V112, **AUTO_DELETE_ON, BLACKLIST: ""}, "yes"),
    ({**V112, BLACKLIST: "apps/StatefulSet;kubevirt.io/VirtualMachine"}, "yes"),  # the VM, not the pod's owner
    ({**V112, **VMI_ALONE}, "no"),
    ({**V112, **VMI_BESIDE}, "no"),
    ({**V112, "auto-delete-pod-when-volume-detached-unexpectedly": "False"}, "no"),
    (V111, "no"),  # before 1.12: only with a network of their own for RWX volumes
    ({**V111, **ENDPOINT}, "yes"),
    ({**V111, **STORAGE, **AUTO_DELETE_ON}, "yes"),
    ({**V111, **STORAGE, "storage-network-for-rwx-volume-enabled": "false"}, "no"),
    ({**ENDPOINT}, "yes"),  # no version said, but every Longhorn with that network deletes them
    ({**ENDPOINT, **VMI_BESIDE}, "no"),
    (None, "cannot tell"),  # the Settings could not be read
    ({}, "cannot tell"),  # no version, RWX on the cluster network
    ({"current-longhorn-version": "master-head"}, "cannot tell"),
    ({**V112, "auto-delete-pod-when-volume-detached-unexpectedly": "sometimes"}, "cannot tell"),
    ({**V112, BLACKLIST: "kubevirt.io VirtualMachineInstance"}, "cannot tell"),  # not Longhorn's form
], ids=["1.12-defaults", "1.12-pre-release", "1.13", "1.12-blacklist-empty", "1.12-vm-blacklisted",
        "1.12-vmi-blacklisted", "1.12-vmi-beside-others", "1.12-auto-delete-off", "1.11-cluster-network",
        "1.11-endpoint-network", "1.11-storage-network-for-rwx", "1.11-storage-network-rwo-only",
        "no-version-endpoint-network", "no-version-vmi-blacklisted", "unreadable", "no-version", "garbled-version",
        "garbled-auto-delete", "garbled-blacklist"])
def test_whether_a_share_manager_restart_reboots_the_vms(values, answer):
    said = restarts_vms(values)
    assert said.answer == answer, said
    warning = said.warning()
    if answer == "yes":
        assert warning.startswith("Longhorn reboots VMs when their share-manager restarts: ")
        assert f"add kubevirt.io/VirtualMachineInstance to {BLACKLIST}" in warning
    elif answer == "no":
        assert warning is None
    else:
        assert warning.startswith("cannot tell whether Longhorn reboots VMs")


def test_the_answer_names_the_version_and_the_setting_that_stops_it():
    assert restarts_vms(V112).warning() == (
        "Longhorn reboots VMs when their share-manager restarts: Longhorn v1.12.0 deletes the launcher pods of a volume "
        "whose share-manager restarted, and auto-delete-pod-when-volume-detached-unexpectedly is on; add "
        f"kubevirt.io/VirtualMachineInstance to {BLACKLIST}: `kubevirt-colocate spare-vms` (docs/operations.md, its price)")
    assert restarts_vms({**V111, **ENDPOINT}).why == (
        "Longhorn v1.11.2 with endpoint-network-for-rwx-volume is longhorn-system/rwx-net and "
        "auto-delete-pod-when-volume-detached-unexpectedly is on")


@pytest.mark.parametrize("before, spared, unspared", [
    ("", "kubevirt.io/VirtualMachineInstance", ""),
    ("apps/StatefulSet", "apps/StatefulSet;kubevirt.io/VirtualMachineInstance", "apps/StatefulSet"),
    ("apps/StatefulSet; apps/DaemonSet", "apps/StatefulSet;apps/DaemonSet;kubevirt.io/VirtualMachineInstance",
     "apps/StatefulSet; apps/DaemonSet"),
    ("kubevirt.io/VirtualMachineInstance", "kubevirt.io/VirtualMachineInstance", ""),
    ("apps/DaemonSet;kubevirt.io/VirtualMachineInstance;apps/StatefulSet",
     "apps/DaemonSet;kubevirt.io/VirtualMachineInstance;apps/StatefulSet", "apps/DaemonSet;apps/StatefulSet"),
], ids=["empty", "another-kind", "two-kinds-loosely-written", "vmi-alone", "vmi-between"])
def test_sparing_vms_adds_the_vmi_kind_once_and_undoing_removes_only_it(before, spared, unspared):
    assert sparing(before) == spared
    assert sparing(sparing(before)) == spared  # idempotent
    assert sparing(before, spare=False) == unspared
    assert sparing(spared, spare=False).split(";") == [k.strip() for k in before.split(";")
                                                       if k.strip() and k.strip() != "kubevirt.io/VirtualMachineInstance"] \
        or sparing(spared, spare=False) == ""
    assert restarts_vms({**V112, BLACKLIST: spared}).answer == "no"


def test_a_value_that_is_not_owner_kinds_is_never_changed():
    with pytest.raises(ValueError, match="not owner kinds"):
        sparing("apps/StatefulSet, apps/DaemonSet")
