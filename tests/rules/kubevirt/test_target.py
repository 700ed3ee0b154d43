"""The migration target pod as KubeVirt 1.8's virt-controller builds it, over its own objects
(tests/fixtures/kubevirt-1.8): a launcher pod after admission, a running host-model VMI, and
the target pod it created for a targeted migration."""
import copy

import pytest
from tests.support.kube import labeller, load, node

from webhook.config import Settings
from webhook.rules.fit.checks import why_not_run
from webhook.rules.keeping.running import read_vmi
from webhook.rules.placement.patch import as_created
from webhook.rules.kubevirt.target import TargetUnknown, TargetPod, lacking, target_pod

SKYLAKE_SOURCE = {"host-model-cpu.node.kubevirt.io/Skylake-Client-IBRS": "true",
                  "host-model-required-features.node.kubevirt.io/vmx": "true",
                  "cpu-vendor.node.kubevirt.io/Intel": "true"}
TO_KV_OLD = {"kubernetes.io/hostname": "kv-old"}


def launcher():
    """The launcher pod of VMI vms/colo on kv-b, as KubeVirt created it (our pin taken off)."""
    return as_created(copy.deepcopy(load("kubevirt-1.8/launcher-pod.yaml")), Settings())


def colo(**status):
    """VMI vms/colo running on kv-b: the running host-model VMI of the fixtures, renamed to the launcher's."""
    vmi = copy.deepcopy(load("kubevirt-1.8/vmi-running.yaml"))
    vmi["metadata"].update(name="colo", uid="8e8332a5-c38a-4e3b-ad87-f1446813037e")
    vmi["status"].update(nodeName="kv-b", **status)
    return vmi


def view(vmi=None):
    return read_vmi(vmi or colo(), Settings())


def source(**labels):
    return node("kv-b", cpu=None, **labels)


def build(pod=None, vmi=None, src=None, added=None):
    built = target_pod(pod or launcher(), view(vmi), source(**SKYLAKE_SOURCE) if src is None else src,
                       TO_KV_OLD if added is None else added)
    return built


def selector(built):
    assert isinstance(built, TargetPod), built
    return built.pod["spec"]["nodeSelector"]


def test_the_target_of_a_host_model_vm_is_the_pod_kubevirt_created():
    """Same CPU, vendor, canonical machine type and node selectors as virt-controller's own target
    pod; its affinity and tolerations the launcher's, with the anti-affinity to the VMI's own pods."""
    real = load("kubevirt-1.8/migration-target-pod-host-model.yaml")
    built = build()
    assert selector(built) == real["spec"]["nodeSelector"]
    real_uid = real["metadata"]["labels"]["kubevirt.io/created-by"]
    expected = copy.deepcopy(real["spec"]["affinity"])
    expected["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"]["matchLabels"][
        "kubevirt.io/created-by"] = "8e8332a5-c38a-4e3b-ad87-f1446813037e"
    assert real_uid != "8e8332a5-c38a-4e3b-ad87-f1446813037e"
    assert built.pod["spec"]["affinity"] == expected
    assert built.pod["spec"]["tolerations"] == real["spec"]["tolerations"]
    assert built.required == {
        "cpu-feature.node.kubevirt.io/vmx": "CPU feature of the source node's host model",
        "cpu-model-migration.node.kubevirt.io/Skylake-Client-IBRS": "host-model CPU of the source node",
        "cpu-vendor.node.kubevirt.io/Intel": "CPU vendor of the source node",
        "machine-type.node.kubevirt.io/pc-q35-rhel9.6.0": "machine type of the running VM",
        "kubernetes.io/hostname": "the migration's addedNodeSelector",
    }


def test_the_launcher_pod_alone_would_fit_where_the_migration_cannot():
    """The defect this model fixes: an older node takes the VM's launcher pod but not its migration."""
    old = node("kv-old", cpu="Broadwell-IBRS")
    assert why_not_run("kv-old", old, launcher(), needs_kubevirt=True) is None
    built = build()
    assert lacking(built, "kv-old", old) == ("node kv-old lacks cpu-model-migration.node.kubevirt.io/Skylake-Client-IBRS "
                                             "(host-model CPU of the source node)")
    assert why_not_run("kv-old", old, built.pod, needs_kubevirt=True) == \
        "node kv-old fails the pod's own nodeSelector/affinity"


