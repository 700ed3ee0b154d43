"""The migration target pod's one recipe: the drain's share-manager rule renders it from the
launcher pod as the caches keep it (or whole, without caches), the keeper from the launcher pod it
keeps per VM apart; all get the pod virt-controller creates."""
import copy

from tests.support.kube import load, node

from webhook.stores.shapes import pod_to_place, shapes
from webhook.deadline import Deadline
from webhook.lookup.resolve import migration_source, migration_target, migration_target_pod
from webhook.rules.fit.memo import Memo
from webhook.stores.snapshot import SnapshotStore
from webhook.config import Settings
from webhook.rules.placement.patch import as_created
from webhook.rules.keeping.running import read_vmi
from webhook.rules.kubevirt.target import TargetPod

SETTINGS = Settings()
SKYLAKE_SOURCE = {"host-model-cpu.node.kubevirt.io/Skylake-Client-IBRS": "true",
                  "host-model-required-features.node.kubevirt.io/vmx": "true",
                  "cpu-vendor.node.kubevirt.io/Intel": "true"}
TO_KV_OLD = {"kubernetes.io/hostname": "kv-old"}


def admitted():
    """The launcher pod of VMI vms/colo as the cluster holds it: pinned by us to kv-b, bound there."""
    return copy.deepcopy(load("kubevirt-1.8/launcher-pod.yaml"))


def colo():
    vmi = copy.deepcopy(load("kubevirt-1.8/vmi-running.yaml"))
    vmi["metadata"].update(name="colo", uid="8e8332a5-c38a-4e3b-ad87-f1446813037e")
    vmi["status"].update(nodeName="kv-b")
    return read_vmi(vmi, SETTINGS)


def render(made):
    built = migration_target_pod(made, colo(), node("kv-b", cpu=None, **SKYLAKE_SOURCE), TO_KV_OLD)
    assert isinstance(built, TargetPod), built
    return built


def test_the_target_is_rendered_without_our_pin():
    """KubeVirt renders the target from the VMI: our pin to the source node is not on it (it
    would make every migration impossible), the launcher pod's own node affinity is."""
    pod = admitted()
    built = render(migration_source(pod, SETTINGS))
    real = load("kubevirt-1.8/migration-target-pod-host-model.yaml")
    assert built.pod["spec"]["nodeSelector"] == real["spec"]["nodeSelector"]
    assert built.pod["spec"]["affinity"]["nodeAffinity"] == real["spec"]["affinity"]["nodeAffinity"]
    assert "nodeName" not in built.pod["spec"]
    assert pod == admitted()  # the launcher pod read is not changed


def test_the_keepers_launcher_pod_is_small_and_the_same_taken_again():
    """The keeper keeps `migration_source` of the launcher pod, not the pod: the drain's rule renders from the same."""
    kept = migration_source(admitted(), SETTINGS)
    assert migration_source(kept, SETTINGS) == kept  # taken again, the same
    assert len(repr(kept)) < len(repr(admitted())) / 2  # what the keeper holds per VM apart is small


def test_the_cached_launcher_pod_gives_the_same_source_as_the_whole_one():
    """Every replica keeps each launcher pod with what its migration target is rendered from
    (`shapes.shape_pod`): a drain's share-manager rule renders from that, with no read of the pod."""
    cached = shapes(SETTINGS)["Pod"](admitted())
    assert migration_source(cached, SETTINGS) == migration_source(admitted(), SETTINGS)


def test_the_source_is_the_pod_as_kubevirt_made_it_reduced_to_what_the_checks_read():
    """Reduced before our pin is taken off (only that is copied), it is what taking the pin off the
    whole pod and reducing it would give, our annotations gone, the pod read unchanged."""
    for pod in (admitted(), shapes(SETTINGS)["Pod"](admitted())):
        before = copy.deepcopy(pod)
        made = migration_source(pod, SETTINGS)
        assert made == pod_to_place(as_created(copy.deepcopy(pod), SETTINGS))
        assert "annotations" not in made["metadata"] and "nodeName" not in made["spec"]
        assert pod == before


async def test_a_relabelled_source_node_gives_the_next_target_its_new_cpu():
    """A drain's share-managers keep what the source node's CPU labels give a migration target, per
    version of the node: once virt-handler labels it anew (a new host model after a firmware update),
    the next target is rendered from the new labels, never the kept ones."""
    vmi = copy.deepcopy(load("kubevirt-1.8/vmi-running.yaml"))
    vmi["metadata"].update(name="colo", uid="8e8332a5-c38a-4e3b-ad87-f1446813037e")
    vmi["status"].update(nodeName="kv-b")
    memo = Memo()

    async def target(**labels):
        store = SnapshotStore([admitted(), vmi, node("kv-b", cpu=None, **labels)])
        built = await migration_target(store, SETTINGS, admitted(), None, Deadline.after(5.0, 0.0), memo)
        assert isinstance(built, TargetPod), built
        return {k for k in built.pod["spec"]["nodeSelector"] if k.startswith("cpu-model-migration.")}

    assert await target(**SKYLAKE_SOURCE) == {"cpu-model-migration.node.kubevirt.io/Skylake-Client-IBRS"}
    icelake = {"host-model-cpu.node.kubevirt.io/Icelake-Server": "true", "cpu-vendor.node.kubevirt.io/Intel": "true"}
    assert await target(**icelake) == {"cpu-model-migration.node.kubevirt.io/Icelake-Server"}
