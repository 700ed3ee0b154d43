"""The admission rules end to end, through both stores (YAML snapshot and kmock cluster)."""
import asyncio
import copy

import pytest
from prometheus_client import generate_latest
from tests.support.kube import (answer, annotations, apply_valid, decode_patch, fixture_cluster, migration_target, node, nodes, pin_of,
                  preferred_terms, required_terms, review, rwx_disk, vm_pod)

from webhook.admission.review import parse_review
from webhook.config import Settings
from webhook.rules.shared.alone import Alone
from webhook.deadline import Deadline
from webhook.admission.admit import admit

OBSOLETE_TERM = {"matchExpressions": [{"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}]}
NODES = nodes("node-a", "node-b", "node-c")


async def run(store, obj, settings=None, **review_kw):
    outcome = await admit(parse_review(review(obj, **review_kw)), store, settings or Settings(), Deadline.after(10, 1))
    envelope = answer(outcome)
    assert envelope["apiVersion"] == "admission.k8s.io/v1"
    assert envelope["kind"] == "AdmissionReview"
    assert envelope["response"]["uid"] == review_kw.get("uid", "uid-1")
    assert envelope["response"]["allowed"] is True
    assert all(len(w) < 120 for w in envelope["response"].get("warnings", []))
    return envelope


def result_of(pod, envelope):
    return apply_valid(pod, decode_patch(envelope))


async def test_fixture_vm_is_pinned_to_its_share_manager_node(make_store):
    store = await make_store(fixture_cluster())
    pod = vm_pod()
    envelope = await run(store, pod)
    result = result_of(pod, envelope)
    assert required_terms(result) == [dict(OBSOLETE_TERM, matchFields=[pin_of("node-b")])]
    assert preferred_terms(result) == [{"weight": 100, "preference": {"matchFields": [pin_of("node-b")]}}]
    assert annotations(result)["kubevirt-scheduler/decision"] == "pinned"
    assert annotations(result)["kubevirt-scheduler/node"] == "node-b"
    assert "warnings" not in envelope["response"]


async def test_with_pinning_off_every_pod_is_admitted_as_it_came(make_store):
    """`--pin off` (the chart's `pin: off`): the webhook stays installed and changes no pod."""
    from tests.support.kube import LONGHORN_NS, running_vm, share_manager_pod

    store = await make_store(fixture_cluster() + [running_vm("vm1", "node-a", "disk")])
    for pod, namespace in ((vm_pod(), "default"), (share_manager_pod("pvc-disk"), LONGHORN_NS)):
        outcome = await admit(parse_review(review(pod, namespace=namespace)), store, Settings(pin="off"),
                              Deadline.after(10, 1))
        assert outcome.skipped == "pinning is off" and outcome.decision is None
        assert decode_patch(answer(outcome)) == []


# (name, cluster objects, claims of the VM pod, expected outcome, expected node(s) / weights)
PIN_CASES = [
    ("two-disks-one-node", rwx_disk("d1", "node-a") + rwx_disk("d2", "node-a"), ("d1", "d2"), "pinned", "node-a"),
    ("static-pv-volume-handle", rwx_disk("d1", "node-c", pv_name="static-pv", volume="vol-static"), ("d1",), "pinned", "node-c"),
    ("running-share-manager-without-pod", rwx_disk("d1", "node-a", pod=False), ("d1",), "pinned", "node-a"),
    ("pod-wins-over-owner-id", rwx_disk("d1", "node-c", owner="node-a"), ("d1",), "pinned", "node-c"),
    ("terminating-pod-falls-back-to-running-owner",
     rwx_disk("d1", "node-a", terminating=True, owner="node-c"), ("d1",), "pinned", "node-c"),
    ("one-disk-unresolved-others-pin",
     rwx_disk("d1", "node-b") + rwx_disk("d2", "node-a", access="ReadWriteOnce"), ("d1", "d2"), "pinned", "node-b"),
]


@pytest.mark.parametrize("name, objects, claims, outcome, target", PIN_CASES, ids=[c[0] for c in PIN_CASES])
async def test_pin(make_store, name, objects, claims, outcome, target):
    store = await make_store(objects + NODES)
    pod = vm_pod(*claims)
    result = result_of(pod, await run(store, pod))
    assert annotations(result)["kubevirt-scheduler/decision"] == outcome
    assert annotations(result)["kubevirt-scheduler/node"] == target
    assert all(pin_of(target) in term["matchFields"] for term in required_terms(result))


async def test_pin_is_by_node_name_not_hostname_label(make_store):
    odd = node("node-b", **{"kubernetes.io/hostname": "b.example.internal"})
    store = await make_store(rwx_disk("d1", "node-b") + [odd])
    pod = vm_pod("d1")
    ops = decode_patch(await run(store, pod))
    assert "kubernetes.io/hostname" not in str(ops) and "b.example.internal" not in str(ops)
    assert required_terms(result_of(pod, {"response": {"patch": _b64(ops), "patchType": "JSONPatch"}}))[0]["matchFields"] == [pin_of("node-b")]


def _b64(ops):
    import base64
    import json
    return base64.b64encode(json.dumps(ops).encode()).decode()


NOT_PINNED_CASES = [
    ("stopped-share-manager-stale-owner", rwx_disk("d1", None, state="stopped", owner="node-a"), "stopped"),
    ("starting-share-manager", rwx_disk("d1", None, state="starting", owner="node-a"), "starting"),
    ("stopping-share-manager", rwx_disk("d1", None, state="stopping", owner="node-a"), "stopping"),
    ("error-share-manager", rwx_disk("d1", None, state="error", owner="node-a"), "error"),
    ("terminating-pod-and-stopping", rwx_disk("d1", "node-a", terminating=True, state="stopping"), "stopping"),
    ("read-write-once", rwx_disk("d1", "node-a", access="ReadWriteOnce"), "not ReadWriteMany"),
    ("another-csi-driver", rwx_disk("d1", "node-a", driver="nfs.csi.k8s.io"), "not a driver.longhorn.io volume"),
    ("pending-pvc", rwx_disk("d1", "node-a", bound=False), "not bound yet"),
    ("missing-pvc", [], "not found"),
    ("no-share-manager-migratable-block", rwx_disk("d1", None, share_manager=False), "has no share-manager"),
]


@pytest.mark.parametrize("name, objects, why", NOT_PINNED_CASES, ids=[c[0] for c in NOT_PINNED_CASES])
async def test_not_pinned_keeps_affinity_and_says_why(make_store, name, objects, why):
    store = await make_store(objects + NODES)
    pod = vm_pod("d1")
    envelope = await run(store, pod)
    result = result_of(pod, envelope)
    assert result["spec"] == pod["spec"]  # no required, no preferred: a stale ownerID is not even a preference
    assert annotations(result)["kubevirt-scheduler/decision"] == "not-pinned"
    assert why in annotations(result)["kubevirt-scheduler/reason"]
    assert any(why in w for w in envelope["response"]["warnings"])


@pytest.mark.parametrize(
    "layout, weights",
    [
        ([("d1", "node-a"), ("d2", "node-b")], {"node-a": 50, "node-b": 50}),
        ([("d1", "node-a"), ("d2", "node-a"), ("d3", "node-b")], {"node-a": 67, "node-b": 33}),
    ],
    ids=["two-disks-two-nodes", "weighted-by-disk-count"],
)
async def test_disks_on_different_nodes_are_preferred_not_pinned(make_store, layout, weights):
    objects = [o for claim, n in layout for o in rwx_disk(claim, n)]
    store = await make_store(objects + NODES)
    pod = vm_pod(*[c for c, _ in layout])
    envelope = await run(store, pod)
    result = result_of(pod, envelope)
    assert required_terms(result) == [OBSOLETE_TERM]
    got = {t["preference"]["matchFields"][0]["values"][0]: t["weight"] for t in preferred_terms(result)}
    assert got == weights
    assert annotations(result)["kubevirt-scheduler/decision"] == "preferred"
    assert envelope["response"]["warnings"]


def _with(pod, labels=None, annotations=None, **spec):
    pod = copy.deepcopy(pod)
    pod["metadata"]["labels"].update(labels or {})
    pod["metadata"]["annotations"].update(annotations or {})
    pod["spec"].update(spec)
    return pod


UNTOUCHED = [
    ("migration-target", migration_target()),
    ("already-bound", _with(vm_pod(), nodeName="node-a")),
    ("ephemeral-provisioning", _with(vm_pod(), annotations={"kubevirt.io/ephemeral-provisioning": "true"})),
    ("opt-in-false", _with(vm_pod(), annotations={"kubevirt-scheduler/co-schedule": "false"})),
    ("opt-in-True-capitalised", _with(vm_pod(), annotations={"kubevirt-scheduler/co-schedule": "True"})),
    ("not-virt-launcher", _with(vm_pod(), labels={"kubevirt.io": "hotplug-disk"})),
]


@pytest.mark.parametrize("name, pod", UNTOUCHED, ids=[u[0] for u in UNTOUCHED])
async def test_left_untouched(make_store, name, pod):
    store = await make_store(fixture_cluster())
    envelope = await run(store, pod)
    assert envelope["response"] == {"uid": "uid-1", "allowed": True}


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
async def test_other_operations_untouched(make_store, operation):
    store = await make_store(fixture_cluster())
    envelope = await run(store, vm_pod(), operation=operation)
    assert envelope["response"] == {"uid": "uid-1", "allowed": True}


async def test_other_kinds_untouched(make_store):
    store = await make_store(fixture_cluster())
    envelope = await run(store, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, kind="ConfigMap")
    assert envelope["response"] == {"uid": "uid-1", "allowed": True}


async def test_opt_in_annotation_is_configurable(make_store):
    store = await make_store(fixture_cluster())
    pod = _with(vm_pod(), annotations={"example.com/colocate": "true", "kubevirt-scheduler/co-schedule": "false"})
    envelope = await run(store, pod, settings=Settings(opt_in_annotation="example.com/colocate"))
    assert annotations(result_of(pod, envelope))["kubevirt-scheduler/node"] == "node-b"


async def test_namespace_comes_from_the_request(make_store):
    store = await make_store(rwx_disk("d1", "node-a", namespace="vms") + rwx_disk("d1", "node-c", namespace="default", volume="other") + NODES)
    pod = vm_pod("d1")
    pod["metadata"].pop("namespace", None)
    result = result_of(pod, await run(store, pod, namespace="vms"))
    assert annotations(result)["kubevirt-scheduler/decision"] == "pinned"
    assert annotations(result)["kubevirt-scheduler/node"] == "node-a"


async def test_re_review_of_a_mutated_pod_adds_nothing(make_store):
    store = await make_store(fixture_cluster())
    pod = vm_pod()
    once = result_of(pod, await run(store, pod))
    again = await run(store, once)
    assert decode_patch(again) == []
    assert "patchType" not in again["response"]


async def test_vm_without_pvc_disks_is_not_pinned(make_store):
    store = await make_store(fixture_cluster())
    pod = vm_pod()
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" not in v]
    envelope = await run(store, pod)
    assert annotations(result_of(pod, envelope))["kubevirt-scheduler/decision"] == "not-pinned"
    assert envelope["response"]["warnings"]


@pytest.mark.parametrize("obj", [None, [], "pod", {"metadata": "x"}], ids=["null", "list", "string", "bad-metadata"])
async def test_object_of_unexpected_shape_is_allowed_with_a_warning(make_store, obj):
    store = await make_store(fixture_cluster())
    envelope = await run(store, obj)
    assert "patch" not in envelope["response"]
    assert envelope["response"]["warnings"]


@pytest.mark.parametrize("mangle", [
    lambda p: p["spec"].__setitem__("volumes", "nope"),
    lambda p: p["spec"].__setitem__("affinity", "nope"),
    lambda p: p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"].__setitem__("nodeSelectorTerms", ["x"]),
    lambda p: p["metadata"].__setitem__("annotations", {"kubevirt-scheduler/co-schedule": "true", "k": 1}),
], ids=["volumes-not-list", "affinity-not-object", "term-not-object", "annotation-not-string"])
async def test_odd_pods_never_get_a_patch_that_does_not_apply(make_store, mangle):
    import jsonpatch
    store = await make_store(fixture_cluster())
    pod = vm_pod()
    mangle(pod)
    outcome = await admit(parse_review(review(pod)), store, Settings(), Deadline.after(10, 1))
    assert outcome.skipped is not Alone.INTERNAL_ERROR, outcome.warnings  # the rules coped with the pod: no crash, no patch dropped
    jsonpatch.apply_patch(pod, decode_patch(answer(outcome)))  # applies (or is empty)


class Broken:
    """A store with a bug: every read raises what no rule expects."""

    def peek(self, *a):
        raise RuntimeError("bug")

    async def get(self, *a, **kw):
        raise RuntimeError("bug")


async def test_a_bug_in_the_rules_admits_the_pod_untouched_and_shows_as_an_error():
    outcome = await admit(parse_review(review(vm_pod())), Broken(), Settings(), Deadline.after(10, 1))
    assert outcome.skipped is Alone.INTERNAL_ERROR
    response = answer(outcome)["response"]
    assert response["allowed"] is True and "patch" not in response
    assert response["warnings"] == ["co-location skipped: internal error (RuntimeError)"]


async def test_the_metrics_and_the_log_line_tell_an_internal_error(caplog):
    import json
    import time

    from tests.support.kube import metric_sample

    from webhook import metrics
    from webhook.admission import server

    endpoint = server.Admissions(Broken(), Settings())
    errors = dict(name="colocate_admissions_total", default=0.0, rule="none", outcome="error", reason="internal error")
    before = metric_sample(generate_latest(metrics.REGISTRY).decode(), **errors)
    with caplog.at_level("INFO"):
        await endpoint.answer(json.dumps(review(vm_pod())).encode(), endpoint.deadline(10), time.monotonic())
    assert metric_sample(generate_latest(metrics.REGISTRY).decode(), **errors) == before + 1
    line = next(r.fields for r in caplog.records if r.getMessage() == "admission")
    assert (line["decision"], line["reason"]) == ("untouched", "internal error")


async def test_deadline_bounds_a_hanging_store():
    class Hanging:
        def peek(self, *a):
            return False, None  # nothing in memory: every look-up goes to the (hanging) API

        async def get(self, *a, **kw):
            await asyncio.sleep(60)

    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await admit(parse_review(review(vm_pod())), Hanging(), Settings(), Deadline.after(0.4, 0.1))
    assert loop.time() - started < 1.0
    envelope = answer(outcome)
    assert envelope["response"]["allowed"] is True
    assert "deadline" in " ".join(envelope["response"]["warnings"])


# Never strand a VM: pin only to a node that can take it now.
TAINT = {"key": "dedicated", "value": "storage", "effect": "NoSchedule"}
STRAND_CASES = [
    ("cordoned", node("node-b", unschedulable=True), {}, "cordoned"),
    ("not-ready", node("node-b", ready=False), {}, "not Ready"),
    ("tainted", node("node-b", taints=[TAINT]), {}, "untolerated taint"),
    ("no-kubevirt-label", node("node-b", schedulable_label=False), {}, "kubevirt.io/schedulable"),
    ("zone-excluded", node("node-b", **{"topology.kubernetes.io/zone": "zone-b"}),
     {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]}]}}}},
     "nodeSelector/affinity"),
    ("node-missing", None, {}, "not found"),
]


