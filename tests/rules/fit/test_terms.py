"""What the filters match of a pod, parsed once from its spec: host ports, required pod
(anti-)affinity terms with the scheduler's namespace rules, where a placed pod's anti-affinity is
looked up, and DoNotSchedule spread constraints with the scheduler's defaults."""
from typing import Any

import pytest
from tests.support.fitting import NS, term, vm, workload
from tests.support.kube import migration_target

from webhook.rules.fit.fields import Unreadable
from webhook.rules.fit.terms import (ANY_POD, HONOR, IGNORE, affinity_terms, anti_affinity_keys,
                                     existing_anti_terms, host_ports, keys_toward, spread_constraints)

UID = "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"
CREATED_BY = "kubevirt.io/created-by"


def vm_with(**spec):
    pod = vm()
    pod["spec"].update(spec)
    return pod


@pytest.mark.parametrize("containers, host_network, expected", [
    ([{"ports": [{"containerPort": 80}]}], False, ()),
    ([{"ports": [{"containerPort": 80, "hostPort": 8080}]}], False, (("0.0.0.0", "TCP", 8080),)),
    ([{"ports": [{"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.5"}]}], False,
     (("10.0.0.5", "UDP", 53),)),
    ([{"ports": [{"containerPort": 9100}]}], True, (("0.0.0.0", "TCP", 9100),)),
], ids=["container-port-only", "host-port", "udp-on-ip", "host-network"])
def test_host_ports(containers, host_network, expected):
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "image": "x", **c} for i, c in enumerate(containers)]}
    if host_network:
        spec["hostNetwork"] = True
    assert host_ports({"spec": spec}) == expected


def test_a_sidecar_init_container_holds_its_host_port_and_a_plain_one_does_not():
    port = {"ports": [{"containerPort": 8443, "hostPort": 8443}]}
    pod = vm_with(initContainers=[{"name": "setup", "image": "x", **port},
                                  {"name": "proxy", "image": "x", "restartPolicy": "Always", **port}])
    assert host_ports(pod) == (("0.0.0.0", "TCP", 8443),)


@pytest.mark.parametrize("port", [{"hostPort": "8080"}, {"hostPort": True}, {"hostPort": 8080, "protocol": 6}],
                         ids=["text", "boolean", "protocol-number"])
def test_a_host_port_of_unexpected_shape_is_unreadable(port):
    with pytest.raises(Unreadable):
        host_ports(vm(ports=[{"containerPort": 8080, **port}]))


# --------------------------------------------------------------------------- required pod (anti-)affinity terms


@pytest.mark.parametrize("raw, namespaces, namespace_selector", [
    (term(matchLabels={"app": "db"}), {NS}, None),  # no namespaces, no selector: the pod's own
    (term(matchLabels={"app": "db"}, namespaces=["prod", "stage"]), {"prod", "stage"}, None),
    (term(matchLabels={"app": "db"}, namespaces=[]), {NS}, None),
    (term(matchLabels={"app": "db"}, namespaceSelector={}), set(), ()),  # selects every namespace
    (term(matchLabels={"app": "db"}, namespaceSelector={"matchLabels": {"team": "a"}}), set(),
     (("team", "In", frozenset({"a"})),)),
], ids=["own-namespace", "listed", "empty-list", "every-namespace", "namespace-labels"])
def test_which_namespaces_a_term_selects_in(raw, namespaces, namespace_selector):
    (found,) = affinity_terms(vm(affinity=[raw]), NS, "podAffinity", incoming=True)
    assert (found.namespaces, found.namespace_selector) == (namespaces, namespace_selector)
    assert found.topology_key == "kubernetes.io/hostname"


@pytest.mark.parametrize("raw, namespace, labels, selects", [
    (term(matchLabels={"app": "db"}), NS, {"app": "db"}, True),
    (term(matchLabels={"app": "db"}), "prod", {"app": "db"}, False),
    (term(matchLabels={"app": "db"}, namespaceSelector={}), "prod", {"app": "db"}, True),
    (term(matchLabels={"app": "db"}, namespaceSelector={"matchLabels": {"team": "a"}}), "prod", {"app": "db"}, None),
    (term(matchLabels={"app": "db"}, namespaceSelector={"matchLabels": {"team": "a"}}), "prod", {"app": "web"}, False),
], ids=["own-namespace", "other-namespace", "every-namespace", "namespace-labels-cannot-tell",
        "namespace-labels-but-not-the-pod"])
def test_whether_a_term_selects_a_pod(raw, namespace, labels, selects):
    (found,) = affinity_terms(vm(anti=[raw]), NS, "podAntiAffinity", incoming=True)
    assert found.matches(namespace, labels) is selects


