"""Whether a running VM is apart from its storage, and since when."""

import pytest
from keeping import SETTINGS, at, fact, in_flight_state, vmi_obj

from webhook.rules.apart import (
    APART,
    CO_LOCATED,
    SPLIT,
    UNRESOLVED,
    apart_since,
    locality,
)
from webhook.rules.running import read_vmi

# --------------------------------------------------------------------------- apart from storage


@pytest.mark.parametrize("vm_node, facts, state, storage, why", [
    ("node-a", [fact("a", "node-a")], CO_LOCATED, ("node-a",), "disks served from node-a, where the VM runs"),
    ("node-a", [fact("a", "node-a"), fact("b", "node-a")], CO_LOCATED, ("node-a",), "where the VM runs"),
    ("node-a", [fact("a", "node-a"), fact("b", None)], CO_LOCATED, ("node-a",), "ignored: share-manager of b is stopped"),
    ("node-a", [fact("a", "node-b")], APART, ("node-b",), "disks served from node-b, the VM runs on node-a"),
    ("node-a", [fact("a", "node-b"), fact("b", "node-b"), fact("c", None)], APART, ("node-b",), "ignored: share-manager of c"),
    ("node-a", [fact("a", "node-b"), fact("b", "node-c"), fact("c", "node-c")], SPLIT, ("node-c", "node-b"),
     "disks served from node-c (2), node-b (1)"),
    ("node-a", [fact("a", "node-a"), fact("b", "node-b")], SPLIT, ("node-a", "node-b"), "node-a (1), node-b (1)"),
    ("node-a", [fact("a", None), fact("b", None)], UNRESOLVED, (), "share-manager of a is stopped; share-manager of b"),
    ("node-a", [], UNRESOLVED, (), "no disks to follow"),
    (None, [fact("a", "node-b")], UNRESOLVED, (), "not running on a node"),
], ids=["co-located", "co-located-two", "co-located-one-unresolved", "apart", "apart-one-unresolved", "split",
        "split-with-own-node", "unresolved", "no-disks", "not-running"])
def test_locality(vm_node, facts, state, storage, why):
    where = locality(vm_node, facts)
    assert where.state is state and where.storage == storage and why in where.why
    assert where.target == ("node-b" if state is APART else None)


MIGRATED_AT = at("2026-11-20T09:58:31Z")  # vmi-migrated.yaml's endTimestamp


@pytest.mark.parametrize("vmi, share_manager, created, since", [
    (vmi_obj(), at("2026-11-01T08:00:00Z"), None, MIGRATED_AT),
    (vmi_obj(), at("2026-11-20T11:00:00Z"), None, at("2026-11-20T11:00:00Z")),
    (vmi_obj(), None, None, None),
    (vmi_obj(migrationState=None), at("2026-11-01T08:00:00Z"), at("2026-11-02T08:00:00Z"), at("2026-11-02T08:00:00Z")),
    (vmi_obj(migrationState=None), at("2026-11-03T08:00:00Z"), at("2026-11-02T08:00:00Z"), at("2026-11-03T08:00:00Z")),
    (vmi_obj(migrationState=None), at("2026-11-03T08:00:00Z"), None, None),
    (vmi_obj(migrationState=in_flight_state()), at("2026-11-01T08:00:00Z"), at("2026-11-01T08:00:00Z"), None),
    (vmi_obj(migrationState=in_flight_state(failed=True, endTimestamp="2026-11-20T11:59:40Z")),
     at("2026-11-01T08:00:00Z"), None, at("2026-11-20T11:59:40Z")),
    (vmi_obj(migrationState=in_flight_state(failed=True)), at("2026-11-01T08:00:00Z"), None, None),
], ids=["migrated-after-share-manager", "share-manager-after-migration", "share-manager-unknown",
        "never-migrated-started-after", "never-migrated-share-manager-after", "never-migrated-start-unknown",
        "migration-in-flight", "failed-migration-ended", "failed-migration-no-end"])
def test_apart_since_is_read_from_the_cluster(vmi, share_manager, created, since):
    """The later of the VM coming to its node and the share-manager pod's creation; None when unknown."""
    assert apart_since(read_vmi(vmi, SETTINGS), share_manager, created) == since