@pytest.mark.parametrize("name, share_manager_node, spec, why", STRAND_CASES, ids=[c[0] for c in STRAND_CASES])
async def test_node_that_cannot_take_the_vm_gets_a_preference_only(make_store, name, share_manager_node, spec, why):
    store = await make_store(rwx_disk("d1", "node-b") + ([share_manager_node] if share_manager_node else []))
    pod = vm_pod("d1", **spec)
    envelope = await run(store, pod)
    result = result_of(pod, envelope)
    assert required_terms(result) == required_terms(pod)
    assert preferred_terms(result) == [{"weight": 100, "preference": {"matchFields": [pin_of("node-b")]}}]
    assert annotations(result)["kubevirt-scheduler/decision"] == "preferred"
    assert why in annotations(result)["kubevirt-scheduler/reason"]
    assert any(why in w for w in envelope["response"]["warnings"])


async def test_tolerated_taint_is_still_pinned(make_store):
    store = await make_store(rwx_disk("d1", "node-b") + [node("node-b", taints=[TAINT])])
    pod = vm_pod("d1", tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}])
    result = result_of(pod, await run(store, pod))
    assert annotations(result)["kubevirt-scheduler/decision"] == "pinned"
    assert required_terms(result)[0]["matchFields"] == [pin_of("node-b")]


