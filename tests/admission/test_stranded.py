"""The safety net in `serve`: pinned pods the scheduler cannot place are reported once."""
import asyncio
import copy
import datetime
import logging

import jsonpatch
from tests.support.stores import for_host
from tests.support.kube import affinity_ops, nodes, vm_pod

from webhook import metrics
from webhook.stores.cache import WatchedClusterStore
from webhook.cluster.reflector import Event, EventType
from webhook.admission.stranded import StrandedReporter
from webhook.config import Settings

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.timezone.utc)
MESSAGE = "0/3 nodes are available: 3 Insufficient devices.kubevirt.io/kvm."


class Recorder:
    """Stands in for the EventSink: what would be posted."""

    def __init__(self):
        self.events = []

    def emit_about(self, involved, reason, message, *, warning=False, name=None):
        self.events.append((involved, reason, message, warning, name))


def waiting_pod(name, minutes, *, decision="pinned", vmi="vm1", hostname=None, forged=False):
    pod = vm_pod()
    pod["metadata"]["ownerReferences"][0]["name"] = vmi
    if hostname is not None:  # KubeVirt's label is the VMI's spec.hostname, not its name
        pod["metadata"]["labels"]["vm.kubevirt.io/name"] = hostname
        del pod["metadata"]["labels"]["kubevirt.io/vm"]
    pod["metadata"].update(name=name, namespace="default",
                           creationTimestamp=(NOW - datetime.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    pod["metadata"]["labels"]["kubevirt.io/created-by"] = "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"
    pod["metadata"]["annotations"].update({"kubevirt-scheduler/decision": decision, "kubevirt-scheduler/node": "node-b"})
    if decision == "pinned" and not forged:  # the pin the webhook writes with that annotation
        pod = jsonpatch.apply_patch(pod, affinity_ops(pod["spec"], ("node-b",), ()))
    pod["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": MESSAGE}]}
    return pod


async def test_a_stranded_pod_is_reported_once_and_forgotten_when_placed(caplog):
    store = WatchedClusterStore(for_host("http://127.0.0.1:9"), Settings())
    try:
        for informer in store.informers:
            informer.apply(Event(EventType.SYNCED))
        store.nodes.apply(Event(EventType.ADDED, nodes("node-b")[0]))
        stuck, young, preferred = waiting_pod("virt-launcher-vm1-aaaaa", 5), waiting_pod("virt-launcher-vm2-bbbbb", 1), \
            waiting_pod("virt-launcher-vm3-ccccc", 9, decision="preferred")
        for pod in (stuck, young, preferred):
            store.pods.apply(Event(EventType.ADDED, pod))
        events = Recorder()
        reporter = StrandedReporter(store, Settings(), events)
        with caplog.at_level(logging.WARNING, logger="webhook.stranded"):
            assert [s.pod for s in reporter.scan(NOW)] == ["virt-launcher-vm1-aaaaa"]
            reporter.scan(NOW + datetime.timedelta(seconds=30))  # still stranded: said once
        assert metrics.STRANDED_PODS._value.get() == 1
        [(involved, reason, message, warning, name)] = events.events
        assert involved == {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": "vm1",
                            "namespace": "default", "uid": "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"}
        assert (reason, warning, name) == ("Stranded", True, "virt-launcher-vm1-aaaaa.stranded")
        assert message.startswith("pod virt-launcher-vm1-aaaaa pinned to node-b, unschedulable for 5 min") and MESSAGE in message
        [line] = [r for r in caplog.records if r.getMessage() == "pinned pod stranded"]
        assert line.fields["scheduler"] == MESSAGE and line.fields["node"] == "node-b"
        placed = copy.deepcopy(stuck)
        placed["spec"]["nodeName"] = "node-b"
        placed["status"] = {"phase": "Running"}
        store.pods.apply(Event(EventType.MODIFIED, placed))
        later = reporter.scan(NOW + datetime.timedelta(minutes=1))  # vm1 placed; vm2 has now waited 2 minutes
        assert [s.pod for s in later] == ["virt-launcher-vm2-bbbbb"] and len(events.events) == 2
        store.pods.apply(Event(EventType.DELETED, young))
        assert reporter.scan(NOW + datetime.timedelta(minutes=2)) == []
        assert metrics.STRANDED_PODS._value.get() == 0
    finally:
        await store.close()


