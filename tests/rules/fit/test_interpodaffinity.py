"""InterPodAffinity: required pod affinity and anti-affinity, the pod's own and the placed pods'."""
import asyncio

import pytest
from tests.support.fitting import NS, ROOTDISK, row_tests, term, three_nodes, view_of, vm, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.stores import listed_store
from webhook.rules.fit import has_required_anti_affinity, why_not_fit
from webhook.rules.fit.demand import Demand
from webhook.rules.fit.checks import prefilter, refused_only
from webhook.rules.fit.resources import node_resources_fit
from webhook.rules.fit.interpodaffinity import inter_pod_affinity, may_refuse

test_why_not_fit, test_only_the_named_check_fails, test_one_demand_for_every_node = row_tests("inter_pod_affinity")


# --------------------------------------------------------------------------- placed pods found by what they may select

UID = "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"
CREATED_BY = "kubevirt.io/created-by"


@pytest.mark.parametrize("value", [1, None, True])
def test_a_placed_pods_term_with_a_label_value_that_is_no_string_is_cannot_tell_whatever_the_labels(value):
    """As a term that cannot be read: a snapshot written by hand may hold `app: 1` or `app:`."""
    placed = workload("guard", "node-b", anti=[term(matchLabels={"app": value})])
    view = view_of(placed)
    for labels in ({"app": value}, {}):
        answer = why_not_fit(vm(labels=labels), NS, view.node("node-b"), view)
        assert answer is not None and "cannot tell" in answer


KEYS, VALUES = ["app", "tier", CREATED_BY], ["a", "b", "c"]
REQUIREMENTS = st.one_of(
    st.builds(lambda k, op, vs: {"key": k, "operator": op, "values": vs}, st.sampled_from(KEYS),
              st.sampled_from(["In", "NotIn"]), st.lists(st.sampled_from(VALUES), min_size=1, max_size=2, unique=True)),
    st.builds(lambda k, op: {"key": k, "operator": op}, st.sampled_from(KEYS), st.sampled_from(["Exists", "DoesNotExist"])))
SELECTORS = st.fixed_dictionaries({}, optional={"matchLabels": st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES),
                                                                               max_size=2),
                                                "matchExpressions": st.lists(REQUIREMENTS, max_size=2)})
TERMS = st.builds(lambda selector, key, namespaces: {"labelSelector": selector, "topologyKey": key, **namespaces},
                  SELECTORS, st.sampled_from(["kubernetes.io/hostname", "topology.kubernetes.io/zone"]),
                  st.sampled_from([{}, {"namespaces": ["prod"]}, {"namespaceSelector": {}}]))
PLACED = st.lists(st.builds(lambda i, node, terms, labels, ns: workload(f"p{i}", node, anti=terms, labels=labels, namespace=ns),
                            st.integers(0, 10**6), st.sampled_from(["node-a", "node-b", "node-c"]),
                            st.lists(TERMS, min_size=1, max_size=2),
                            st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2),
                            st.sampled_from([NS, "prod"])),
                  max_size=6, unique_by=lambda pod: pod["metadata"]["name"])


class EveryPlaced:
    """A view that hands every placed pod with anti-affinity to every check, and keeps no label
    index (the pod's own anti-affinity walks every node's pods): what the indexes narrow."""

    def __init__(self, view):
        self._view, self.memo = view, view.memo
        self._all = [p for n in view.nodes() for p in view.pods_on(n["metadata"]["name"]) if has_required_anti_affinity(p)]

    def __getattr__(self, name):
        return getattr(self._view, name)

    def pods_with_anti_affinity_toward(self, labels):
        return self._all

    def pods_labelled(self, key, value):
        return None


def cached_view(objects):
    """The admission caches' view of the same objects, through their informers."""
    return asyncio.run(listed_store(objects).fit_view(NS))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placed=PLACED, labels=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
       own=st.lists(TERMS, max_size=2))
def test_the_checks_decide_alike_whether_they_see_every_placed_pod_or_those_found_by_the_pods_labels(placed, labels,
                                                                                                   own):
    """The indexes narrow, never decide: placed pods' anti-affinity found by the labels it may
    select, and the VM's own anti-affinity (`own`) looking pods up by KubeVirt's label."""
    pod = vm(labels=labels, anti=own or None)
    static = view_of(*placed)
    nodes = three_nodes()
    objects = [*nodes, *ROOTDISK, *placed]
    cached = cached_view(objects)
    # One Demand for every node, as a share-manager's judging tries them: what it gathered on the
    # first node decides the others as a fresh look would.
    shared = {id(view): Demand.of(pod, NS, view.memo) for view in (static, cached)}
    own = {id(view): tuple(c for c in prefilter(shared[id(view)], view) if c is not node_resources_fit)
           for view in (static, cached)}  # as a share-manager's judging asks
    only = {id(view): refused_only(own[id(view)], shared[id(view)]) for view in (static, cached)}
    for node in nodes:
        wanted = why_not_fit(pod, NS, node, EveryPlaced(static)) is None
        refused = inter_pod_affinity(Demand.of(pod, NS), node, EveryPlaced(static)) is not None
        # The nodes it says are the only ones the filter may refuse include each one it refuses.
        for view in (static, cached):
            assert not refused or only[id(view)] is None or may_refuse(only[id(view)], node["metadata"]["name"], node)
        assert (why_not_fit(pod, NS, node, static) is None) == wanted
        assert (why_not_fit(pod, NS, cached.node(node["metadata"]["name"]), cached) is None) == wanted
        assert (why_not_fit(pod, NS, node, static, demand=shared[id(static)]) is None) == wanted
        assert (why_not_fit(pod, NS, cached.node(node["metadata"]["name"]), cached,
                            demand=shared[id(cached)]) is None) == wanted