def test_a_node_of_the_same_generation_takes_the_migration():
    same = node("kv-new", cpu="Skylake-Client-IBRS", **{"kubernetes.io/hostname": "kv-old"})
    built = build()
    assert lacking(built, "kv-new", same) is None
    assert why_not_run("kv-new", same, built.pod, needs_kubevirt=True) is None


@pytest.mark.parametrize("missing, reason", [
    ("machine-type.node.kubevirt.io/pc-q35-rhel9.6.0", "machine type of the running VM"),
    ("cpu-feature.node.kubevirt.io/vmx", "CPU feature of the source node's host model"),
    ("cpu-vendor.node.kubevirt.io/Intel", "CPU vendor of the source node"),
], ids=["machine-type", "feature", "vendor"])
def test_each_label_kubevirt_adds_is_required_of_the_target(missing, reason):
    target = node("kv-new", cpu="Skylake-Client-IBRS", **{"kubernetes.io/hostname": "kv-old"})
    del target["metadata"]["labels"][missing]
    assert lacking(build(), "kv-new", target) == f"node kv-new lacks {missing} ({reason})"


def test_the_machine_type_is_the_canonical_one_the_vm_runs_with_not_the_alias():
    built = selector(build())
    assert "machine-type.node.kubevirt.io/q35" not in built
    assert built["machine-type.node.kubevirt.io/pc-q35-rhel9.6.0"] == "true"


def test_a_named_cpu_model_gets_no_host_model_selector_but_the_vendor():
    vmi = colo()
    vmi["spec"]["domain"]["cpu"]["model"] = "Skylake-Client-IBRS"
    pod = launcher()
    pod["spec"]["nodeSelector"]["cpu-model.node.kubevirt.io/Skylake-Client-IBRS"] = "true"
    got = selector(build(pod, vmi))
    assert not any(k.startswith(("cpu-model-migration.", "cpu-feature.")) for k in got)
    assert got["cpu-model.node.kubevirt.io/Skylake-Client-IBRS"] == "true"
    assert got["cpu-vendor.node.kubevirt.io/Intel"] == "true"


def test_a_vm_that_migrated_before_keeps_the_cpu_its_pod_carries():
    """prepareNodeSelectorForHostCpuModel: the source node's host model is not read again."""
    pod = launcher()
    pod["metadata"]["labels"]["kubevirt.io/migrationJobUID"] = "2acbff80-a7a0-4af4-a301-26045dc3dc55"
    pod["spec"]["nodeSelector"].update({"cpu-model-migration.node.kubevirt.io/Broadwell-IBRS": "true",
                                        "cpu-feature.node.kubevirt.io/vmx": "true",
                                        "cpu-vendor.node.kubevirt.io/Intel": "true",
                                        "kubernetes.io/hostname": "kv-b"})
    vmi = colo(machine={"type": "pc-q35-rhel9.4.0"})  # started on a node with the older QEMU
    built = build(pod, vmi, src=source(**{"host-model-cpu.node.kubevirt.io/EPYC-Milan": "true",
                                          "cpu-vendor.node.kubevirt.io/AMD": "true"}))
    got = selector(built)
    assert got["cpu-model-migration.node.kubevirt.io/Broadwell-IBRS"] == "true"
    assert not any("EPYC" in k or "AMD" in k for k in got)
    assert got["kubernetes.io/hostname"] == "kv-old"  # the earlier migration's node is not required again
    assert built.required["cpu-model-migration.node.kubevirt.io/Broadwell-IBRS"] == \
        "CPU the VM has kept since an earlier migration"
    old = node("kv-old", cpu="Broadwell-IBRS")
    assert lacking(built, "kv-old", old) is None  # so it can go back to the older generation


