"""Whether a running VM is apart from its storage, and since when."""

import pytest
from tests.support.keeping import at, fact

from webhook.rules.keeping.apart import (
    APART,
    CO_LOCATED,
    SPLIT,
    UNRESOLVED,
    apart_since,
    locality,
)

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


NOW = at("2026-11-20T12:00:00Z")


@pytest.mark.parametrize("moments, since", [
    ([at("2026-11-20T09:58:31Z"), at("2026-11-01T08:00:00Z"), at("2026-11-19T08:00:00Z")], at("2026-11-20T09:58:31Z")),
    ([None, at("2026-11-20T11:00:00Z"), at("2026-11-01T08:00:00Z")], at("2026-11-20T11:00:00Z")),
    ([None, None], None),
    ([], None),
    ([at("2026-11-20T12:00:05Z")], NOW),
], ids=["migrated-last", "share-manager-last", "nothing-known", "no-moments", "clock-skew"])
def test_apart_since_is_the_latest_moment_known(moments, since):
    """The latest of the moments that could have made the VM apart, never in the future; None when unknown."""
    assert apart_since(moments, NOW) == since