async def test_pods_of_another_api_group_are_untouched(make_store):
    store = await make_store(fixture_cluster())
    body = review(vm_pod())
    body["request"]["kind"]["group"] = "example.com"
    outcome = await admit(parse_review(body), store, Settings(), Deadline.after(10, 1))
    assert answer(outcome)["response"] == {"uid": "uid-1", "allowed": True}


async def test_decision_goes_to_the_audit_log(make_store):
    store = await make_store(fixture_cluster())
    envelope = await run(store, vm_pod())
    assert envelope["response"]["auditAnnotations"] == {
        "decision": "pinned", "node": "node-b", "reason": "pinned to node-b, where the share-manager of vm1-rootdisk runs"}


async def test_a_store_that_ignores_its_timeout_still_cannot_hold_the_answer():
    from webhook.stores.snapshot import SnapshotStore
    from webhook.kinds import NODE

    class SlowNodes(SnapshotStore):
        def peek(self, resource, namespace, name):
            return (False, None) if resource is NODE else super().peek(resource, namespace, name)

        async def get(self, resource, namespace, name, *, timeout=None):
            if resource is NODE:
                await asyncio.sleep(3)  # ignores `timeout`
            return await super().get(resource, namespace, name, timeout=timeout)

    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await admit(parse_review(review(vm_pod())), SlowNodes(fixture_cluster()), Settings(), Deadline.after(0.4, 0.1))
    assert loop.time() - started < 1.0  # the store would have taken 3 s
    response = answer(outcome)["response"]
    assert response["allowed"] is True
    assert outcome.decision.outcome == "preferred"  # an unchecked node is never a pin
    assert "node-b could not be checked before the deadline" in response["warnings"][0]


