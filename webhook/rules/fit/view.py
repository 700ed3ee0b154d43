"""What the checks read from the cluster (a View), and a View over plain lists of objects."""
from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping
from typing import Any, Protocol

from ... import kinds
from .memo import Memo
from .fields import name_of
from .terms import anti_affinity_keys, keys_toward
from .usage import PodUsage, Usage


# The labels a View indexes its pods by: KubeVirt's own, which the required anti-affinity of every
# migration target pod selects (one per VMI): the share-manager rule of a drain judges such a pod on
# every node, and walking every node's pods for it grew with the VMs of the cluster.
INDEXED_LABELS = frozenset({kinds.CREATED_BY_LABEL})


class View(Protocol):
    """What the checks read from the cluster: nodes, the pods bound to them (not finished), claims
    and volumes, and the memo of the store they come from. The admission cache and a snapshot give it."""

    memo: Memo

    def node(self, name: str) -> Mapping[str, Any] | None: ...
    def nodes(self) -> Iterable[Mapping[str, Any]]: ...
    def usage(self, node_name: str) -> Usage: ...
    def nodes_changed(self, since: int | None) -> tuple[int | None, Collection[str] | None]:
        """The position now in the view's record of changes, and the nodes whose object or `usage`
        changed since `since` (a position it gave before): None for the nodes where it cannot tell
        (since None, a record too short); (None, None) where it keeps no record."""
    def changes_among(self, names: Iterable[str], since: int | None) -> tuple[Collection[str], Collection[str]] | None:
        """Of `names`, those in `nodes_changed(since)`, and of those the ones changed by more than
        pods that take only room there (`takes_room_only`); None where it cannot tell."""
    def pods_on(self, node_name: str) -> Iterable[Mapping[str, Any]]: ...
    def pods_with_anti_affinity_toward(self, labels: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
        """Bound pods with a required anti-affinity term that may select a pod with `labels`:
        every one whose terms do (found by `terms.anti_affinity_keys`), perhaps others."""
    def pods_labelled(self, key: str, value: str) -> Iterable[Mapping[str, Any]] | None:
        """Bound pods whose label `key` is `value`, where the view indexes that key (INDEXED_LABELS);
        None where it does not (the check then walks the nodes' pods)."""
    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...
    def pv(self, name: str) -> Mapping[str, Any] | None: ...


def bound_node(pod: Any) -> str | None:
    """The node a pod counts on in a View: its `spec.nodeName`, until the pod finishes."""
    node = kinds.spec(pod).get("nodeName")
    return node if isinstance(node, str) and node and not kinds.finished(pod) else None


def has_required_anti_affinity(pod: Any) -> bool:
    """Whether a bound pod may belong in `View.pods_with_anti_affinity_toward`."""
    affinity = kinds.spec(pod).get("affinity")
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, dict) else None
    return isinstance(anti, dict) and bool(anti.get("requiredDuringSchedulingIgnoredDuringExecution"))


def takes_room_only(pod: Any, share: PodUsage) -> bool:
    """Whether the filters judging another pod read of a bound pod (`share`: what it takes) only the room it takes
    there, its requests and a pod slot: no host ports, no required pod anti-affinity, no label a View indexes
    (KubeVirt's, which a migration target's anti-affinity selects)."""
    if share.host_ports or not share.readable:
        return False
    labels = kinds.labels(pod)
    return not has_required_anti_affinity(pod) and not any(key in labels for key in INDEXED_LABELS)


def text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class StaticView:
    """A View over plain lists of objects (a snapshot, a test): pods count on their `spec.nodeName`
    until they finish, as in the cache."""

    def __init__(self, nodes: Iterable[Any] = (), pods: Iterable[Any] = (), claims: Iterable[Any] = (),
                 volumes: Iterable[Any] = (), memo: Memo | None = None) -> None:
        self.memo = Memo() if memo is None else memo
        self._nodes = {name_of(n): n for n in nodes}
        self._pods: dict[str, list[Any]] = {}
        self._usage: dict[str, Usage] = {}
        self._anti: dict[Hashable, list[Any]] = {}
        self._labelled: dict[tuple[str, str], list[Any]] = {}
        for pod in pods:
            node_name = bound_node(pod)
            if node_name is None:
                continue
            self._pods.setdefault(node_name, []).append(pod)
            self._usage.setdefault(node_name, Usage()).add(PodUsage.of(pod))
            for key in anti_affinity_keys(pod) if has_required_anti_affinity(pod) else ():
                self._anti.setdefault(key, []).append(pod)
            for key, value in kinds.labels(pod).items():
                if key in INDEXED_LABELS and isinstance(value, str):
                    self._labelled.setdefault((key, value), []).append(pod)
        self._claims = {(text_or_none(kinds.meta(c).get("namespace")), text_or_none(kinds.meta(c).get("name"))): c
                        for c in claims}
        self._volumes = {text_or_none(kinds.meta(v).get("name")): v for v in volumes}

    def node(self, name: str) -> Mapping[str, Any] | None:
        return self._nodes.get(name)

    def nodes(self) -> Iterable[Mapping[str, Any]]:
        return self._nodes.values()

    def usage(self, node_name: str) -> Usage:
        return self._usage.get(node_name) or Usage()

    def nodes_changed(self, since: int | None) -> tuple[int | None, Collection[str] | None]:
        return None, None  # views over lists may share a memo: no position stands for another's objects

    def changes_among(self, names: Iterable[str], since: int | None) -> tuple[Collection[str], Collection[str]] | None:
        return None

    def pods_on(self, node_name: str) -> Iterable[Mapping[str, Any]]:
        return self._pods.get(node_name, ())

    def pods_with_anti_affinity_toward(self, labels: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
        found = {id(pod): pod for key in keys_toward(labels) for pod in self._anti.get(key, ())}
        return found.values()

    def pods_labelled(self, key: str, value: str) -> Iterable[Mapping[str, Any]] | None:
        return self._labelled.get((key, value), ()) if key in INDEXED_LABELS else None

    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._claims.get((namespace, name))

    def pv(self, name: str) -> Mapping[str, Any] | None:
        return self._volumes.get(name)
