"""The stores: YAML snapshots as kubectl prints them, and the live cluster over kmock."""
import asyncio
import textwrap

import pytest
from tests.support.stores import for_host, seed
from tests.support.kube import answer, fixture_cluster, nodes, review, rwx_disk, vm_pod

from webhook.admission.review import parse_review
from webhook.config import Settings
from webhook.deadline import Deadline
from webhook.admission.admit import admit
from webhook.stores.direct import ClusterStore
from webhook.stores.snapshot import SnapshotStore
from webhook.stores.store import StoreError
from webhook.kinds import NODE, PV, PVC, SHARE_MANAGER, BadName

PVC_PATH = "/api/v1/namespaces/default/persistentvolumeclaims/vm1-rootdisk"


def test_snapshot_reads_documents_and_lists(tmp_path):
    path = tmp_path / "state.yaml"
    path.write_text(textwrap.dedent("""\
        apiVersion: v1
        kind: List
        items:
        - apiVersion: v1
          kind: PersistentVolumeClaim
          metadata: {name: a, namespace: ns1}
        - apiVersion: v1
          kind: NodeList
          items:
          - apiVersion: v1
            kind: Node
            metadata: {name: n1}
        ---
        apiVersion: longhorn.io/v1beta2
        kind: ShareManager
        metadata: {name: vol, namespace: longhorn-system}
        ---
        apiVersion: longhorn.io/v1beta1
        kind: ShareManager
        metadata: {name: old, namespace: longhorn-system}
        ---
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: ignored, namespace: ns1}
        """))
    store = SnapshotStore.from_file(path)

    async def check():
        assert (await store.get(PVC, "ns1", "a"))["metadata"]["name"] == "a"
        assert await store.get(PVC, "ns2", "a") is None
        assert (await store.get(NODE, None, "n1"))["kind"] == "Node"
        assert await store.get(SHARE_MANAGER, "longhorn-system", "vol") is not None
        assert await store.get(SHARE_MANAGER, "longhorn-system", "old") is None  # only v1beta2 is served
        assert store.peek(PVC, "ns1", "a")[1] is not None and store.peek(PVC, "ns2", "a") == (True, None)

    asyncio.run(check())


async def test_cluster_store_reads_and_404_is_none(kmock):
    seed(kmock, fixture_cluster())
    store = ClusterStore(for_host(str(kmock.url).rstrip("/")))
    try:
        assert (await store.get(PVC, "default", "vm1-rootdisk", timeout=5))["spec"]["volumeName"]
        assert await store.get(PVC, "default", "missing", timeout=5) is None
        assert await store.get(SHARE_MANAGER, "longhorn-system", "missing", timeout=5) is None
        assert (await store.get(NODE, None, "node-a", timeout=5))["metadata"]["name"] == "node-a"
        assert await store.get(PV, None, "missing", timeout=5) is None
    finally:
        await store.close()


async def test_cluster_store_api_error_is_a_store_error(kmock):
    seed(kmock, fixture_cluster())
    kmock[f"get {PVC_PATH}"] << 500
    store = ClusterStore(for_host(str(kmock.url).rstrip("/")))
    try:
        with pytest.raises(StoreError, match="500"):
            await store.get(PVC, "default", "vm1-rootdisk", timeout=5)
    finally:
        await store.close()


async def test_cluster_store_times_out(kmock):
    seed(kmock, fixture_cluster())
    kmock[f"get {PVC_PATH}"] << (lambda: asyncio.sleep(5))
    store = ClusterStore(for_host(str(kmock.url).rstrip("/")))
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(StoreError, match="timed out"):
            await store.get(PVC, "default", "vm1-rootdisk", timeout=0.3)
    finally:
        await store.close()
    assert loop.time() - started < 2


async def test_unreachable_api_is_a_store_error():
    store = ClusterStore(for_host("http://127.0.0.1:9"))  # the discard port: nothing listens
    try:
        with pytest.raises(StoreError, match="cannot reach"):
            await store.get(PVC, "default", "x", timeout=2)
    finally:
        await store.close()


@pytest.mark.parametrize("fault", ["500", "403", "hang"])
async def test_api_faults_mean_allowed_unpinned_with_a_reason(kmock, fault):
    seed(kmock, fixture_cluster())
    if fault == "hang":
        kmock[f"get {PVC_PATH}"] << (lambda: asyncio.sleep(10))
    else:
        kmock[f"get {PVC_PATH}"] << int(fault)
    store = ClusterStore(for_host(str(kmock.url).rstrip("/")))
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        outcome = await admit(parse_review(review(vm_pod())), store, Settings(), Deadline.after(1.0, 0.2))
    finally:
        await store.close()
    assert loop.time() - started < 1.0
    response = answer(outcome)["response"]
    assert response["allowed"] is True
    assert outcome.decision.outcome == "not-pinned"
    assert "vm1-rootdisk" in " ".join(response["warnings"])


