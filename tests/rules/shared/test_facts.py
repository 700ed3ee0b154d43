"""Pure resolution rules over realistic Longhorn objects."""
import pytest
from tests.support.kube import rwx_disk, vm_pod

from webhook.rules.shared.facts import claims_of, share_manager_node, volume_of

DRIVER = "driver.longhorn.io"


def parts(objects):
    by_kind = {o["kind"]: o for o in objects}
    return by_kind.get("PersistentVolumeClaim"), by_kind.get("PersistentVolume"), by_kind.get("Pod"), by_kind.get("ShareManager")


def test_claims_in_order_once_each():
    pod = vm_pod("a", "b", "a")
    assert claims_of(pod) == ["a", "b"]
    assert claims_of({"spec": {"volumes": ["junk", {"persistentVolumeClaim": None}]}}) == []


@pytest.mark.parametrize("objects, volume, why", [
    (rwx_disk("d", "n"), "pvc-d", "is Longhorn volume pvc-d"),
    (rwx_disk("d", "n", pv_name="static", volume="handle-1"), "handle-1", "handle-1"),
    (rwx_disk("d", "n", access="ReadWriteOnce"), None, "not ReadWriteMany"),
    (rwx_disk("d", "n", bound=False), None, "not bound yet"),
    (rwx_disk("d", "n", driver="rbd.csi.ceph.com"), None, "not a driver.longhorn.io volume"),
    ([], None, "not found"),
], ids=["dynamic", "static-pv", "rwo", "pending", "other-driver", "missing-pvc"])
def test_volume_of(objects, volume, why):
    pvc, pv, _, _ = parts(objects)
    got, reason = volume_of("default", "d", pvc, pv, DRIVER)
    assert got == volume and why in reason


def test_bound_pvc_whose_pv_is_gone():
    pvc, _, _, _ = parts(rwx_disk("d", "n"))
    assert volume_of("default", "d", pvc, None, DRIVER) == (None, "PV pvc-d not found")


@pytest.mark.parametrize("objects, node, why", [
    (rwx_disk("d", "node-b"), "node-b", "runs on node-b"),
    (rwx_disk("d", "node-b", owner="node-a"), "node-b", "runs on node-b"),
    (rwx_disk("d", "node-a", pod=False), "node-a", "runs on node-a"),
    (rwx_disk("d", "node-a", terminating=True, state="stopping"), None, "is stopping"),
    (rwx_disk("d", None, state="stopped", owner="node-c"), None, "is stopped"),
    (rwx_disk("d", None, state="starting", owner="node-c"), None, "is starting"),
    (rwx_disk("d", None, state="error", owner="node-c"), None, "is error"),
    (rwx_disk("d", None, state="unknown", owner="node-c"), None, "is unknown"),
    (rwx_disk("d", None, state="running", owner=""), None, "names no node"),
    (rwx_disk("d", None, share_manager=False), None, "has no share-manager"),
], ids=["pod", "pod-beats-owner", "running-owner", "terminating", "stopped", "starting", "error", "unknown",
        "running-no-owner", "no-share-manager"])
def test_share_manager_node(objects, node, why):
    _, _, pod, sm = parts(objects)
    got, reason = share_manager_node("pvc-d", pod, sm)
    assert got == node and why in reason


def test_finished_share_manager_pod_is_not_trusted():
    _, _, pod, sm = parts(rwx_disk("d", "node-a", state="stopped"))
    pod["status"]["phase"] = "Failed"
    assert share_manager_node("pvc-d", pod, sm)[0] is None


def test_a_pod_of_twenty_thousand_claims_is_read_in_one_pass():
    """A tenant shapes its VM's volumes: repeated names are read once, in order, in linear time."""
    import time

    from webhook.rules.shared.facts import claims_of

    pod = {"spec": {"volumes": [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": f"c{i % 20000}"}}
                                for i in range(40000)]}}
    started = time.process_time()
    claims = claims_of(pod)
    assert time.process_time() - started < 0.5  # a list-membership pass took 3.9 s
    assert claims == [f"c{i}" for i in range(20000)]
