"""A disk's I/O path: whether a healthy replica sits by its share-manager."""
import pytest

from webhook.rules.shared.facts import Fact
from webhook.rules.keeping.iopath import disk_path, path_note

VOLUME = {"spec": {"dataLocality": "strict-local"}}
SERVED = Fact("vm1-disk", "node-b", "share-manager pod on node-b", "pvc-1")


def replica(node="node-b", state="running", failed="", volume="pvc-1"):
    return {"spec": {"volumeName": volume, "nodeID": node, "failedAt": failed}, "status": {"currentState": state}}


@pytest.mark.parametrize("replicas, local", [
    ([replica()], True),
    ([replica(node="node-c")], False),
    ([replica(state="stopped")], False),
    ([replica(failed="2026-11-20T10:00:00Z")], False),
    ([replica(volume="pvc-2")], False),
    ([replica(node="node-c"), replica()], True),
], ids=["running-there", "elsewhere", "stopped", "failed", "another-volume", "one-of-two"])
def test_a_local_replica_is_healthy_and_on_the_share_managers_node(replicas, local):
    path = disk_path(SERVED, VOLUME, replicas)
    assert (path.local_replica, path.data_locality, path.unknown) == (local, "strict-local", "")
    assert bool(path_note([path])) is not local


def test_what_cannot_be_told_is_no_note():
    assert disk_path(SERVED, None, None, "forbidden").local_replica is None
    assert disk_path(SERVED, None, [replica(node="node-c")]).unknown == "Longhorn volume pvc-1 not found"
    stopped = Fact("vm1-disk", None, "share-manager of pvc-1 is stopped", "pvc-1")
    assert disk_path(stopped, VOLUME, []).unknown == "share-manager of pvc-1 is stopped"
    assert path_note([disk_path(SERVED, None, None, "forbidden")]) == ""
