"""NodeAffinity: node selector terms and the pod's own affinity, each both ways (admits / turns away)."""
import pytest
from tests.support.kube import node

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
    assert term_matches(term, {ZONE: "zone-b", "cpus": "16"}, "node-b") is expected


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
    the_node = node("node-b", **{ZONE: "zone-b"})
    assert pod_admits({"spec": spec}, the_node, the_node["metadata"]["labels"]) is expected


@pytest.mark.parametrize("required", [{"nodeSelectorTerms": []}, {}, {"nodeSelectorTerms": [{}]}])
async def test_a_pod_whose_required_node_affinity_selects_nothing_is_never_pinned(required):
    """`nodeSelectorTerms: []` (which the apiserver refuses) and `[{}]` match no node: no pin is
    added that would make such a pod valid, or place it; it is left as the apiserver judges it."""
    from tests.support.fitting import three_nodes
    import jsonpatch
    from tests.support.kube import answer, decode_patch, review, rwx_disk, vm_pod

    from webhook.admission.admit import admit
    from webhook.admission.review import parse_review
    from webhook.stores.snapshot import SnapshotStore
    from webhook.config import Settings
    from webhook.deadline import Deadline

    pod = vm_pod("vm1-rootdisk")
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    store = SnapshotStore([*three_nodes(), *rwx_disk("vm1-rootdisk", "node-b")])
    outcome = await admit(parse_review(review(pod)), store, Settings(), Deadline.after(10, 1))
    assert outcome.decision.outcome != "pinned" and outcome.decision.required == ()
    patched = jsonpatch.apply_patch(pod, decode_patch(answer(outcome)))
    assert patched["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == required
