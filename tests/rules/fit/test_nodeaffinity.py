"""NodeAffinity: node selector terms and the pod's own affinity, each both ways (admits / turns away)."""
import pytest
from kube import node

from webhook.rules.fit.nodeaffinity import pod_admits, term_matches

ZONE = "topology.kubernetes.io/zone"


@pytest.mark.parametrize("term, expected", [
    ({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-b"]}]}, True),
    ({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]}, False),
    ({"matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["zone-a"]}]}, True),
    ({"matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["zone-b"]}]}, False),
    ({"matchExpressions": [{"key": "missing", "operator": "NotIn", "values": ["x"]}]}, True),
    ({"matchExpressions": [{"key": ZONE, "operator": "Exists"}]}, True),
    ({"matchExpressions": [{"key": "missing", "operator": "Exists"}]}, False),
    ({"matchExpressions": [{"key": "missing", "operator": "DoesNotExist"}]}, True),
    ({"matchExpressions": [{"key": ZONE, "operator": "DoesNotExist"}]}, False),
    ({"matchExpressions": [{"key": "cpus", "operator": "Gt", "values": ["8"]}]}, True),
    ({"matchExpressions": [{"key": "cpus", "operator": "Gt", "values": ["16"]}]}, False),
    ({"matchExpressions": [{"key": "cpus", "operator": "Lt", "values": ["32"]}]}, True),
    ({"matchExpressions": [{"key": "cpus", "operator": "Lt", "values": ["16"]}]}, False),
    ({"matchExpressions": [{"key": ZONE, "operator": "Gt", "values": ["1"]}]}, False),  # not an integer
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}, True),
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}, False),
    ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]}, True),
    ({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-b"]}],
      "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}, False),  # ANDed
    ({}, False),  # an empty term matches nothing
], ids=["in", "in-miss", "notin", "notin-miss", "notin-absent", "exists", "exists-miss", "doesnotexist",
        "doesnotexist-miss", "gt", "gt-miss", "lt", "lt-miss", "gt-not-int", "fields-in", "fields-in-miss",
        "fields-notin", "anded", "empty"])
def test_term_matches(term, expected):
    assert term_matches(term, node("node-b", **{ZONE: "zone-b", "cpus": "16"})) is expected


def _affinity(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize("spec, expected", [
    ({}, True),
    ({"nodeSelector": {"kubevirt.io/schedulable": "true"}}, True),
    ({"nodeSelector": {"kubernetes.io/arch": "arm64"}}, False),
    ({"affinity": _affinity({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]})}, False),
    ({"affinity": _affinity({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]},
                            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-b"]}]})}, True),  # ORed
    ({"affinity": _affinity({})}, False),
], ids=["nothing", "selector-ok", "selector-excludes", "zone-excludes", "or-terms", "only-empty-term"])
def test_pod_admits(spec, expected):
    assert pod_admits({"spec": spec}, node("node-b", **{ZONE: "zone-b"})) is expected