def test_match_label_keys_are_merged_from_the_incoming_pods_own_labels():
    raw = dict(term(matchLabels={"app": "db"}), matchLabelKeys=["tier"], mismatchLabelKeys=["release"])
    pod = vm(anti=[raw], labels={"tier": "gold", "release": "r1"})
    (incoming,) = affinity_terms(pod, NS, "podAntiAffinity", incoming=True)
    assert incoming.matches(NS, {"app": "db", "tier": "gold", "release": "r2"}) is True
    assert incoming.matches(NS, {"app": "db", "tier": "silver", "release": "r2"}) is False
    assert incoming.matches(NS, {"app": "db", "tier": "gold", "release": "r1"}) is False
    (stored,) = affinity_terms(pod, NS, "podAntiAffinity", incoming=False)  # the apiserver merged them already
    assert stored.matches(NS, {"app": "db", "tier": "silver"}) is True


def test_kubevirts_term_on_a_migration_target_selects_its_own_vms_pods():
    (found,) = affinity_terms(migration_target(), NS, "podAntiAffinity", incoming=True)
    assert found.matches(NS, {CREATED_BY: UID, "kubevirt.io": "virt-launcher"}) is True
    assert found.matches(NS, {CREATED_BY: "another-vmi", "kubevirt.io": "virt-launcher"}) is False


@pytest.mark.parametrize("raw", [{"labelSelector": {}}, dict(term(), topologyKey=""), "term"],
                         ids=["no-topology-key", "empty-topology-key", "not-an-object"])
def test_a_term_of_unexpected_shape_is_unreadable_and_a_placed_one_says_why(raw):
    with pytest.raises(Unreadable):
        affinity_terms(vm(anti=[raw]), NS, "podAntiAffinity", incoming=True)
    why = existing_anti_terms(workload("guard", "node-b", anti=[raw]))
    assert isinstance(why, str) and why


@pytest.mark.parametrize("terms, keys", [
    # KubeVirt's own, on every migration target pod and so on every VM that has migrated.
    ([term(matchLabels={CREATED_BY: UID})], [(CREATED_BY, UID)]),
    ([term(matchExpressions=[{"key": "app", "operator": "Exists"}, {"key": "tier", "operator": "In", "values": ["b", "a"]}])],
     [("tier", "a"), ("tier", "b")]),
    ([term(matchExpressions=[{"key": "app", "operator": "NotIn", "values": ["web"]}])], [ANY_POD]),
    ([term()], [ANY_POD]),  # an empty selector selects every pod
    ([{"topologyKey": "kubernetes.io/hostname"}], []),  # no selector selects none
    ([term(matchLabels={"app": "db"}), term(matchLabels={"app": "db"}, namespaces=["prod"])], [("app", "db")]),
    ([term(matchExpressions=[{"key": "app", "operator": "Sometimes"}])], [ANY_POD]),  # cannot be read: always checked
    ([term(matchLabels={"app": 1})], [ANY_POD]),  # a label value is a string: not one of ours to look up
    ([term(matchLabels={"app": None})], [ANY_POD]),
])
def test_a_placed_pods_anti_affinity_is_found_by_a_label_every_pod_it_selects_has(terms, keys):
    assert anti_affinity_keys(workload("guard", "node-b", anti=terms)) == keys




def test_a_pod_is_looked_up_under_each_of_its_labels_and_as_any_pod():
    assert keys_toward({CREATED_BY: UID, "kubevirt.io": "virt-launcher", "odd": 1}) == [
        ANY_POD, (CREATED_BY, UID), ("kubevirt.io", "virt-launcher")]


# --------------------------------------------------------------------------- topology spread constraints


def spread(**raw: Any) -> dict[str, Any]:
    return {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "db"}}, **raw}


def test_spread_constraints_with_the_schedulers_defaults():
    (found,) = spread_constraints(vm(spread=[spread(), spread(whenUnsatisfiable="ScheduleAnyway")]))
    assert (found.max_skew, found.topology_key, found.min_domains) == (1, "topology.kubernetes.io/zone", 1)
    assert (found.node_affinity_policy, found.node_taints_policy) == (HONOR, IGNORE)
    assert found.selector == (("app", "In", frozenset({"db"})),)


def test_spread_constraints_as_written():
    (found,) = spread_constraints(vm(spread=[spread(maxSkew=2, minDomains=3, nodeAffinityPolicy=IGNORE,
                                                    nodeTaintsPolicy=HONOR, matchLabelKeys=["tier"])],
                                     labels={"tier": "gold"}))
    assert (found.max_skew, found.min_domains, found.node_affinity_policy, found.node_taints_policy) == \
        (2, 3, IGNORE, HONOR)
    assert ("tier", "In", frozenset({"gold"})) in found.selector


@pytest.mark.parametrize("raw", [
    spread(maxSkew=0), spread(maxSkew="1"), spread(maxSkew=True), spread(minDomains=0), spread(topologyKey=""),
    spread(nodeTaintsPolicy="Sometimes"),
], ids=["skew-zero", "skew-text", "skew-boolean", "min-domains-zero", "no-topology-key", "unknown-policy"])
def test_a_spread_constraint_of_unexpected_shape_is_unreadable(raw):
    with pytest.raises(Unreadable):
        spread_constraints(vm(spread=[raw]))