class Counting:
    """A view that counts what the filter asks of it whatever the node."""

    def __init__(self, view):
        self._view, self.memo, self.asked = view, view.memo, []

    def __getattr__(self, name):
        return getattr(self._view, name)

    def pods_with_anti_affinity_toward(self, labels):
        self.asked.append("placed")
        return self._view.pods_with_anti_affinity_toward(labels)

    def pods_labelled(self, key, value):
        self.asked.append("labelled")
        return self._view.pods_labelled(key, value)


def test_one_demand_on_many_nodes_gathers_the_pods_once_and_still_avoids_its_vms_node():
    """kube-scheduler's PreFilter gathers the pods a pod's anti-affinity concerns once per cycle:
    a migration target judged on every node with one Demand asks the view once, and the node of
    its own VM's pod is still refused, whichever node came first."""
    target = vm(labels={CREATED_BY: UID}, anti=[term(matchLabels={CREATED_BY: UID})])
    source = workload("virt-launcher-vm1-abcde", "node-b", labels={CREATED_BY: UID, "kubevirt.io": "virt-launcher"})
    for order in (["node-a", "node-b", "node-c"], ["node-c", "node-b", "node-a"]):
        view = Counting(cached_view([*three_nodes(), *ROOTDISK, source]))
        demand = Demand.of(target, NS, view.memo)
        answers = {name: why_not_fit(target, NS, view.node(name), view, demand=demand) for name in order}
        assert view.asked == ["placed", "labelled"]
        assert answers["node-a"] is None and answers["node-c"] is None
        assert "fails the VM's pod anti-affinity: pod default/virt-launcher-vm1-abcde" in answers["node-b"]


def test_a_migration_target_avoids_the_node_of_its_own_vms_pod_through_either_view():
    """KubeVirt's term on a migration target pod (its VMI's pods, by `kubevirt.io/created-by`),
    found through the label index of the snapshot's view and of the caches' alike."""
    target = vm(labels={CREATED_BY: UID}, anti=[term(matchLabels={CREATED_BY: UID})])
    source = workload("virt-launcher-vm1-abcde", "node-b", labels={CREATED_BY: UID, "kubevirt.io": "virt-launcher"})
    other = workload("virt-launcher-vm2-fghij", "node-c", labels={CREATED_BY: "another-uid"})
    for view in (view_of(source, other), cached_view([*three_nodes(), *ROOTDISK, source, other])):
        assert "fails the VM's pod anti-affinity: pod default/virt-launcher-vm1-abcde" in why_not_fit(
            target, NS, view.node("node-b"), view)
        assert why_not_fit(target, NS, view.node("node-c"), view) is None


def test_a_node_whose_hostname_label_is_not_its_name_is_judged_by_each_as_the_scheduler_does():
    """Per-node terms narrow the nodes the filter can turn a pod away from, by the name (the pod's own
    terms) and by the hostname label (placed pods' terms) as each is read: a node named otherwise
    than its hostname label is refused exactly where every placed pod looked at refuses it."""
    nodes = three_nodes()
    for node in nodes:
        node["metadata"]["labels"]["kubernetes.io/hostname"] = "host-" + node["metadata"]["name"]
    target = vm(labels={CREATED_BY: UID, "app": "a"}, anti=[term(matchLabels={CREATED_BY: UID})])
    source = workload("virt-launcher-vm1-abcde", "node-b", labels={CREATED_BY: UID, "kubevirt.io": "virt-launcher"})
    guard = workload("guard", "node-c", anti=[term(matchLabels={"app": "a"})])
    for view in (view_of(source, guard, nodes=nodes), cached_view([*nodes, *ROOTDISK, source, guard])):
        demand = Demand.of(target, NS, view.memo)
        answers = {n["metadata"]["name"]: why_not_fit(target, NS, view.node(n["metadata"]["name"]), view, demand=demand)
                   for n in nodes}
        everyone = EveryPlaced(view)
        assert answers == {n["metadata"]["name"]: why_not_fit(target, NS, n, everyone) for n in nodes}
        assert answers["node-a"] is None and "pod default/virt-launcher-vm1-abcde" in answers["node-b"]
        assert "pod anti-affinity of pod default/guard in kubernetes.io/hostname=host-node-c" in answers["node-c"]
