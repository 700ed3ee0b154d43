"""The objects the caches share between readers are never changed by an admission."""
import orjson
import pytest
from tests.support.stores import ReadOnly, frozen, seed, watched_store
from tests.support.kube import nodes, review, rwx_disk, vm_pod

from webhook.admission import server
from webhook.cluster.table import SHARED, Table
from webhook.config import Settings
from webhook.kinds import NODE


def test_frozen_objects_refuse_every_change():
    obj = frozen({"a": {"b": [1, {"c": 2}]}})
    for change in (lambda: obj.update(x=1), lambda: obj["a"].pop("b"), lambda: obj["a"]["b"].append(3),
                   lambda: obj["a"]["b"][1].setdefault("d", 4), lambda: obj["a"]["b"].sort()):
        with pytest.raises(ReadOnly):
            change()
    assert obj == {"a": {"b": [1, {"c": 2}]}} and isinstance(obj, dict)


def test_a_read_is_shared_until_the_object_changes(monkeypatch):
    monkeypatch.undo()  # the real Table.read, not the frozen copies of the autouse fixture
    table = Table({})
    table.put("ns/a", {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"x": 1}})
    first = table.read("ns/a")
    assert table.read("ns/a") is first and table.get("ns/a") is not first and table.get("ns/a") == first
    table.put("ns/a", {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"x": 2}})
    assert table.read("ns/a")["spec"] == {"x": 2} and first["spec"] == {"x": 1}
    table.remove("ns/a")
    assert table.read("ns/a") is None


def test_shared_objects_are_bounded(monkeypatch):
    monkeypatch.undo()
    table = Table({})
    for i in range(SHARED + 10):
        table.put(str(i), {"spec": {"i": i}})
        table.read(str(i))
    assert len(table.shared) == SHARED and "0" not in table.shared and str(SHARED + 9) in table.shared


async def test_an_admission_on_the_watch_caches_reads_frozen_objects_and_pins(kmock):
    seed(kmock, nodes("node-a", "node-b") + rwx_disk("d0", "node-b") + rwx_disk("d1", "node-b"))
    settings = Settings()
    store = await watched_store(kmock, settings)
    try:
        endpoint = server.Admissions(store, settings)
        raw = orjson.dumps(review(vm_pod("d0", "d1")))
        answer = orjson.loads(await endpoint.answer(raw, endpoint.deadline(10.0), 0.0))
        assert answer["response"]["auditAnnotations"]["node"] == "node-b"
        node = store.peek(NODE, None, "node-b")[1]
        with pytest.raises(Exception, match="an object the caches share was changed"):
            node["spec"] = {}
    finally:
        await store.close()
