"""Watch-backed caches of the cluster objects the rules read: admissions answered from memory."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from typing import Any

from .. import kinds
from ..config import Settings
from ..kinds import NODE, POD, PV, PVC, SHARE_MANAGER, VMI, VMIM, Resource
from ..cluster.informer import Informer, Informers
from ..cluster.reflector import Timing
from ..cluster.table import object_key
from ..rules import fit
from ..rules.fit.memo import SIZE, Memo
from ..rules.shared.facts import claims_of
from .direct import ClusterStore
from .shapes import pod_read, shapes, share_manager_leaving
from .store import Stats, StoreError, volume_handle

# Kinds whose miss may be watch lag worth a GET: a PVC (and its PV) created a moment before the VM
# that mounts it, a node that just joined. A share-manager or its pod not cached yet has no node yet;
# virt-controller creates a launcher pod once its own watch has the VMI: their miss is the answer.
MISS_FALLBACK = frozenset({PVC.kind, PV.kind, NODE.kind})
# Kinds admission reads from its caches only, never waiting for them: a replica is ready and answers while
# the KubeVirt API is slow or down (hotplugged disks are then unknown: each such admission warns). The
# migrations (`--aim-evacuations on`) are read from the API until their cache has synced.
CACHED_ONLY = frozenset({VMI.kind, VMIM.kind})

# The scheduler's own pod informer leaves finished pods out (pkg/scheduler/scheduler.go); they take
# nothing from a node, and the rules do not trust them either.
NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"


NO_PODS = fit.Usage()  # what a node without pods takes: nothing (never changed)


def _taken(pod: dict[str, Any] | None) -> tuple[str, fit.PodUsage] | None:
    """The node a pod counts on and what it takes there; None when it counts on none."""
    node = fit.bound_node(pod) if pod is not None else None
    return None if node is None else (node, fit.PodUsage.of(pod))


MEMO_PER_NODE = 8  # the checks' answers held per node of the cluster, at least memo.SIZE in all

class ChangedNodes:
    """The nodes whose room may have changed, in order: a reader keeps its position and reads only
    what changed since, so what is worked out from every node is kept up to date node by node."""

    LIMIT = 65_536  # names kept at most; a reader further behind reads every node again

    def __init__(self) -> None:
        self.start = 0  # the position of names[0]
        self.names: list[str] = []
        # By node, the position of its last change, and of its last but by a pod that takes only room.
        self.last: dict[str, int] = {}
        self.last_beyond_room: dict[str, int] = {}

    def note(self, name: str, room_only: bool = False) -> None:
        position = self.start + len(self.names)
        self.last[name] = position
        if not room_only:
            self.last_beyond_room[name] = position
        self.names.append(name)
        if len(self.names) > self.LIMIT:
            half = len(self.names) // 2
            del self.names[:half]
            self.start += half
            # A change before the record's start is never asked about: a node long gone is not kept.
            self.last = {node: at for node, at in self.last.items() if at >= self.start}
            self.last_beyond_room = {node: at for node, at in self.last_beyond_room.items() if at >= self.start}

    def since(self, position: int | None) -> tuple[int, frozenset[str] | None]:
        """The position now, and the nodes noted since `position` (None: since when is not known)."""
        now = self.start + len(self.names)
        if position is None or position < self.start or position > now:
            return now, None
        return now, frozenset(self.names[position - self.start:])

    def among(self, names: Iterable[str], position: int | None) -> tuple[frozenset[str], frozenset[str]] | None:
        """`View.changes_among` from this record."""
        if position is None or position < self.start or position > self.start + len(self.names):
            return None
        changed = frozenset(name for name in names if self.last.get(name, -1) >= position)
        return changed, frozenset(name for name in changed if self.last_beyond_room.get(name, -1) >= position)


class NodeUsage:
    """What the pods bound to each node take (requests, slots, host ports), kept as pods come and go:
    a pod's share is worked out again from the object it was added as, so exactly that is taken away."""

    def __init__(self, changed_nodes: ChangedNodes | None = None) -> None:
        self.by_node: defaultdict[str, fit.Usage] = defaultdict(fit.Usage)
        self.changed_nodes = changed_nodes or ChangedNodes()

    def __call__(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        before, after = _taken(old), _taken(new)
        if before == after:
            return  # the same node, the same share: a status update, or a pod bound to none
        if before is not None:
            node, share = before
            self.changed_nodes.note(node, fit.takes_room_only(old, share))
            usage = self.by_node[node]
            usage.remove(share)
            if usage.pods <= 0:
                del self.by_node[node]
        if after is not None:
            node, share = after
            self.changed_nodes.note(node, fit.takes_room_only(new, share))
            self.by_node[node].add(share)

    def of(self, node: str) -> fit.Usage:
        """Read-only: the checks only read it (a node without pods gets the one empty Usage)."""
        return self.by_node.get(node) or NO_PODS


class WatchedClusterStore(Informers):
    """The Store protocol answered from watch caches, with direct GETs where the cache cannot tell: what the keeper
    and the stranded-pod report read from memory."""

    task_prefix = "cache"

    def __init__(self, api_client: Any, settings: Settings = Settings(), timing: Timing = Timing(), *,
                 vmis: bool = True):
        self.direct = ClusterStore(api_client)  # reads from the API itself: full objects, no watch lag
        shape = shapes(settings)

        def informer(resource: Resource, **kwargs: Any) -> Informer:
            return Informer(resource, shape[resource.kind], **kwargs)

        self.pvcs = informer(PVC)
        self.pvs = informer(PV, indexers={"volumeHandle": lambda pv: filter(None, [volume_handle(pv)])})
        self.share_managers = informer(SHARE_MANAGER, namespace=settings.longhorn_namespace)
        # Every pod that has not finished: share-manager pods by name, launcher pods by claim, and
        # what each node's pods take, for the scheduler's checks. A miss by name is an answer.
        self.changed_nodes = ChangedNodes()
        self.usage = NodeUsage(self.changed_nodes)
        self.pods = informer(POD, fields=NOT_FINISHED, wanted=lambda pod: not kinds.finished(pod),
                             indexers={"claim": lambda pod: _vmi_claims(pod) if kinds.is_launcher(pod) else [],
                                       "vmi": _created_by, "node": lambda pod: filter(None, [fit.bound_node(pod)]),
                                       "waiting": lambda pod: [True] if _pinned_and_waiting(pod, settings) else [],
                                       "leaving": lambda pod: [True] if share_manager_leaving(pod, settings) else [],
                                       "anti": lambda pod: fit.anti_affinity_keys(pod) if fit.bound_node(pod)
                                       and fit.has_required_anti_affinity(pod) else [],
                                       "labelled": _indexed_labels}, watchers=[self.usage])
        self.pods.table.reader = pod_read(settings)  # a rule reading an undeclared annotation fails at once
        self.nodes = informer(NODE, watchers=[lambda old, new: self.changed_nodes.note(kinds.meta(new or old)["name"])])
        # Every VMI, by the claims of its volumes: the disks hotplugged into a running VM are its VMI's
        # (KubeVirt mounts them in an attachment pod). `keep` watches VMIs itself: `vmis=False`.
        self.vmis = informer(VMI, indexers={"claim": _vmi_claims})
        # Every migration, only where evacuations are aimed (`--aim-evacuations on`): the aimed ones are the
        # record the share-manager rule follows, and what is aimed at a node and not landed takes room there.
        self.migrations_seen = informer(VMIM) if getattr(settings, "aim_evacuations", False) else None
        # Listed in this order, one at a time: what the scheduler checks need first.
        super().__init__(api_client, timing, (self.nodes, self.pods, self.pvcs, self.pvs, self.share_managers)
                         + ((self.vmis,) if vmis else ())
                         + ((self.migrations_seen,) if self.migrations_seen is not None else ()))
        self._view = CachedView(self)
        self._by_kind = {i.resource.kind: i for i in self.informers}  # one informer per kind
        assert len(self._by_kind) == len(self.informers)

    def stats(self) -> Stats:
        return {i.name: (len(i.table.objects), i.last_sync) for i in self.informers}

    async def close(self) -> None:
        await super().close()
        await self.direct.close()

    def synced(self) -> bool:
        return all(i.synced for i in self.informers if i.resource.kind not in CACHED_ONLY)

    def peek(self, resource: Resource, namespace: str | None, name: str, *,
             copy: bool = False) -> tuple[bool, dict[str, Any] | None]:
        """From memory: (True, object or None) when the caches can tell, (False, None) otherwise. The
        object is shared with every other reader, never to be changed; with `copy`, the caller's own."""
        informer = self._by_kind.get(resource.kind)  # written out: every look-up comes here
        if informer is None or (informer.resource is not resource and informer.resource != resource) \
                or not informer.synced or (informer.namespace is not None and namespace != informer.namespace):
            return False, None  # outside what the informer holds, or not synced yet
        key = f"{namespace}/{name}" if namespace and resource.namespaced else name
        table = informer.table
        obj = table.get(key) if copy else (table.shared.get(key) or table.read(key))  # read()'s own first step, inline
        if obj is not None:
            return True, obj
        return resource.kind not in MISS_FALLBACK, None

    async def get(self, resource, namespace, name, *, timeout=None):
        """A copy of the caller's own, from the caches when they can tell, else from the API (but
        a kind the caches hold `CACHED_ONLY`: StoreError until its cache has synced)."""
        known, obj = self.peek(resource, namespace, name, copy=True)
        if known:
            return obj
        informer = self._by_kind.get(resource.kind)
        if informer is not None and resource.kind in CACHED_ONLY:
            raise StoreError(f"the {informer.name} cache has not synced ({informer.error or 'listing'})")
        return await self.direct.get(resource, namespace, name, timeout=timeout)

    async def pvs_by_volume_handle(self, handle, *, timeout=None):
        if not self.pvs.synced:
            return await self.direct.pvs_by_volume_handle(handle, timeout=timeout)
        return self.pvs.table.lookup("volumeHandle", handle)

    async def pods_by_claim(self, namespace, claim, *, timeout=None):
        if not self.pods.synced:
            return await self.direct.pods_by_claim(namespace, claim, timeout=timeout)
        key, pods = object_key(namespace, claim), self.pods.table
        found = [pods.read(k) for k in pods.keys_of("claim", key)]
        # A hotplugged disk: the pods of the VMIs that list it (an attachment pod mounts it).
        for vmi in self.vmis.table.lookup("claim", key) if self.vmis.synced else ():
            uid = kinds.meta(vmi).get("uid")
            if isinstance(uid, str) and uid:
                found += [pods.read(k) for k in pods.keys_of("vmi", object_key(namespace, uid))]
        return [pod for pod in found if pod is not None]

    async def migrations(self, *, timeout=None):
        seen = self.migrations_seen
        if seen is None or not seen.synced:
            return await self.direct.migrations(timeout=timeout)
        table = seen.table
        return [obj for obj in (table.read(key) for key in list(table.objects)) if obj is not None]

    def pinned_waiting(self) -> list[dict[str, Any]]:
        """Pods we pinned that no node has taken yet (what the safety net looks at)."""
        return self.pods.table.lookup("waiting", True) if self.pods.synced else []

    def share_managers_leaving(self) -> list[dict[str, Any]]:
        """Share-manager pods on their way out, as the caches hold them (`shapes.share_manager_leaving`)."""
        return self.pods.table.lookup("leaving", True) if self.pods.synced else []

    async def fit_view(self, namespace, *, timeout=None):
        # Before the caches have synced, what a node's pods take is unknown: no pin on a guess.
        if not (self.pods.synced and self.nodes.synced and self.pvcs.synced and self.pvs.synced):
            return None
        # A few answers per node (its allocatable, which pods may run there) beside a drain's order of the nodes by
        # room: held fewer, that order is dropped for them and each share-manager scores every node again.
        self._view.memo.size = max(SIZE, MEMO_PER_NODE * len(self.nodes.table.objects))
        return self._view

    def launcher_pods(self, namespace: str, vmi_uid: str) -> list[dict[str, Any]] | None:
        """The virt-launcher pods of one VMI (label kubevirt.io/created-by), trimmed; None until synced."""
        return self.pods.table.lookup("vmi", object_key(namespace, vmi_uid)) if self.pods.synced else None


def _created_by(pod: dict[str, Any]) -> list[str]:
    if not kinds.is_launcher(pod):
        return []
    uid = kinds.labels(pod).get(kinds.CREATED_BY_LABEL)
    return [object_key(kinds.meta(pod).get("namespace") or "", uid)] if isinstance(uid, str) and uid else []


def _vmi_claims(obj: dict[str, Any]) -> list[str]:
    """The claims of a VMI's volumes (hotplugged ones included), or of a launcher pod's."""
    namespace = kinds.meta(obj).get("namespace") or ""
    return [object_key(namespace, claim) for claim in claims_of(obj)]


def _pinned_and_waiting(pod: dict[str, Any], settings: Settings) -> bool:
    pinned = kinds.annotations(pod).get(settings.decision_annotation) in kinds.REQUIRING_DECISIONS
    return pinned and not kinds.spec(pod).get("nodeName")


def _indexed_labels(pod: dict[str, Any]) -> list[Hashable]:
    """The (key, value) of each label the checks look bound pods up by (`fit.INDEXED_LABELS`)."""
    if not fit.bound_node(pod):
        return []
    return [(key, value) for key, value in kinds.labels(pod).items() if key in fit.INDEXED_LABELS and isinstance(value, str)]


class CachedView:
    """The scheduler checks' view of the cluster (rules/fit/view.py `View`) over the caches' shared objects."""

    def __init__(self, store: WatchedClusterStore):
        self._store = store
        self.memo = Memo()  # what the checks worked out from this store's objects
        self.node, self.usage = store.nodes.table.read, store.usage.of
        self.nodes_changed, self.changes_among = store.changed_nodes.since, store.changed_nodes.among

    def nodes(self):
        # Read one at a time: decoded, 5,000 nodes of 170 labels at once were 50 MiB more of the process.
        table = self._store.nodes.table
        return (node for node in map(table.read, list(table.objects)) if node is not None)

    def pods_on(self, node_name):
        table = self._store.pods.table
        return [table.read(key) for key in table.keys_of("node", node_name)]

    def pods_with_anti_affinity_toward(self, labels):
        table = self._store.pods.table
        index = table.indexes["anti"]
        if not index:
            return ()  # no pod placed with one (no VM has migrated yet): every pin asks
        found: dict[str, None] = {}
        for value in fit.keys_toward(labels):
            if value in index:
                found.update(dict.fromkeys(table.keys_of("anti", value)))
        return [table.read(key) for key in found]

    def pods_labelled(self, key, value):
        if key not in fit.INDEXED_LABELS:
            return None
        table = self._store.pods.table
        return [table.read(k) for k in table.keys_of("labelled", (key, value))]

    def pvc(self, namespace, name):
        table = self._store.pvcs.table
        key = f"{namespace}/{name}" if namespace else name
        return table.shared.get(key) or table.read(key)  # Table.read's first step, inline: every pin asks

    def pv(self, name):
        table = self._store.pvs.table
        return table.shared.get(name) or table.read(name)