async def test_one_failing_disk_does_not_hide_the_others(kmock):
    seed(kmock, rwx_disk("good", "node-a") + rwx_disk("bad", "node-c") + nodes("node-a", "node-c"))
    kmock["get /api/v1/namespaces/default/persistentvolumeclaims/bad"] << 500
    store = ClusterStore(for_host(str(kmock.url).rstrip("/")))
    try:
        outcome = await admit(parse_review(review(vm_pod("good", "bad"))), store, Settings(), Deadline.after(5, 0.5))
    finally:
        await store.close()
    assert outcome.decision.outcome == "pinned" and outcome.decision.node == "node-a"
    assert any("bad" in w for w in answer(outcome)["response"].get("warnings", []))


async def test_look_ups_by_volume_handle_and_by_claim(make_store):
    other_vm = vm_pod("d2")
    other_vm["metadata"]["name"] = "virt-launcher-vm2-abcde"
    other_vm["metadata"]["namespace"] = "default"
    mine = vm_pod("d1")
    mine["metadata"]["name"] = "virt-launcher-vm1-abcde"
    mine["metadata"]["namespace"] = "default"
    store = await make_store(rwx_disk("d1", "node-a", pv_name="static", volume="vol-1") + rwx_disk("d2", "node-b")
                             + [mine, other_vm])
    assert [pv["metadata"]["name"] for pv in await store.pvs_by_volume_handle("vol-1", timeout=5)] == ["static"]
    assert await store.pvs_by_volume_handle("nope", timeout=5) == []
    assert [p["metadata"]["name"] for p in await store.pods_by_claim("default", "d1", timeout=5)] == ["virt-launcher-vm1-abcde"]
    assert await store.pods_by_claim("other", "d1", timeout=5) == []


async def test_node_that_cannot_be_read_is_not_pinned_to(kmock):
    seed(kmock, rwx_disk("d1", "node-a") + nodes("node-a"))
    kmock["get /api/v1/nodes/node-a"] << 500
    store = ClusterStore(for_host(str(kmock.url).rstrip("/")))
    try:
        outcome = await admit(parse_review(review(vm_pod("d1"))), store, Settings(), Deadline.after(5, 0.5))
    finally:
        await store.close()
    assert outcome.decision.outcome == "preferred"
    assert "node-a could not be checked" in outcome.decision.reason


async def test_share_manager_rule_with_failing_api_is_allowed_unpinned(kmock):
    from tests.support.kube import LONGHORN_NS, running_vm, share_manager_pod
    seed(kmock, rwx_disk("d1", None, state="stopped") + nodes("node-a") + [running_vm("vm1", "node-a", "d1")])
    kmock["get /api/v1/persistentvolumes"] << 500
    store = ClusterStore(for_host(str(kmock.url).rstrip("/")))
    try:
        outcome = await admit(parse_review(review(share_manager_pod("pvc-d1"), namespace=LONGHORN_NS)), store,
                              Settings(), Deadline.after(5, 0.5))
    finally:
        await store.close()
    response = answer(outcome)["response"]
    assert response["allowed"] is True and "patch" not in response
    assert "500" in " ".join(response["warnings"])


@pytest.mark.parametrize("claim", ["../../other/persistentvolumeclaims/secret", "..", "a/b", "UPPER", "x" * 300])
async def test_claim_names_never_reach_other_paths(make_store, claim):
    """claimName is not validated by the apiserver: a tenant must not probe other namespaces through it."""
    store = await make_store(rwx_disk("secret", "node-c", namespace="other") + nodes("node-c"))
    outcome = await admit(parse_review(review(vm_pod(claim), namespace="tenant")), store, Settings(), Deadline.after(5, 0.5))
    assert outcome.decision.outcome == "not-pinned"
    assert "node-c" not in outcome.decision.reason and "not a valid PVC name" in outcome.decision.reason


def test_paths_escape_names():
    assert PVC.path("ns", "a/b") == "/api/v1/namespaces/ns/persistentvolumeclaims/a%2Fb"
    with pytest.raises(BadName):
        PVC.path("ns", "..")
