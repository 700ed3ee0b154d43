"""What the caches keep of each kind (stores/shapes.py) is enough: over generated clusters, the
rules give the same answers from the kept shapes as from the whole objects.

Each property builds the same store twice, one keeping every object whole and one keeping its
kind's shape, fed the same lists as their reflectors would feed them (no API: reads the caches
cannot answer go to a snapshot of the whole objects, as the API would answer them), and asks both
what the rules ask in production: admissions of a VM's pod and of share-manager pods, the node
and scheduler checks of every node, the keeper's reading of launcher pods, VMIs and migrations.
The generated objects vary what the rules read and what they do not (labels, annotations,
managedFields, containers, volumes, tolerations, affinities, statuses, ...).
"""
from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta

import pytest
from tests.support.fitting import CASES, NS, on, view_of
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.support.kube import (LONGHORN_NS, OLD_CPU, launcher_pod_of, migration, node, nodes, review, rwx_disk, share_manager_pod,
                  vm_pod, vmi, workload_pod)

from webhook import kinds
from webhook.admission.admit import admit
from webhook.admission.review import parse_review
from webhook.stores.cache import WatchedClusterStore
from webhook.rules.shared import declared
from webhook.stores.shapes import pod_to_place, shapes
from webhook.keeper.kubevirt_api import KubeVirtWatch
from webhook.cluster.reflector import Event, EventType
from webhook.stores.snapshot import SnapshotStore
from webhook.config import Settings
from webhook.deadline import Deadline
from webhook.keeper.observe import where_it_runs
from webhook.kinds import NODE, POD, PV, PVC
from webhook.rules import fit
from webhook.rules.fit.checks import why_not_fit, why_not_run
from webhook.rules.fit.demand import Demand
from webhook.rules.fit.memo import Memo
from webhook.rules.fit.resources import least_allocated
from webhook.rules.keeping import migrations as moves
from webhook.rules.keeping.migrations import read_migration
from webhook.rules.keeping.running import read_vmi, vm_pods
from webhook.rules.placement.stranded import stranded, unschedulable_since
from webhook.rules.shared.reading import Malformed

NO_API = object()  # the stores here are fed by hand: one that reached for the API would fail
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
NODE_NAMES = ("node-a", "node-b", "node-c")
CLAIMS = ("d1", "d2")
VMS = ("vm1", "vm2")
# Modest: these run in the whole suite (each property a few seconds), the same examples every run.
PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def whole(obj):
    return obj


def at(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- changes to objects
# Each change takes the object and a small number (which variant); those on fields no rule reads
# and those on fields the rules read are drawn alike.


def _meta(obj, n):
    meta = obj["metadata"]
    meta.setdefault("labels", {})[f"example.com/team-{n}"] = "storage"
    meta.setdefault("annotations", {})["kubectl.kubernetes.io/last-applied-configuration"] = '{"kind":"x"}' * (n + 1)
    meta["managedFields"] = [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:metadata": {}}}]
    meta.update(resourceVersion=str(100 + n), uid=f"uid-{n}", generation=n + 1)


def _status_noise(obj, n):
    obj.setdefault("status", {})["observedGeneration"] = n
    obj["status"].setdefault("conditions", []).append(
        {"type": "Example", "status": "True", "reason": "Because", "message": "m" * n, "lastTransitionTime": at(NOW)})


COMMON = [_meta, _status_noise]


def _container_noise(pod, n):
    spec = pod["spec"]
    for container in spec.setdefault("containers", [{"name": "main"}]):
        container.update(image=f"registry.example/app:{n}", env=[{"name": "E", "value": "v" * n}],
                         volumeMounts=[{"name": "data", "mountPath": "/data"}],
                         livenessProbe={"httpGet": {"path": "/", "port": 8080}},
                         ports=[*container.get("ports", []), {"containerPort": 9000 + n, "protocol": "TCP"}])
    spec["containers"].append({"name": f"log-{n}", "image": "busybox", "args": ["tail"]})
    spec.setdefault("volumes", []).append({"name": "data", "emptyDir": {}})


def _scheduling_noise(pod, n):
    spec = pod["spec"]
    spec.setdefault("tolerations", []).append({"key": "example.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    spec.setdefault("nodeSelector", {})["example.com/pool"] = f"pool-{n}"
    affinity = spec.setdefault("affinity", {})
    affinity["nodeAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}}]}
    affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}
    spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                          "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}]
    spec.update(priority=n, schedulerName="default-scheduler", dnsPolicy="ClusterFirst")


def _pod_status_noise(pod, n):
    status = pod.setdefault("status", {})
    status.update(podIP=f"10.42.0.{n}", hostIP="192.168.1.10", startTime=at(NOW - timedelta(days=n)), qosClass="Burstable")
    status["conditions"] = [*status.get("conditions", []), {"type": "Ready", "status": "True"},
                            {"type": "Initialized", "status": "True"}]
    status["containerStatuses"] = [{"name": c.get("name"), "ready": True, "restartCount": n, "image": "x"}
                                   for c in pod["spec"].get("containers", [])]


def _big_request(pod, n):
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": ["3", "7", "500m", "63"][n], "memory": "4Gi"},
                                                 "limits": {"cpu": "64"}}


def _host_port(pod, n):
    pod["spec"]["containers"][0].setdefault("ports", []).append({"containerPort": 80, "hostPort": 8443 + n % 2})


def _host_network(pod, n):
    pod["spec"]["hostNetwork"] = True
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8443 + n % 2, "protocol": "TCP"}]


def _anti_affinity(pod, n):
    selector = [{"matchLabels": {"kubevirt.io": "virt-launcher"}}, {"matchLabels": {"app": "web"}},
                {"matchExpressions": [{"key": "kubevirt.io", "operator": "Exists"}]},
                {"matchLabels": {"longhorn.io/component": "share-manager"}}][n]
    reach = [{"namespaceSelector": {}}, {"namespaces": [NS]}, {}, {"namespaces": [NS, LONGHORN_NS]}][n]
    pod["spec"].setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname", **reach}]}


def _sidecar(pod, n):
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
        {"name": "proxy", "image": "envoy", "restartPolicy": "Always" if n % 2 else "OnFailure",
         "resources": {"requests": {"cpu": "1500m"}}}]


