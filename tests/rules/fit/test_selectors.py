"""Label selectors as kube-scheduler reads them (apimachinery `LabelSelectorAsSelector`): what a
selector parses to, which pods it selects, and what is refused as the apiserver would."""
import pytest

from webhook.rules.fit.fields import Unreadable
from webhook.rules.fit.selectors import parse_selector, selects, with_label_keys

UID = "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"
LAUNCHER = {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": UID, "vm.kubevirt.io/name": "vm1"}
SHARE_MANAGER = {"longhorn.io/component": "share-manager", "longhorn.io/share-manager": "pvc-d1"}


@pytest.mark.parametrize("raw, labels, selected", [
    ({"matchLabels": {"kubevirt.io/created-by": UID}}, LAUNCHER, True),  # KubeVirt's own term on a migration target
    ({"matchLabels": {"kubevirt.io/created-by": UID}}, SHARE_MANAGER, False),
    ({"matchLabels": {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": "vm2"}}, LAUNCHER, False),  # all must hold
    ({"matchExpressions": [{"key": "longhorn.io/component", "operator": "In", "values": ["share-manager", "x"]}]},
     SHARE_MANAGER, True),
    ({"matchExpressions": [{"key": "longhorn.io/component", "operator": "NotIn", "values": ["share-manager"]}]},
     SHARE_MANAGER, False),
    ({"matchExpressions": [{"key": "longhorn.io/component", "operator": "NotIn", "values": ["share-manager"]}]},
     LAUNCHER, True),  # NotIn holds where the label is absent
    ({"matchExpressions": [{"key": "kubevirt.io", "operator": "Exists"}]}, LAUNCHER, True),
    ({"matchExpressions": [{"key": "kubevirt.io", "operator": "Exists"}]}, SHARE_MANAGER, False),
    ({"matchExpressions": [{"key": "kubevirt.io", "operator": "DoesNotExist"}]}, SHARE_MANAGER, True),
    ({"matchExpressions": [{"key": "kubevirt.io", "operator": "DoesNotExist"}]}, LAUNCHER, False),
    ({}, SHARE_MANAGER, True),  # an empty selector selects every pod
    (None, LAUNCHER, False),  # no selector selects none
], ids=["match-labels", "match-labels-other-pod", "match-labels-all", "in", "not-in", "not-in-absent", "exists",
        "exists-absent", "does-not-exist", "does-not-exist-present", "empty", "none"])
def test_selects(raw, labels, selected):
    assert selects(parse_selector(raw, "labelSelector"), labels) is selected


@pytest.mark.parametrize("raw, words", [
    ("app=db", "labelSelector is not an object"),
    ({"matchLabels": {"app": 1}}, "labelSelector matchLabels holds a value that is no string"),
    ({"matchExpressions": [{"key": "app", "operator": "In"}]}, "labelSelector: In on app with 0 values"),
    ({"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["db"]}]},
     "labelSelector: Exists on app with 1 values"),
    ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, "labelSelector: unknown operator 'Gt'"),
    ({"matchExpressions": [{"key": 7, "operator": "Exists"}]}, "labelSelector has a malformed expression"),
    ({"matchExpressions": {"key": "app"}}, "labelSelector matchExpressions is not a list"),
], ids=["not-an-object", "label-not-a-string", "in-without-values", "exists-with-values", "unknown-operator",
        "key-not-a-string", "expressions-not-a-list"])
def test_a_selector_the_apiserver_would_refuse_is_unreadable(raw, words):
    with pytest.raises(Unreadable) as raised:
        parse_selector(raw, "labelSelector")
    assert str(raised.value) == words


def test_match_and_mismatch_label_keys_take_the_pods_own_values():
    selector = with_label_keys(parse_selector({"matchLabels": {"app": "db"}}, "s"), {"tier": "gold", "release": "r1"},
                               ["tier", "absent"], ["release"])
    assert selects(selector, {"app": "db", "tier": "gold", "release": "r2"})
    assert not selects(selector, {"app": "db", "tier": "silver", "release": "r2"})
    assert not selects(selector, {"app": "db", "tier": "gold", "release": "r1"})
    assert with_label_keys(None, {"tier": "gold"}, ["tier"], ()) is None  # no selector stays none
