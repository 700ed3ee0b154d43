"""What a rule read through a Recording store is read again: an answer worked out from it holds only
while each read answers the same, whichever reads those were."""
from tests.support.kube import node, rwx_disk

from webhook.deadline import Deadline
from webhook.kinds import NODE, PVC
from webhook.lookup.recorded import Recording, changed
from webhook.lookup.resolve import read_through
from webhook.stores.snapshot import SnapshotStore
from webhook.stores.store import StoreError


def cluster(**labels):
    return [node("node-a", labels=labels), *rwx_disk("d1", "node-a")]


async def rule(store):
    """A rule's reads, of each kind of look-up."""
    deadline = Deadline.after(5.0, 0.0)
    await read_through(store, NODE, None, "node-a", deadline)
    await store.get(PVC, "default", "d1")
    await deadline.call(store.pvs_by_volume_handle, "pvc-d1")
    await deadline.call(store.pods_by_claim, "default", "d1")


async def test_every_read_is_noted_and_read_again():
    recording = Recording(SnapshotStore(cluster()))
    await rule(recording)
    assert [method for method, _, _ in recording.reads] == ["peek", "get", "pvs_by_volume_handle", "pods_by_claim"]
    assert await changed(SnapshotStore(cluster()), tuple(recording.reads), Deadline.after(5.0, 0.0)) is None
    why = await changed(SnapshotStore(cluster(zone="b")), tuple(recording.reads), Deadline.after(5.0, 0.0))
    assert why == "what it read of Node node-a changed since"


async def test_a_read_that_cannot_be_made_again_does_not_hold():
    recording = Recording(SnapshotStore(cluster()))
    await rule(recording)

    class Failing(SnapshotStore):
        async def pods_by_claim(self, namespace, claim, *, timeout=None):
            raise StoreError("the API is down")

    why = await changed(Failing(cluster()), tuple(recording.reads), Deadline.after(5.0, 0.0))
    assert why == "what it read of default d1 cannot be read again"