def _overhead(pod, n):
    pod["spec"]["overhead"] = {"cpu": f"{n + 1}", "memory": "200Mi"}
    if n % 2:
        pod["spec"]["resources"] = {"requests": {"cpu": "3", "memory": "1Gi"}}


def _resized(pod, n):
    containers = pod["spec"]["containers"]
    pod.setdefault("status", {})["containerStatuses"] = [
        {"name": c["name"], "allocatedResources": {"cpu": "6", "memory": "1Gi"},
         "resources": {"requests": {"cpu": ["5", "100m", "6", "1"][n]}}, "ready": True} for c in containers]
    pod["status"]["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": "Deferred"},
                                   {"type": "Ready", "status": "True"}]


def _finished(pod, n):
    pod.setdefault("status", {})["phase"] = ["Succeeded", "Failed", "Pending", "Unknown"][n]


def _terminating(obj, n):
    obj["metadata"]["deletionTimestamp"] = at(NOW - timedelta(minutes=n))


def _pinned(pod, n):
    pod["metadata"].setdefault("annotations", {}).update({
        "kubevirt-scheduler/decision": ["required", "preferred", "required", "skipped"][n],
        "kubevirt-scheduler/node": "node-a", "kubevirt-scheduler/reason": "storage " * n})


def _unscheduled(pod, n):
    pod["spec"].pop("nodeName", None)
    pod.setdefault("status", {})["phase"] = "Pending"
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False" if n else "True",
                                    "reason": "Unschedulable", "message": f"0/3 nodes are available: {n}",
                                    "lastTransitionTime": at(NOW - timedelta(minutes=5 * n))}]


def _created(pod, n):
    pod["metadata"]["creationTimestamp"] = at(NOW - timedelta(minutes=[1, 10, 60, 3000][n]))


def _not_opted_in(pod, n):
    pod["metadata"].setdefault("annotations", {}).pop("kubevirt-scheduler/co-schedule", None)
    if n % 2:
        pod["metadata"]["annotations"][kinds.EPHEMERAL_PROVISIONING] = "true"


POD_CHANGES = [*COMMON, _container_noise, _scheduling_noise, _pod_status_noise, _big_request, _host_port,
               _host_network, _anti_affinity, _sidecar, _overhead, _resized, _finished, _terminating, _pinned,
               _unscheduled, _created, _not_opted_in]


def _node_noise(obj, n):
    status = obj["status"]
    status.update(images=[{"names": [f"registry.example/img:{i}"], "sizeBytes": 10 ** 8} for i in range(n + 1)],
                  addresses=[{"type": "InternalIP", "address": "192.168.1.10"}], nodeInfo={"kubeletVersion": "v1.31.2"},
                  capacity=dict(status["allocatable"]))
    for condition in status["conditions"]:
        condition.update(lastHeartbeatTime=at(NOW), message="kubelet is posting ready status")
    status["conditions"].append({"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"})
    obj["spec"].update(podCIDR=f"10.42.{n}.0/24", providerID=f"k3s://node-{n}")