async def test_two_replicas_record_one_stranded_event_on_the_emulator(kmock):
    """On kmock: each replica's reporter sees the pinned pod the scheduler cannot place; the
    VMI gets one `Stranded` Event, whose name is fixed per pod."""
    from tests.support.stores import seed, watched_store

    from webhook.cluster.events import EventSink

    stuck = waiting_pod("virt-launcher-vm1-aaaaa", 5)
    stuck["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"  # long before now
    seed(kmock, nodes("node-b") + [stuck])
    kmock.resources["v1/events"] = {}
    failed_before = metrics.EVENTS.labels("failed")._value.get()
    replicas = []
    try:
        for _ in range(2):
            store = await watched_store(kmock)
            api = for_host(str(kmock.url).rstrip("/"))
            sink = EventSink(api)
            reporter = StrandedReporter(store, Settings(), sink, interval=0.05)
            reporter.start()
            replicas.append((store, api, sink, reporter))
        for _ in range(100):
            if all(r.reported for *_, r in replicas):
                break
            await asyncio.sleep(0.05)
        for _, _, sink, reporter in replicas:
            await reporter.stop()
            await sink.close()
        events = [obj.raw for (resource, _, _), obj in kmock.objects.items() if resource.plural == "events"]
        assert len(events) == 1, events
        assert events[0]["reason"] == "Stranded" and events[0]["type"] == "Warning"
        assert events[0]["involvedObject"]["name"] == "vm1" and MESSAGE in events[0]["message"]
        assert metrics.STRANDED_PODS._value.get() == 1
        assert metrics.EVENTS.labels("failed")._value.get() == failed_before
    finally:
        for store, api, _, reporter in replicas:
            await reporter.stop()
            await store.close()
            await api.close()


async def test_a_stranded_pod_is_reported_on_its_vmi_not_on_its_hostname():
    store = WatchedClusterStore(for_host("http://127.0.0.1:9"), Settings())
    try:
        for informer in store.informers:
            informer.apply(Event(EventType.SYNCED))
        store.pods.apply(Event(EventType.ADDED, waiting_pod("virt-launcher-db-1-aaaaa", 5, vmi="db-1.example",
                                                            hostname="db-1")))
        events = Recorder()
        [stuck] = StrandedReporter(store, Settings(), events).scan(NOW)
        assert stuck.vm == "db-1.example"
        [(involved, *_)] = events.events
        assert involved["name"] == "db-1.example" and involved["uid"] == "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"
    finally:
        await store.close()


class FailingCache:
    """A synced cache whose pods cannot be read the first `failures` times."""

    def __init__(self, failures):
        self.failures = failures

    def synced(self):
        return True

    def pinned_waiting(self):
        if self.failures:
            self.failures -= 1
            raise RuntimeError("pods unreadable")
        return []


async def test_a_look_that_fails_is_a_readiness_note_until_one_works(caplog):
    reporter = StrandedReporter(FailingCache(failures=2), Settings(), interval=0.05)
    with caplog.at_level(logging.ERROR, logger="webhook.stranded"):
        reporter.start()
        try:
            for _ in range(100):
                if reporter.degraded():
                    break
                await asyncio.sleep(0.01)
            assert reporter.degraded() == ["looking for stranded pods failed: RuntimeError: pods unreadable"]
            for _ in range(100):
                if not reporter.degraded():
                    break
                await asyncio.sleep(0.01)
            assert reporter.degraded() == []  # looked again, and it worked
        finally:
            await reporter.stop()
    assert [r.getMessage() for r in caplog.records] == ["looking for stranded pods failed"] * 2
