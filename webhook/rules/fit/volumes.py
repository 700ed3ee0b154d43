"""VolumeBinding for bound claims (kubernetes `volumebinding/binder.go`) with VolumeZone
(`volumezone/volume_zone.go`): can the node mount the pod's volumes?"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import kinds
from .demand import Demand
from .fields import CannotTell, Unreadable, as_list, as_mapping, name_of, pod_spec
from .nodeaffinity import term_matches
from .view import View

# volumezone/volume_zone.go: zone and region labels on a PV, beta keys matched against the GA
# ones on the node; a PV label may list several zones joined by "__".
_VOLUME_ZONE_KEYS = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region": "topology.kubernetes.io/region",
}


ZoneLabel = tuple[str, str, str, frozenset[str]]  # (PV label, the node's GA key, its value, its zones)


def _volume_placement(pv: Any) -> tuple[list[Any] | None, tuple[ZoneLabel, ...]]:
    """Where a PV can be mounted: its `spec.nodeAffinity.required` terms (None without) and the zone
    labels VolumeZone compares (one it cannot parse left out, as it ignores it); Unreadable when not read."""
    required = as_mapping(kinds.spec(pv).get("nodeAffinity"), "PV nodeAffinity").get("required")
    terms = None if required is None else as_list(
        as_mapping(required, "PV nodeAffinity.required").get("nodeSelectorTerms"), "nodeSelectorTerms")
    zones = []
    pv_labels = kinds.labels(pv)
    for key, ga_key in (_VOLUME_ZONE_KEYS.items() if pv_labels else ()):
        value = pv_labels.get(key)
        if not isinstance(value, str):
            continue
        listed = frozenset(zone.strip() for zone in value.split("__"))
        if "" not in listed:
            zones.append((key, ga_key, value, listed))
    return terms, tuple(zones)


def _outside_volume_zone(zones: tuple[ZoneLabel, ...], node_labels: Mapping[str, Any]) -> str | None:
    """The PV's zone/region label the node does not match (VolumeZone); a node with none passes (one-zone clusters)."""
    if not zones or not any(key in node_labels for key in _VOLUME_ZONE_KEYS):
        return None
    for key, ga_key, value, listed in zones:
        have = node_labels[key] if key in node_labels else node_labels.get(ga_key)
        if have not in listed:
            return f"{key}={value}"
    return None


def said_of_nodes(demand: Demand, view: View) -> bool:
    """Whether the filter can turn the pod away from any node: a claim's volume selects nodes or
    zones, or the claims decide alone (read once, kept in the demand)."""
    mounts, ending = _mounted(demand, view)
    return ending is not None or any(terms is not None or zones for _, _, terms, zones in mounts)


def _mounted(demand: Demand, view: View) -> tuple[list[Mount], Ending]:
    """`_mounts`, read on the first node judged and kept in the demand for the others."""
    if demand.mounts is None:
        demand.mounts = _mounts(demand, view)
    return demand.mounts  # type: ignore[no-any-return]


def volumes(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """Each bound claim's PV must select the node (volumebinding/binder.go `checkBoundClaims`) and match its zone
    labels; a claim with `spec.volumeName` counts as bound. Unbound claims and ephemeral volumes: cannot tell."""
    mounts, ending = _mounted(demand, view)
    labels = kinds.labels(node)
    for claim_name, pv_name, terms, zones in mounts:
        if terms is not None:
            # component-helpers/storage/volume `CheckNodeAffinity` matches a node built from the
            # labels alone, so a matchFields term on metadata.name never matches there.
            if not any(term_matches(term, labels, None) for term in terms):
                return f"node {name_of(node)} is outside the node affinity of volume {pv_name} (claim {claim_name})"
        zone = _outside_volume_zone(zones, labels) if zones else None
        if zone:
            return f"node {name_of(node)} is outside the zone of volume {pv_name} (claim {claim_name}): {zone}"
    if isinstance(ending, Exception):
        raise ending.with_traceback(None)  # raised again for each node: its traceback starts anew
    return ending


Mount = tuple[str, str, list[Any] | None, tuple[ZoneLabel, ...]]  # (claim, its PV, the PV's terms, its zones)
# What decides after the mounts whatever the node: a reason, an error to raise (cannot tell,
# unreadable), or None (every claim mounted).
Ending = str | CannotTell | Unreadable | None


def _mounts(demand: Demand, view: View) -> tuple[list[Mount], Ending]:
    """The pod's claims read once (as volumebinding's PreFilter does), with their PVs: a mount per
    bound claim, up to the first that decides alone (deleted, lost, unbound, unknown, unreadable)."""
    found: list[Mount] = []
    try:
        for volume in as_list(pod_spec(demand.pod).get("volumes"), "volumes"):
            if type(volume) is not dict:
                volume = as_mapping(volume, "volume")
            source = volume.get("persistentVolumeClaim")
            if source is None:
                if volume.get("ephemeral") is not None:
                    raise CannotTell(f"ephemeral volume {volume.get('name')} gets its claim only after the pod exists")
                continue
            claim_name = (source if type(source) is dict else as_mapping(source, "persistentVolumeClaim")).get("claimName")
            claim = view.pvc(demand.namespace, claim_name)
            if claim is None:
                raise CannotTell(f"claim {claim_name} is not known")
            if kinds.terminating(claim):
                return found, f"claim {claim_name} is being deleted"
            if kinds.status(claim).get("phase") == "Lost":
                return found, f"claim {claim_name} has lost its volume"
            pv_name = kinds.spec(claim).get("volumeName")
            if not pv_name:
                raise CannotTell(f"claim {claim_name} is not bound yet")
            pv = view.pv(pv_name)
            if pv is None:
                raise CannotTell(f"volume {pv_name} of claim {claim_name} is not known")
            found.append((claim_name, pv_name, *_volume_placement(pv)))
    except (CannotTell, Unreadable) as error:
        return found, error
    return found, None