def test_a_node_with_an_older_qemu_cannot_take_a_vm_running_a_newer_machine_type():
    old = node("kv-old", cpu="Broadwell-IBRS", **{"cpu-model-migration.node.kubevirt.io/Skylake-Client-IBRS": "true"})
    assert lacking(build(), "kv-old", old) == ("node kv-old lacks machine-type.node.kubevirt.io/pc-q35-rhel9.6.0 "
                                               "(machine type of the running VM)")


def test_the_vms_own_selector_wins_over_added_node_selector():
    vmi = colo()
    vmi["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "kv-b"}
    pod = launcher()
    pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "kv-b"
    built = build(pod, vmi)
    assert selector(built)["kubernetes.io/hostname"] == "kv-b"
    assert "kubernetes.io/hostname" not in built.required
    assert why_not_run("kv-old", node("kv-old"), built.pod, needs_kubevirt=True) is not None


def test_the_target_keeps_away_from_the_vmis_own_pods():
    terms = build().pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == [{"labelSelector": {"matchLabels": {"kubevirt.io/created-by": "8e8332a5-c38a-4e3b-ad87-f1446813037e"}},
                      "topologyKey": "kubernetes.io/hostname"}]


def test_the_launcher_pod_is_not_changed():
    pod = launcher()
    before = copy.deepcopy(pod)
    build(pod)
    assert pod == before


def test_without_a_machine_type_in_its_status_the_target_takes_the_specs():
    """virt-controller reads status.machine.type, else spec.domain.machine.type (template.go,
    newNodeSelectorRenderer): the alias the launcher pod was made with."""
    built = build(vmi=colo(machine={}))
    machine_keys = {k: v for k, v in selector(built).items() if k.startswith("machine-type.")}
    assert machine_keys == {"machine-type.node.kubevirt.io/q35": "true"}
    assert built.required["machine-type.node.kubevirt.io/q35"] == "machine type of the VM's spec"
    same = node("kv-new", cpu="Skylake-Client-IBRS", **{"kubernetes.io/hostname": "kv-old"})
    del same["metadata"]["labels"]["machine-type.node.kubevirt.io/q35"]
    assert lacking(built, "kv-new", same) == ("node kv-new lacks machine-type.node.kubevirt.io/q35 "
                                              "(machine type of the VM's spec)")


def test_without_any_machine_type_the_target_selects_none():
    """Neither in the status nor in the spec: virt-controller adds no machine-type selector, so a
    node the labeller gave no machine type at all can take the migration."""
    vmi = colo(machine={})
    del vmi["spec"]["domain"]["machine"]
    pod = launcher()
    assert "machine-type.node.kubevirt.io/q35" in pod["spec"]["nodeSelector"]
    built = build(pod, vmi)
    assert not any(k.startswith("machine-type.") for k in selector(built))
    assert not any(k.startswith("machine-type.") for k in built.required)
    bare = node("kv-new", cpu="Skylake-Client-IBRS", **{"kubernetes.io/hostname": "kv-old"})
    for key in [k for k in bare["metadata"]["labels"] if k.startswith("machine-type.")]:
        del bare["metadata"]["labels"][key]
    assert lacking(built, "kv-new", bare) is None
    assert why_not_run("kv-new", bare, built.pod, needs_kubevirt=True) is None


def test_a_source_node_without_the_labellers_labels_is_a_reason_to_hold():
    assert build(src=source()) == TargetUnknown(
        "source node kv-b has no host-model-cpu.node.kubevirt.io/* label (virt-handler's node labeller): "
        "cannot tell the host-model CPU its target needs")


def test_an_unknown_source_node_is_a_reason_to_hold():
    assert target_pod(launcher(), view(), None, TO_KV_OLD) == TargetUnknown("source node kv-b is not known")


def test_the_labeller_labels_of_the_tests_nodes_match_the_real_target():
    """The test clusters' nodes (tests/kube.py) carry what KubeVirt's real target pod selects."""
    real = load("kubevirt-1.8/migration-target-pod-host-model.yaml")["spec"]["nodeSelector"]
    labels = labeller("Skylake-Client-IBRS")
    assert all(labels.get(k) == v for k, v in real.items() if ".node.kubevirt.io/" in k)
    assert not all(labeller("Broadwell-IBRS").get(k) == v for k, v in real.items() if ".node.kubevirt.io/" in k)
