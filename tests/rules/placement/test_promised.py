"""The VMs of a drain sent to follow their share-managers: what they take where they were sent, until
they get there, their share-manager goes, or the promise runs out."""
import pytest

from webhook.rules.fit.usage import PodUsage
from webhook.rules.placement.promised import NOTHING, PROMISE_SECONDS, RECHECK_SECONDS, Promises, Taken

VM = PodUsage({"cpu": 2000, "memory": 4 << 30})


def promised(promises):
    """How many VMs are promised a node, in all."""
    return sum(promises.to(node).vms for node in list(promises.nodes()))



class Seen:
    """What the caches say: each VM's nodes (a view of its pods; None: not indexed), each share-manager pod's node
    (absent: deleted)."""

    def __init__(self, vms=None, share_managers=None):
        self.vms = vms or {}
        self.share_managers = share_managers or {}

    def pods_labelled(self, key, vm):
        nodes = self.vms.get(vm, {"node-a"})
        return None if nodes is None else [{"spec": {"nodeName": node}} for node in nodes]

    def peek(self, resource, namespace, name):
        if name not in self.share_managers:
            return True, None
        return True, {"metadata": {"name": name}, "spec": {"nodeName": self.share_managers[name]}}


def review(promises, now, seen):
    promises.review(now, seen, seen.peek)


def sent(*vms, node="node-b", at=0.0):
    promises = Promises()
    for vm in vms:
        promises.make(vm, "node-a", node, ("longhorn-system", f"share-manager-{vm}"), VM, at)
    return promises


def present(*vms, on=None):
    return {f"share-manager-{vm}": on for vm in vms}


def test_what_the_vms_sent_to_a_node_take_there_their_own_aside():
    promises = sent("vm1", "vm2")
    assert promises.to("node-b") == Taken(2, {"cpu": 4000, "memory": 8 << 30})
    assert promises.to("node-b", but="vm1") == Taken(1, {"cpu": 2000, "memory": 4 << 30})
    assert promises.to("node-c") == NOTHING
    assert "node-b" in promises.nodes() and "node-c" not in promises.nodes()


def test_a_vm_placed_again_is_promised_once_where_it_was_sent_last():
    promises = sent("vm1")
    promises.make("vm1", "node-a", "node-c", ("longhorn-system", "share-manager-vm1"), VM, 1.0)
    assert promises.to("node-b") == NOTHING and promises.to("node-c").vms == 1 and promised(promises) == 1


@pytest.mark.parametrize("seen, left", [
    (Seen(share_managers=present("vm1", "vm2")), {"node-b": 2}),  # nothing changed
    (Seen(vms={"vm1": {"node-a", "node-b"}}, share_managers=present("vm1", "vm2")), {"node-b": 1}),  # its target bound
    (Seen(vms={"vm1": set()}, share_managers=present("vm1", "vm2")), {"node-b": 1}),  # the VM stopped
    (Seen(share_managers=present("vm2")), {"node-b": 1}),  # its share-manager deleted
    (Seen(share_managers={**present("vm2"), **present("vm1", on="node-c")}), {"node-b": 1, "node-c": 1}),  # bound elsewhere
    (Seen(vms={"vm1": None}, share_managers=present("vm1", "vm2")), {"node-b": 2}),  # cannot tell: kept
], ids=["unchanged", "landed", "vm-gone", "share-manager-gone", "bound-elsewhere", "vm-unknown"])
def test_a_promise_ends_or_moves_as_the_caches_say(seen, left):
    promises = sent("vm1", "vm2")
    review(promises, RECHECK_SECONDS, seen)
    assert {node: promises.to(node).vms for node in ("node-b", "node-c") if promises.to(node).vms} == left


def test_within_a_drains_burst_the_promises_are_not_looked_at_again():
    """The share-manager pods answered a moment ago are not in the caches yet: not taken for gone."""
    promises = sent("vm1", "vm2")
    review(promises, RECHECK_SECONDS / 2, Seen())
    assert promises.to("node-b").vms == 2
    review(promises, RECHECK_SECONDS, Seen())
    assert promises.to("node-b") == NOTHING and promised(promises) == 0


def test_a_promise_runs_out():
    promises = sent("vm1")
    review(promises, PROMISE_SECONDS - 1, Seen(share_managers=present("vm1")))
    assert promises.to("node-b").vms == 1
    review(promises, PROMISE_SECONDS - 1 + RECHECK_SECONDS, Seen(share_managers=present("vm1")))
    assert promises.to("node-b") == NOTHING


def test_so_many_at_most_the_oldest_let_go(monkeypatch):
    monkeypatch.setattr("webhook.rules.placement.promised.MOST", 3)
    promises = Promises()
    for i in range(5):
        promises.make(f"vm{i}", "node-a", f"node-{i}", ("longhorn-system", f"share-manager-vm{i}"), VM, float(i))
    assert promised(promises) == 3 and sorted(promises.nodes()) == ["node-2", "node-3", "node-4"]


def test_nothing_is_promised_for_a_vm_unknown_or_of_requests_unread():
    promises = Promises()
    promises.make("", "node-a", "node-b", ("longhorn-system", "share-manager-x"), VM, 0.0)
    promises.make("vm1", "node-a", "node-b", ("longhorn-system", "share-manager-vm1"), PodUsage({}, readable=False), 0.0)
    assert promised(promises) == 0 and promises.to("node-b") == NOTHING