def _taints(obj, n):
    obj["spec"]["taints"] = [[{"key": "kubevirt.io/drain", "effect": "NoSchedule", "value": "draining"}],
                             [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}],
                             [{"key": "example.com/soft", "effect": "PreferNoSchedule"}],
                             [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]][n]


def _small(obj, n):
    obj["status"]["allocatable"] = {"cpu": ["2", "4", "8", "64"][n], "memory": "8Gi", "pods": ["1", "3", "110", "0"][n],
                                    "devices.kubevirt.io/kvm": "1k"}


def _cordoned(obj, n):
    obj["spec"]["unschedulable"] = True


def _not_ready(obj, n):
    obj["status"]["conditions"][0].update(status=["False", "Unknown", "False", "True"][n])


def _unlabelled(obj, n):
    labels = obj["metadata"]["labels"]
    key = [kinds.KUBEVIRT_SCHEDULABLE, "kubernetes.io/hostname", "kubernetes.io/arch", "example.com/none"][n]
    labels.pop(key, None)


def _zone(obj, n):
    obj["metadata"]["labels"]["topology.kubernetes.io/zone"] = f"zone-{n % 2}"


NODE_CHANGES = [*COMMON, _node_noise, _taints, _small, _cordoned, _not_ready, _unlabelled, _zone]


def _claim_noise(obj, n):
    obj["spec"].update(storageClassName=f"class-{n}", volumeMode="Filesystem", resources={"requests": {"storage": f"{n}Gi"}})
    obj.setdefault("status", {}).update(capacity={"storage": f"{n}Gi"}, accessModes=["ReadWriteMany"])


def _claim_pending(obj, n):
    obj["status"] = {"phase": ["Pending", "Lost", "Bound", "Pending"][n]}
    if n != 2:
        obj["spec"].pop("volumeName", None)


def _claim_single(obj, n):
    obj["spec"]["accessModes"] = [["ReadWriteOnce"], ["ReadWriteOncePod"], ["ReadOnlyMany"], ["ReadWriteMany"]][n]


def _volume_noise(obj, n):
    spec = obj["spec"]
    spec["csi"]["volumeAttributes"] = {"numberOfReplicas": str(n), "share": "true"}
    spec.update(mountOptions=["nfsvers=4.1"], persistentVolumeReclaimPolicy=["Delete", "Retain"][n % 2])
    obj["status"] = {"phase": "Bound", "lastPhaseTransitionTime": at(NOW)}


def _volume_driver(obj, n):
    obj["spec"]["csi"]["driver"] = ["nfs.csi.k8s.io", "driver.longhorn.io", "rbd.csi.ceph.com", "driver.longhorn.io"][n]