def test_very_long_reasons_are_clipped_so_the_pod_stays_valid():
    from webhook.rules.placement.patch import decision_annotations
    from webhook.rules.placement.decide import NOT_PINNED, Decision

    annotations_ = decision_annotations(Decision(NOT_PINNED, reason="x" * 300_000), Settings())
    assert len(annotations_["kubevirt-scheduler/reason"]) <= 1024


@pytest.mark.parametrize("key", ["no spaces allowed", "-bad/x", "a/" + "x" * 64, "UPPER.example/x"])
def test_invalid_annotation_keys_are_refused_at_start(key):
    with pytest.raises(ValueError):
        Settings(opt_in_annotation=key)


async def test_pin_preferred_only_ever_prefers_the_node(make_store):
    """--pin preferred: the VM is steered, never bound; the admin chose this, so no warning."""
    store = await make_store(fixture_cluster())
    pod = vm_pod()
    envelope = await run(store, pod, Settings(pin="preferred"))
    result = result_of(pod, envelope)
    assert required_terms(result) == [OBSOLETE_TERM]  # KubeVirt's own term, nothing of ours
    assert preferred_terms(result) == [{"weight": 100, "preference": {"matchFields": [pin_of("node-b")]}}]
    assert annotations(result)["kubevirt-scheduler/decision"] == "preferred"
    assert "--pin preferred" in annotations(result)["kubevirt-scheduler/reason"]
    assert "warnings" not in envelope["response"]


