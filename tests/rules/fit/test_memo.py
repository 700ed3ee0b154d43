"""A Memo belongs to one store: answers are kept per object name and version, never shared
between owners, never stale, and bounded."""
from tests.support.fitting import NS, sized, vm

from webhook.rules.fit.checks import why_not_fit
from webhook.rules.fit.demand import Demand
from webhook.rules.fit.view import StaticView
from webhook.rules.fit.memo import Memo


def cpu_of(node):
    """What a check works out from a node (here: its allocatable cpu), counting the readings."""
    cpu_of.reads += 1
    return node["status"]["allocatable"]["cpu"]


def node(name="node-a", cpu="4", version=None):
    found = {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu}}}
    if version is not None:
        found["metadata"]["resourceVersion"] = version
    return found


def reads(memo, obj):
    cpu_of.reads = 0
    answer = memo.of(cpu_of, obj, obj["status"])
    return answer, cpu_of.reads


def test_an_unchanged_object_is_answered_from_the_memo():
    memo = Memo()
    assert reads(memo, node(version="7")) == ("4", 1)
    assert reads(memo, node(version="7")) == ("4", 0)  # another copy of the same version
    assert reads(memo, node()) == ("4", 1)
    assert reads(memo, node()) == ("4", 0)  # no resourceVersion: the same content


def test_a_changed_resource_version_is_read_again():
    memo = Memo()
    assert reads(memo, node(cpu="4", version="7")) == ("4", 1)
    assert reads(memo, node(cpu="8", version="8")) == ("8", 1)
    assert reads(memo, node(cpu="4", version="7")) == ("4", 1)  # the old version was replaced, not kept
    assert len(memo) == 1


def test_changed_content_without_a_resource_version_is_read_again():
    memo = Memo()
    assert reads(memo, node(cpu="4")) == ("4", 1)
    assert reads(memo, node(cpu="8")) == ("8", 1)


def test_objects_without_a_name_are_always_read():
    memo = Memo()
    nameless = {"status": {"allocatable": {"cpu": "4"}}}
    assert reads(memo, nameless) == ("4", 1)
    assert reads(memo, nameless) == ("4", 1)
    assert len(memo) == 0


def test_two_owners_do_not_share_answers():
    """Two stores may hold a node of the same name and resourceVersion (two clusters, two tests):
    each answers from its own objects."""
    first, second = Memo(), Memo()
    assert reads(first, node(cpu="4", version="1")) == ("4", 1)
    assert reads(second, node(cpu="64", version="1")) == ("64", 1)
    assert reads(first, node(cpu="64", version="1")) == ("4", 0)  # the first store's own answer
    pod = vm(requests={"cpu": "6"}, volumes=[])
    small, large = sized("node-a", cpu="4"), sized("node-a", cpu="8")
    for the_node in (small, large):
        the_node["metadata"]["resourceVersion"] = "1"
    assert why_not_fit(pod, NS, small, StaticView([small])) is not None
    assert why_not_fit(pod, NS, large, StaticView([large])) is None


def test_the_memo_is_bounded():
    memo = Memo(size=8)
    for i in range(50):
        assert reads(memo, node(f"node-{i}", version="1")) == ("4", 1)
    assert len(memo) == 8
    assert reads(memo, node("node-49", version="1")) == ("4", 0)  # the newest are kept
    assert reads(memo, node("node-0", version="1")) == ("4", 1)  # the oldest went first


def test_content_keys_are_bounded_too():
    memo = Memo(size=4)
    for i in range(20):
        assert memo.latest(len, str(i).encode(), True, "x" * i) == i
    assert len(memo) == 4


def test_an_object_whose_content_is_larger_than_any_real_pods_is_not_held():
    """40 pods of 20,000 limit names each added 110 MB to the memo for good: such content is
    read each time instead, and the memo holds nothing of it."""
    memo = Memo()
    calls = []

    def read(obj):
        calls.append(1)
        return len(obj["spec"]["limits"])

    for i in range(40):
        pod = {"metadata": {"name": f"p{i}"}, "spec": {"limits": {f"example.com/r{j}": "1" for j in range(20_000)}}}
        assert memo.of(read, pod, pod["spec"]) == 20_000
        limits = {f"example.com/r{j}": "1" for j in range(20_000)}
        demand = Demand.of({"spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}, "default", memo)
        assert len(demand.requests) == 20_000
    assert len(memo) == 0 and len(calls) == 40
    small = {"metadata": {"name": "small"}, "spec": {"limits": {"cpu": "1"}}}
    memo.of(read, small, small["spec"])
    memo.of(read, small, small["spec"])
    assert len(memo) == 1 and len(calls) == 41  # what a real pod reads is still kept