def _volume_affinity(obj, n):
    obj["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE_NAMES[n % 3]]}]}]}}
    obj["metadata"].setdefault("labels", {})["topology.kubernetes.io/zone"] = f"zone-{n % 2}"


def _share_manager_noise(obj, n):
    obj["spec"]["image"] = f"longhornio/longhorn-share-manager:v1.{n}"
    obj["status"].update(endpoint=f"nfs://10.43.0.{n}/x", conditions=[{"type": "Ready", "status": "True"}])


def _share_manager_state(obj, n):
    obj["status"].update(state=["stopped", "starting", "error", "running"][n], ownerID=NODE_NAMES[n % 3])


KIND_CHANGES = {
    "Node": NODE_CHANGES,
    "Pod": POD_CHANGES,
    "PersistentVolumeClaim": [*COMMON, _claim_noise, _claim_pending, _claim_single],
    "PersistentVolume": [*COMMON, _volume_noise, _volume_driver, _volume_affinity],
    "ShareManager": [*COMMON, _share_manager_noise, _share_manager_state],
}


# Keys of annotations and labels: any at all, and those the rules read or write (and look-alikes).
NAMED_KEYS = st.sampled_from([kinds.DEFAULT_OPT_IN, "example.com/colocate", kinds.KEEP_ANNOTATION,
                              kinds.EVACUATION_ANNOTATION, kinds.EPHEMERAL_PROVISIONING, kinds.MANAGED_BY_LABEL,
                              "kubevirt-scheduler/node", "kubevirt-scheduler/frozen", "kubevirt.io/eviction-source"])
ANY_KEYS = st.builds(lambda prefix, name: f"{prefix}/{name}" if prefix else name,
                     st.sampled_from(["", "example.com", "kubevirt.io", "kubevirt-scheduler"]),
                     st.text("abcdefghijklmnopqrstuvwxyz-.", min_size=1, max_size=12).filter(lambda k: k[0].isalpha()))
KEYED = st.dictionaries(st.one_of(NAMED_KEYS, ANY_KEYS), st.sampled_from(["true", "false", "", "x"]), max_size=3)


@st.composite
def changed(draw, obj, changes=None):
    """`obj` with a few changes of its kind drawn (none, often), and annotations and labels of any keys."""
    for change in draw(st.lists(st.sampled_from(changes or KIND_CHANGES[obj["kind"]]), max_size=4, unique=True)):
        change(obj, draw(st.integers(0, 3)))
    for where in ("annotations", "labels"):
        keyed = draw(KEYED)
        if keyed:
            obj["metadata"].setdefault(where, {}).update(keyed)
    return obj


# --------------------------------------------------------------------------- a cluster


@st.composite
def clusters(draw):
    """Nodes, a Longhorn RWX disk or two (PVC, PV, ShareManager, share-manager pod), launcher pods of
    VMs using them (some migrating, their target pod not placed yet), their VMIs, other workloads."""
    node_names = NODE_NAMES[:draw(st.integers(1, 3))]
    objects = [draw(changed(node(name, cpu=draw(st.sampled_from([None, OLD_CPU, "Skylake-Client-IBRS"])))))
               for name in node_names]
    for claim in CLAIMS[:draw(st.integers(1, 2))]:
        disk = rwx_disk(claim, draw(st.sampled_from([*node_names, None])), owner=draw(st.sampled_from([None, *node_names])))
        objects += [draw(changed(o)) for o in disk]
    for name in VMS[:draw(st.integers(0, 2))]:
        here = draw(st.sampled_from(node_names))
        the_vmi = vmi(name, here, *draw(st.lists(st.sampled_from(CLAIMS), min_size=1, max_size=2, unique=True)))
        objects += [the_vmi, draw(changed(launcher_pod_of(the_vmi, here)))]
        if draw(st.booleans()):  # migrating: a target pod, placed or waiting for a node
            target = launcher_pod_of(the_vmi, draw(st.sampled_from(node_names)), name=f"virt-launcher-{name}-t4rg3",
                                     migration_uid="m-uid", migration_name=f"{name}-migration")
            if draw(st.booleans()):
                _unscheduled(target, draw(st.integers(0, 3)))
            objects.append(draw(changed(target)))
    for i in range(draw(st.integers(0, 3))):
        objects.append(draw(changed(workload_pod(draw(st.sampled_from([i, 20, 100])) + i, draw(st.sampled_from(node_names))))))
    return objects


@st.composite
def vm_pods_to_admit(draw):
    """A VM's pod being created: its claims, and what it asks of a node."""
    pod = vm_pod(*draw(st.lists(st.sampled_from([*CLAIMS, "missing"]), min_size=1, max_size=2, unique=True)))
    return draw(changed(pod, [_big_request, _host_port, _anti_affinity, _sidecar, _overhead, _scheduling_noise]))


def listed(objects):
    return [Event(EventType.LISTED, copy.deepcopy(o)) for o in objects] + [Event(EventType.SYNCED, seconds=0.01)]


def fed(store, objects, keep_whole):
    """The store's caches fed the objects their lists would hold, keeping them whole or in their shape;
    the API's answers (misses, whole objects) come from the whole objects."""
    if isinstance(store, WatchedClusterStore):
        store.direct = SnapshotStore(objects)
    for informer in store.informers:
        if keep_whole:
            informer.shape = whole
        for change in listed([o for o in objects if o["kind"] == informer.resource.kind]):
            informer.apply(change)
    return store


def both(new_store, ask, objects):
    """`ask(store)` of a new store keeping the objects whole, and of one keeping their kinds' shapes."""

    async def answers():
        return [await ask(fed(new_store(), objects, keep_whole)) for keep_whole in (True, False)]

    return asyncio.run(answers())


# --------------------------------------------------------------------------- pods, claims, volumes, share-managers, nodes


def names(pods):
    return [kinds.meta(p).get("name") for p in pods]


async def admission_answers(store, settings, pod, objects):
    """What admission makes of the VM's pod and of each volume's share-manager pod, what the node
    and scheduler checks say of every node, and what the keeper reads of each VM's pods."""
    answers = {"vm": await admit(parse_review(review(pod)), store, settings, Deadline.after(2, 0.5))}
    for volume in {kinds.meta(o)["name"] for o in objects if o["kind"] == "ShareManager"}:
        smp = share_manager_pod(volume)
        answers[volume] = await admit(parse_review(review(smp, LONGHORN_NS)), store, settings, Deadline.after(2, 0.5))
    view = await store.fit_view(NS)
    for name in NODE_NAMES:
        obj = view.node(name)
        answers[name] = obj is not None and (why_not_run(name, obj, pod, needs_kubevirt=True),
                                             why_not_fit(pod, NS, obj, view),
                                             why_not_fit(share_manager_pod("pvc-d1"), LONGHORN_NS, obj, view,
                                                         "the share-manager"))
    for the_vmi in (o for o in objects if o["kind"] == "VirtualMachineInstance"):
        pods = store.launcher_pods(NS, the_vmi["metadata"]["uid"])
        found = vm_pods(pods, settings)
        answers[the_vmi["metadata"]["name"]] = (names(found.running), [(kinds.meta(p)["name"], why) for p, why in found.skipped],
                                                [unschedulable_since(p) for p in pods])
    answers["stranded"] = [stranded(p, kinds.meta(p)["namespace"], settings, NOW) for p in store.pinned_waiting()]
    return answers


@PROPERTY
@given(objects=clusters(), pod=vm_pods_to_admit(), pin=st.sampled_from(["required", "preferred"]))
def test_admission_and_the_checks_answer_the_same_from_kept_pods_claims_volumes_share_managers_and_nodes(objects, pod, pin):
    settings = Settings(pin=pin)
    from_whole, from_kept = both(lambda: WatchedClusterStore(NO_API, settings),
                                 lambda store: admission_answers(store, settings, pod, objects), objects)
    assert from_kept == from_whole
    for key, answer in from_whole.items():  # what was covered (--hypothesis-show-statistics)
        if hasattr(answer, "rule"):
            event(f"{key}: {answer.decision.outcome if answer.decision else answer.skipped}")
        elif key in NODE_NAMES:
            event(f"node: {'absent' if answer is False else 'refused' if any(answer) else 'fits'}")


# --------------------------------------------------------------------------- the checks' memo


@pytest.fixture
def memo():
    """One memo for every example of a test: what the checks worked out from a kept object is
    reused for the next object of that name whose `reads` are the same (kept objects have no
    resourceVersion), so `reads` that miss a field the check reads give a stale answer."""
    return Memo()


@st.composite
def nodes_and_pods(draw):
    """Nodes and the pods bound to them, of few names: one name comes back with other contents."""
    objects = [draw(changed(node(name), [_meta, _small, _zone, _node_noise])) for name in NODE_NAMES]
    for i in draw(st.lists(st.sampled_from([0, 20, 40]), max_size=3, unique=True)):
        pod = workload_pod(i, draw(st.sampled_from(NODE_NAMES)))  # anti-affinity toward its own instance
        objects.append(draw(changed(pod, [_meta, _anti_affinity, _big_request, _host_port, _host_network, _sidecar,
                                          _overhead, _resized, _container_noise])))
    return objects


@settings(PROPERTY, max_examples=80,
          suppress_health_check=[*PROPERTY.suppress_health_check, HealthCheck.function_scoped_fixture])
@given(objects=nodes_and_pods(), pod=vm_pods_to_admit())
def test_the_checks_memo_answers_for_kept_objects_what_the_whole_objects_give(memo, objects, pod):
    shape = shapes(Settings())

    def view_of_kinds(shape_of, the_memo):
        return fit.StaticView(*[[shape_of(r.kind)(o) for o in objects if o["kind"] == r.kind]
                                for r in (NODE, POD, PVC, PV)], memo=the_memo)

    answers = []
    for view in (view_of_kinds(lambda kind: whole, Memo()), view_of_kinds(shape.get, memo)):
        demand = Demand.of(pod, NS, view.memo)
        answers.append([(why_not_fit(pod, NS, obj, view), least_allocated(demand, obj, view),
                         why_not_fit(share_manager_pod("pvc-d1"), LONGHORN_NS, obj, view, "the share-manager"))
                        for obj in view.nodes()])
    assert answers[1] == answers[0]


# --------------------------------------------------------------------------- VMIs and migrations


def _vmi_phase(obj, n):
    obj["status"]["phase"] = ["Scheduling", "Succeeded", "Failed", "Running"][n]


def _vmi_machine(obj, n):
    if n % 2:
        del obj["status"]["machine"]  # virt-controller then reads the spec's
    else:
        obj["spec"]["domain"]["machine"]["type"] = "pc-q35-rhel9.4.0"


def _vmi_migrating(obj, n):
    obj["status"]["migrationState"] = {
        "migrationUid": ["m-uid", "other", "m-uid", ""][n], "sourceNode": "node-a", "targetNode": "node-c",
        "targetPod": "virt-launcher-vm1-t4rg3", "startTimestamp": at(NOW - timedelta(minutes=2)),
        **({"endTimestamp": at(NOW - timedelta(minutes=1)), "completed": n == 2, "failed": n != 2} if n >= 2 else {}),
        "mode": "PreCopy", "migrationConfiguration": {"progressTimeout": 150}}


def _vmi_disks(obj, n):
    obj["spec"]["volumes"].append({"name": "dv", "dataVolume": {"name": CLAIMS[n % 2]}})
    obj["spec"]["volumes"].append({"name": "config", "configMap": {"name": "cfg"}})


def _vmi_placement(obj, n):
    obj["spec"]["domain"]["cpu"]["model"] = ["Skylake-Client-IBRS", "host-passthrough", "host-model", "Broadwell-IBRS"][n]
    obj["spec"]["nodeSelector"] = {"example.com/pool": f"pool-{n}"}


def _vmi_unplaced(obj, n):
    obj["status"].pop("nodeName", None)


def _vmi_annotations(obj, n):
    obj["metadata"]["annotations"].update({"kubevirt-scheduler/keep": ["false", "true", "no", ""][n],
                                           "example.com/colocate": "true", "kubevirt.io/eviction-source": "descheduler"})


def _vmi_noise(obj, n):
    status = obj["status"]
    status["activePods"] = {f"pod-{i}": "node-a" for i in range(n + 1)}
    status["guestOSInfo"]["kernelRelease"] = f"6.{n}"
    status["conditions"] = [{**c, "message": "x" * (n * 50)} for c in status["conditions"]]
    obj["spec"]["domain"]["devices"]["disks"].append({"name": "extra", "disk": {"bus": "scsi"}})
    obj["spec"]["domain"]["memory"] = {"guest": f"{n + 1}Gi"}


VMI_CHANGES = [*COMMON, _vmi_phase, _vmi_machine, _vmi_migrating, _vmi_disks, _vmi_placement, _vmi_unplaced,
               _vmi_annotations, _vmi_noise, _finished]


def _vmim_transitions(obj, n):
    phases = [("Pending", 10), ("Scheduling", 9), ("Running", 8), (obj["status"].get("phase") or "Failed", 7)][:n + 1]
    obj["status"]["phaseTransitionTimestamps"] = [{"phase": p, "phaseTransitionTimestamp": at(NOW - timedelta(minutes=m))}
                                                  for p, m in phases]


def _vmim_ended(obj, n):
    obj["status"]["migrationState"] = {"endTimestamp": at(NOW - timedelta(minutes=n)), "sourceNode": "node-a",
                                       "targetNode": "node-b", "targetPod": "p", "completed": n % 2 == 0}


def _vmim_ours(obj, n):
    obj["metadata"]["labels"] = {kinds.MANAGED_BY_LABEL: "kubevirt-colocate"}
    obj["metadata"]["annotations"] = {"kubevirt-scheduler/node": NODE_NAMES[n % 3],
                                      "kubevirt-scheduler/reason": "storage " * (n + 1)}
    obj["metadata"]["uid"] = ["m-uid", "other", "m-uid", ""][n]


def _vmim_evacuation(obj, n):
    obj["metadata"].setdefault("annotations", {})[kinds.EVACUATION_ANNOTATION] = NODE_NAMES[n % 3]
    obj["spec"]["priority"] = ["system-maintenance", "system-critical", "", "system-maintenance"][n]


def _vmim_odd(obj, n):
    if n == 0:
        del obj["metadata"]["creationTimestamp"]
    elif n == 1:
        obj["spec"]["vmiName"] = "Not A Name"
    else:
        obj["status"]["phaseTransitionTimestamps"] = [{"phase": "Failed", "phaseTransitionTimestamp": "yesterday"}]


def _vmim_noise(obj, n):
    obj["spec"]["addedNodeSelector"] = {"kubernetes.io/hostname": NODE_NAMES[n % 3]}
    obj["status"].setdefault("migrationState", {}).update(mode="PreCopy", sourcePod="virt-launcher-x", targetPod="y")
    obj["status"]["conditions"] = [{"type": "Ready", "status": "False", "message": "x" * 300}]


VMIM_CHANGES = [*COMMON, _vmim_transitions, _vmim_ended, _vmim_ours, _vmim_evacuation, _vmim_odd, _vmim_noise]


@st.composite
def kubevirt_objects(draw):
    """VMIs of VMs using the disks, and migrations of them: ours, KubeVirt's evacuations, users'."""
    objects = []
    for name in VMS[:draw(st.integers(1, 2))]:
        claims = draw(st.lists(st.sampled_from(CLAIMS), max_size=2, unique=True))
        the_vmi = vmi(name, draw(st.sampled_from(NODE_NAMES)), *claims, opted_in=draw(st.booleans()),
                      migratable=draw(st.booleans()), migrated_from=draw(st.sampled_from([None, "node-b"])))
        objects.append(draw(changed(the_vmi, VMI_CHANGES)))
        for i in range(draw(st.integers(0, 2))):
            made = migration(f"{name}-migration-{i}", name, phase=draw(st.sampled_from(["Running", "Succeeded", "Failed", ""])),
                             created=at(NOW - timedelta(minutes=draw(st.sampled_from([1, 30, 90, 3000])))))
            objects.append(draw(changed(made, VMIM_CHANGES)))
    return objects


DISKS = rwx_disk("d1", "node-a") + rwx_disk("d2", "node-b") + nodes(*NODE_NAMES)


async def keeper_answers(watch, settings):
    """What the keeper reads of each VMI and migration, and what it makes of them: where each VM
    runs against its disks (apart or not), whether it is migrating, its attempts and backoff."""
    vmis = [read_vmi(watch.vmis.table.get(key), settings) for key in watch.vmis.table.objects]
    found = [read_migration(watch.migrations.table.get(key)) for key in watch.migrations.table.objects]
    history = [m for m in found if not isinstance(m, Malformed)]
    views = [v for v in vmis if not isinstance(v, Malformed)]
    answers = {"vmis": vmis, "migrations": found, "in flight": moves.flying(history, views, NOW)}
    for view in views:
        tries = moves.attempts(view, history)
        answers[view.name] = (await where_it_runs(SnapshotStore(DISKS), settings, view, 1.0),
                              moves.migrating(view, history, NOW), moves.unseen_success(view, history, NOW),
                              moves.last_migration_end(view, history), moves.last_move(view, history),
                              tries, moves.backoff(tries))
    return answers


@PROPERTY
@given(objects=kubevirt_objects(), opt_in=st.sampled_from([kinds.DEFAULT_OPT_IN, "example.com/colocate"]))
def test_the_keeper_reads_the_same_from_kept_vmis_and_migrations(objects, opt_in):
    settings = Settings(opt_in_annotation=opt_in)
    from_whole, from_kept = both(lambda: KubeVirtWatch(NO_API, settings), lambda watch: keeper_answers(watch, settings),
                                 objects)
    assert from_kept == from_whole
    for view in from_whole["vmis"]:
        event(f"vmi: {'skipped' if isinstance(view, Malformed) else from_whole[view.name][0][0].state}")
    for found in from_whole["migrations"]:
        event(f"migration: {'skipped' if isinstance(found, Malformed) else found.phase or 'no phase'}")


# --------------------------------------------------------------------------- what the readers touch


class Traced(dict):
    """An object that notes every key read of it (and of what it holds) into `reads`, with what
    was found: whatever a reader reads, by any route, is noted, declared or not."""

    def __init__(self, value, path, reads):
        super().__init__(value)
        self.path, self.reads = path, reads

    def _found(self, key, value):
        return _traced(value, (*self.path, key), self.reads)

    def get(self, key, default=None):
        return self._found(key, super().get(key, default))

    def __getitem__(self, key):
        return self._found(key, super().__getitem__(key))

    def __contains__(self, key):
        self._found(key, super().get(key))
        return super().__contains__(key)

    def __iter__(self):
        self.reads[(*self.path, "*")] = None  # every key: the whole object
        return super().__iter__()

    def items(self):
        return [(key, self._found(key, value)) for key, value in list(self.__iter__() and super().items())]


class TracedList(list):
    def __init__(self, value, path, reads):
        super().__init__(value)
        self.path, self.reads = path, reads

    def __iter__(self):
        return (_traced(item, (*self.path, "[]"), self.reads) for item in super().__iter__())

    def __getitem__(self, index):
        return _traced(super().__getitem__(index), (*self.path, "[]"), self.reads)


def _traced(value, path, reads):
    reads.setdefault(path, value)
    if isinstance(value, dict):
        return Traced(value, path, reads)
    return TracedList(value, path, reads) if isinstance(value, list) else value


def dropped(reads, keep):
    """The paths read that `keep` drops: a key it does not keep, or an object or a list read whole
    (nothing beneath it read) that it keeps only in part."""
    found = []
    for path, value in reads.items():
        whole = path[-1] == "*" or (isinstance(value, dict | list) and value
                                    and not any(p[:len(path)] == path and len(p) > len(path) for p in reads))
        spec = keep
        for part in path:
            if spec is True or part == "*":
                break
            if part == "[]":
                spec = spec[0] if isinstance(spec, list) else spec
            elif isinstance(spec, dict):
                spec = spec.get(part, False)
            elif callable(spec):
                spec = True if spec(part) else False
            if spec is False:
                break
        if spec is False or (whole and spec is not True):
            found.append(".".join(path))
    return found


@PROPERTY
@given(objects=kubevirt_objects(), opt_in=st.sampled_from([kinds.DEFAULT_OPT_IN, "example.com/colocate"]))
def test_the_keepers_readers_read_nothing_its_caches_drop(objects, opt_in):
    """Whatever `read_vmi` and `read_migration` (and the keeper on a VMI it skips) read of an
    object, by whatever route, its kind's shape keeps: a rule reading a field it did not declare
    (`rules.shared.declared`) fails here, whatever the generated objects hold."""
    settings = Settings(opt_in_annotation=opt_in)
    shape_keep = {"VirtualMachineInstance": declared.VMI.keep(settings),
                  "VirtualMachineInstanceMigration": declared.VMIM.keep(settings)}
    for obj in objects:
        reads = {}
        traced = Traced(obj, (), reads)
        if obj["kind"] == "VirtualMachineInstance":
            read_vmi(traced, settings)
            kinds.annotations(traced).get(opt_in)  # the keeper's note on a VMI it skips
        else:
            read_migration(traced)
        assert dropped(reads, shape_keep[obj["kind"]]) == []


def test_the_tracing_sees_a_read_the_declaration_does_not_keep():
    reads = {}
    traced = Traced(vmi("vm1", "node-a", "d1"), (), reads)
    kinds.annotations(traced).get("example.com/frozen")
    traced["status"]["guestOSInfo"]
    assert sorted(dropped(reads, declared.VMI.keep(Settings()))) == [
        "metadata.annotations.example.com/frozen", "status.guestOSInfo"]


# --------------------------------------------------------------------------- the keeper's pods to place


@pytest.mark.parametrize("pod, node_name, objects, nodes, check, fragment", CASES)
def test_a_pod_to_place_gets_the_same_answer(pod, node_name, objects, nodes, check, fragment):
    view = view_of(*objects, nodes=nodes)
    node = on(view, node_name)
    assert why_not_fit(pod_to_place(pod), NS, node, view) == why_not_fit(pod, NS, node, view)


def test_a_pod_to_place_drops_what_no_check_reads():
    pod = {"metadata": {"name": "p", "namespace": NS, "labels": {"a": "b"}, "annotations": {"big": "x" * 1000}},
           "spec": {"nodeSelector": {"n": "1"}, "containers": [{"name": "c", "env": [{"name": "E", "value": "v"}],
                                                               "resources": {"requests": {"cpu": "1"}}}],
                    "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}, "other": 1}]}}
    assert pod_to_place(pod) == {
        "metadata": {"name": "p", "namespace": NS, "labels": {"a": "b"}},
        "spec": {"nodeSelector": {"n": "1"}, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}}


def test_the_keepers_vmi_cache_keeps_the_hotplugged_disks_it_judges_the_vm_by():
    """The keeper (and `status`) decide a VM apart by its VMI's disks: a hotplugged one, which no
    launcher pod mounts, is among them as the cache keeps the VMI."""
    from tests.support.kube import load

    from webhook.stores.shapes import shapes
    from webhook.config import Settings
    from webhook.rules.keeping.running import read_vmi

    kept = shapes(Settings())["VirtualMachineInstance"](load("kubevirt-1.8/vmi-hotplugged.yaml"))
    assert read_vmi(kept, Settings()).claims == ("disk-b", "disk-hp")


def test_the_vmi_every_replica_keeps_renders_the_same_migration_target_as_the_whole_vmi():
    """A drain's share-manager rule renders the VM's migration target pod from the cached VMI:
    from the replica's trimmed copy it is the pod the whole VMI gives."""
    import copy

    from tests.support.kube import launcher_pod_of, load, node, vmi

    from webhook.stores.shapes import shapes
    from webhook.config import Settings
    from webhook.rules.keeping.running import read_vmi
    from webhook.rules.kubevirt.target import target_pod

    for whole in (load("kubevirt-1.8/vmi-hotplugged.yaml"), vmi("vm1", "node-a", "d1")):
        source = node(whole["status"]["nodeName"])
        launcher = launcher_pod_of(copy.deepcopy(whole))
        trimmed = shapes(Settings())["VirtualMachineInstance"](copy.deepcopy(whole))
        full, kept = read_vmi(whole, Settings()), read_vmi(trimmed, Settings())
        assert kept.claims == full.claims
        assert target_pod(launcher, kept, source, {}) == target_pod(launcher, full, source, {})