async def test_pin_preferred_also_holds_for_the_share_manager(make_store):
    from tests.support.kube import LONGHORN_NS, running_vm, share_manager_pod

    store = await make_store(rwx_disk("disk", None, share_manager=False) + nodes("node-a", "node-b")
                             + [running_vm("vm1", "node-a", "disk")])
    pod = share_manager_pod("pvc-disk")
    envelope = await run(store, pod, Settings(pin="preferred"), namespace=LONGHORN_NS)
    result = result_of(pod, envelope)
    assert required_terms(result) == []
    assert preferred_terms(result) == [{"weight": 100, "preference": {"matchFields": [pin_of("node-a")]}}]


def test_pin_mode_comes_from_the_environment_and_is_checked():
    assert Settings.from_env({"COLOCATE_PIN": "preferred"}).pin == "preferred"
    with pytest.raises(ValueError, match="pin must be one of required, preferred, off"):
        Settings.from_env({"COLOCATE_PIN": "sometimes"})


# Pin only where kube-scheduler will say yes: what its filters check, through every store.
def busy_pod(name, node_name, cpu, labels=None, anti=None):
    """A pod already bound to a node, taking `cpu` of it."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default", "labels": labels or {"app": "batch"}},
           "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "busybox",
                                                           "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
           "status": {"phase": "Running"}}
    if anti:
        pod["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": anti}}
    return pod


DB_ANTI = [{"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]


def local_disk(claim, on_node):
    """A claim bound to a local PersistentVolume that only `on_node` can mount."""
    pvc, pv = rwx_disk(claim, None, share_manager=False, access="ReadWriteOnce")[:2]
    pv["spec"].pop("csi")
    pv["spec"].update(local={"path": "/mnt/disks/ssd1"}, storageClassName="local-storage", nodeAffinity={"required": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [on_node]}]}]}})
    return [pvc, pv]


def small_node(name, cpu="2", memory="8Gi"):
    return node(name, allocatable={"cpu": cpu, "memory": memory, "pods": "110", "devices.kubevirt.io/kvm": "1k"})


SCHEDULER_CASES = [
    ("full-node", [small_node("node-b"), busy_pod("batch-1", "node-b", "1950m")], {}, (),
     "node node-b has no room: cpu 1950m of 2 requested, the VM asks 100m"),
    ("vm-larger-than-the-node", [small_node("node-b", memory="2Gi")], {}, (),
     "node node-b is too small: the VM asks memory"),
    ("ha-pair-anti-affinity", [node("node-b"), busy_pod("db-0", "node-b", "1", {"app": "db"}, DB_ANTI)],
     {"labels": {"app": "db"}, "anti": DB_ANTI}, (), "fails the VM's pod anti-affinity: pod default/db-0"),
    ("existing-pods-anti-affinity", [node("node-b"), busy_pod("guard", "node-b", "1", {"app": "guard"},
                                                              [{"labelSelector": {"matchLabels": {"kubevirt.io": "virt-launcher"}},
                                                                "topologyKey": "kubernetes.io/hostname"}])],
     {}, (), "fails the pod anti-affinity of pod default/guard"),
    ("local-disk-elsewhere", [node("node-b"), node("node-a")] + local_disk("scratch", "node-a"), {}, ("scratch",),
     "outside the node affinity of volume pvc-scratch"),
]


@pytest.mark.parametrize("name, objects, vm, more_claims, why", SCHEDULER_CASES, ids=[c[0] for c in SCHEDULER_CASES])
async def test_where_kube_scheduler_would_say_no_the_vm_is_only_preferred(make_store, name, objects, vm, more_claims, why):
    cluster = rwx_disk("vm1-rootdisk", "node-b") + nodes("node-c") + objects
    store = await make_store(cluster)
    pod = vm_pod("vm1-rootdisk", *more_claims)
    if vm.get("labels"):
        pod["metadata"]["labels"].update(vm["labels"])
    if vm.get("anti"):
        pod["spec"]["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": vm["anti"]}
    envelope = await run(store, pod)
    result = result_of(pod, envelope)
    assert all(pin_of("node-b") not in term.get("matchFields", []) for term in required_terms(result))
    assert preferred_terms(result) == [{"weight": 100, "preference": {"matchFields": [pin_of("node-b")]}}]
    reason = annotations(result)["kubevirt-scheduler/reason"]
    assert reason.startswith("preferred node-b, not pinned: ") and why in reason, reason


async def test_the_same_vm_is_pinned_where_the_node_has_room(make_store):
    """The control for the table above: with room, no anti-affinity and no local disk, it pins."""
    store = await make_store(rwx_disk("vm1-rootdisk", "node-b") + [small_node("node-b"), busy_pod("batch-1", "node-b", "1")])
    pod = vm_pod("vm1-rootdisk")
    result = result_of(pod, await run(store, pod))
    assert annotations(result)["kubevirt-scheduler/decision"] == "pinned"
