"""kubefake's apiserver where it stands in for a real one for client-go (Helm): strategic merge
patches and label selectors, as the apiserver applies them (the chart's tests rely on both)."""
from __future__ import annotations

import pytest

from kubefake import strategic
from kubefake.apiserver import label_selector

WEBHOOKS = {"webhooks": [
    {"name": "vm", "clientConfig": {"caBundle": "Q0E=", "service": {"name": "s"}},
     "matchConditions": [{"name": "opted-in", "expression": "old"}]},
    {"name": "share-manager", "clientConfig": {"caBundle": "Q0E="}, "timeoutSeconds": 5},
]}


def test_a_list_with_a_merge_key_is_merged_element_by_element():
    """What Helm sends when only a webhook's matchConditions change: caBundle stays."""
    patch = {"$setElementOrder/webhooks": [{"name": "vm"}, {"name": "share-manager"}],
             "webhooks": [{"name": "vm", "$setElementOrder/matchConditions": [{"name": "opted-in"}],
                           "matchConditions": [{"name": "opted-in", "expression": "new"}]}]}
    merged = strategic.apply(WEBHOOKS, patch)
    assert merged["webhooks"][0] == {"name": "vm", "clientConfig": {"caBundle": "Q0E=", "service": {"name": "s"}},
                                     "matchConditions": [{"name": "opted-in", "expression": "new"}]}
    assert merged["webhooks"][1] == WEBHOOKS["webhooks"][1]
    assert WEBHOOKS["webhooks"][0]["matchConditions"][0]["expression"] == "old"  # the stored object is not changed


def test_elements_are_deleted_reordered_and_added_by_their_key():
    patch = {"$setElementOrder/webhooks": [{"name": "new"}, {"name": "vm"}],
             "webhooks": [{"name": "share-manager", "$patch": "delete"}, {"name": "new", "timeoutSeconds": 3}]}
    merged = strategic.apply(WEBHOOKS, patch)
    assert [w["name"] for w in merged["webhooks"]] == ["new", "vm"]
    assert merged["webhooks"][0] == {"name": "new", "timeoutSeconds": 3}


def test_lists_without_a_merge_key_are_replaced_and_null_removes_a_key():
    current = {"spec": {"args": ["--keep=report", "--port=9443"], "replicas": 2, "paused": True}}
    merged = strategic.apply(current, {"spec": {"args": ["--keep=migrate"], "paused": None}})
    assert merged == {"spec": {"args": ["--keep=migrate"], "replicas": 2}}


def test_primitive_lists_with_an_order_are_merged_as_sets_and_replace_replaces():
    current = {"metadata": {"finalizers": ["a", "b"]}, "spec": {"x": 1, "y": 2}}
    merged = strategic.apply(current, {"metadata": {"$setElementOrder/finalizers": ["c", "a", "b"],
                                                    "finalizers": ["c"]},
                                       "spec": {"$patch": "replace", "z": 3}})
    assert merged == {"metadata": {"finalizers": ["c", "a", "b"]}, "spec": {"z": 3}}
    removed = strategic.apply(merged, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert removed["metadata"]["finalizers"] == ["c", "b"]


@pytest.mark.parametrize("selector, selected", [
    ("", True),
    ("name=rel,owner=helm", True),
    ("name==rel", True),
    ("name=other", False),
    ("owner!=helm", False),
    ("status in (deployed, superseded)", True),
    ("status notin (deployed)", False),
    ("absent notin (x)", True),
    ("owner", True),
    ("!owner", False),
    ("!absent,name in (rel)", True),
])
def test_label_selectors(selector, selected):
    assert label_selector(selector)({"name": "rel", "owner": "helm", "status": "deployed"}) is selected
