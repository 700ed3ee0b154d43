"""Longhorn settings that turn every share-manager move into a restart of its VMs: RWX volumes
served on a network of their own, and longhorn-manager deleting the pods of a volume whose NFS
server moved, unless VMIs are on its blacklist. Values as Longhorn's Setting objects hold them."""
import pytest

from webhook.rules.shared.longhorn import restart_hazard, rwx_network

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


@pytest.mark.parametrize("values, hazard", [
    ({**ENDPOINT, **AUTO_DELETE_ON, BLACKLIST: ""}, True),
    (ENDPOINT, True),  # auto-delete is on by default
    ({**STORAGE, **AUTO_DELETE_ON}, True),
    ({**ENDPOINT, **AUTO_DELETE_ON, BLACKLIST: "apps/StatefulSet;kubevirt.io/VirtualMachineInstance"}, False),
    ({**ENDPOINT, BLACKLIST: "apps/StatefulSet; kubevirt.io/VirtualMachineInstance "}, False),
    ({**ENDPOINT, BLACKLIST: "apps/StatefulSet;kubevirt.io/VirtualMachine"}, True),  # the VM, not the pod's owner
    ({**ENDPOINT, "auto-delete-pod-when-volume-detached-unexpectedly": "false"}, False),
    ({**STORAGE, "storage-network-for-rwx-volume-enabled": "false", **AUTO_DELETE_ON}, False),
    ({**AUTO_DELETE_ON}, False),  # RWX on the cluster network: a moved share-manager keeps its service address
], ids=["endpoint-network", "auto-delete-by-default", "storage-network-for-rwx", "vmi-blacklisted",
        "vmi-blacklisted-with-spaces", "vm-blacklisted", "auto-delete-off", "rwx-on-cluster-network", "no-network"])
def test_restart_hazard(values, hazard):
    said = restart_hazard(values)
    assert (said is not None) is hazard, said
    if hazard:
        assert said.startswith("Longhorn restarts VMs when their share-manager moves: ")
        assert f"add kubevirt.io/VirtualMachineInstance to {BLACKLIST}" in said


def test_the_hazard_names_the_network_that_causes_it():
    assert restart_hazard(ENDPOINT) == (
        "Longhorn restarts VMs when their share-manager moves: endpoint-network-for-rwx-volume is "
        "longhorn-system/rwx-net and auto-delete-pod-when-volume-detached-unexpectedly is on, so longhorn-manager "
        "deletes the pods of a volume whose NFS server moved; add kubevirt.io/VirtualMachineInstance to "
        f"{BLACKLIST} (docs/operations.md)")
