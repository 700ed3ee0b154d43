"""The running service: probes, metrics, Events, graceful shutdown — as the kubelet and Prometheus see it."""
import asyncio
import signal
import ssl
import time

import aiohttp
import pytest
from tests.support.stores import for_host, seed
from tests.support.kube import FIXTURES, Serving, fixture_cluster, kubeconfig_for, metric_sample, review, vm_pod

from webhook.admission import tls
from webhook.process import listening
from webhook.config import Settings
from webhook.cluster.events import NO_EVENTS, EventSink
from webhook.admission.service import Listen, Service
from webhook.stores.direct import ClusterStore
from webhook.stores.snapshot import SnapshotStore

STATE = str(FIXTURES / "longhorn-rwx.yaml")


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one Prometheus sample in a /metrics page (0 when absent)."""
    return metric_sample(text, name, 0.0, **labels)


@pytest.fixture
async def service(tls_files):
    made = []

    async def start(store=None, events=NO_EVENTS, drain_delay=0.5):
        context = tls.ReloadingTLS(tls_files["cert"], tls_files["key"])
        svc = Service(store or SnapshotStore(fixture_cluster()), Settings(),
                      Listen(host="127.0.0.1", port=0, metrics_host="127.0.0.1", metrics_port=0, drain_delay=drain_delay),
                      context, events)
        await svc.start()
        made.append(svc)
        return svc, f"https://localhost:{listening.bound_port(svc.runner)}", f"http://127.0.0.1:{listening.bound_port(svc.ops_runner)}"

    yield start
    for svc in made:
        if not svc.handler.draining:
            await svc.stop()


@pytest.fixture
async def session(tls_files):
    context = ssl.create_default_context(cafile=str(tls_files["ca"]))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as s:
        yield s


async def test_probes_and_metrics_move_with_admissions(service, session):
    svc, base, ops = await service()
    async with session.get(f"{ops}/healthz") as r:
        assert r.status == 200
    async with session.get(f"{ops}/readyz") as r:
        assert r.status == 200
    async with session.get(f"{ops}/metrics") as r:
        before = await r.text()
    for _ in range(3):
        async with session.post(f"{base}/mutate?timeout=10s", json=review(vm_pod())) as r:
            assert r.status == 200
    async with session.post(f"{base}/mutate", data=b"nope", headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400
    async with session.get(f"{ops}/metrics") as r:
        after = await r.text()
    assert sample(after, "colocate_admission_duration_seconds_count", rule="vm") == \
        sample(before, "colocate_admission_duration_seconds_count", rule="vm") + 3
    assert sample(after, "colocate_admissions_total", rule="vm", outcome="pinned") == \
        sample(before, "colocate_admissions_total", rule="vm", outcome="pinned") + 3
    assert sample(after, "colocate_bad_reviews_total") == sample(before, "colocate_bad_reviews_total") + 1


async def test_skip_reasons_are_counted(service, session):
    svc, base, ops = await service()
    pod = vm_pod()
    pod["metadata"]["annotations"]["kubevirt-scheduler/co-schedule"] = "false"
    async with session.get(f"{ops}/metrics") as r:
        before = sample(await r.text(), "colocate_admissions_total", outcome="skipped", reason="not opted in")
    async with session.post(f"{base}/mutate", json=review(pod)) as r:
        assert r.status == 200
    async with session.get(f"{ops}/metrics") as r:
        assert sample(await r.text(), "colocate_admissions_total", outcome="skipped", reason="not opted in") == before + 1


async def test_not_ready_until_the_store_has_synced(service, session):
    class Unsynced(SnapshotStore):
        def synced(self):
            return False

    svc, base, ops = await service(Unsynced(fixture_cluster()))
    async with session.get(f"{ops}/readyz") as r:
        assert r.status == 503 and "store not synced" in await r.text()
    async with session.post(f"{base}/mutate", json=review(vm_pod())) as r:  # still answers meanwhile
        assert (await r.json())["response"]["allowed"] is True


async def test_drain_fails_readiness_at_once_but_keeps_answering(service, session):
    svc, base, ops = await service(drain_delay=1.0)
    stopping = asyncio.create_task(svc.stop())
    await asyncio.sleep(0.1)
    async with session.get(f"{ops}/readyz") as r:
        assert r.status == 503 and "shutting down" in await r.text()
    async with session.post(f"{base}/mutate", json=review(vm_pod())) as r:
        assert r.status == 200
        assert r.headers.get("Connection", "").lower() == "close"  # clients reconnect to a live replica
    await stopping
    with pytest.raises(aiohttp.ClientConnectionError):
        async with session.post(f"{base}/mutate", json=review(vm_pod())):
            pass


def hostname_pod():
    """vm1's pod when the VMI's spec.hostname is "web": KubeVirt labels the pod with the hostname."""
    pod = vm_pod()
    pod["metadata"]["labels"]["vm.kubevirt.io/name"] = "web"
    del pod["metadata"]["labels"]["kubevirt.io/vm"]
    return pod


async def test_decision_event_is_created_on_the_vmi(service, session, kmock):
    seed(kmock, fixture_cluster())
    kmock.resources["v1/events"] = {}
    api = for_host(str(kmock.url).rstrip("/"))
    store = ClusterStore(api)
    svc, base, ops = await service(store, EventSink(api))
    body = review(hostname_pod())
    async with session.post(f"{base}/mutate?timeout=10s", json=body) as r:
        assert r.status == 200
    dry = review(vm_pod(), uid="dry")
    dry["request"]["dryRun"] = True
    async with session.post(f"{base}/mutate?timeout=10s", json=dry) as r:
        assert r.status == 200
    def created_events():
        return [obj.raw for (resource, _, _), obj in kmock.objects.items() if resource.plural == "events"]

    for _ in range(100):
        if created_events():
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)
    posted = created_events()
    assert len(posted) == 1  # none for the dry run
    event = posted[0]
    assert event["involvedObject"]["kind"] == "VirtualMachineInstance"
    # The VMI is the pod's controlling owner, whatever its vm.kubevirt.io/name label says.
    assert event["involvedObject"]["name"] == "vm1" and event["involvedObject"]["namespace"] == "default"
    assert event["involvedObject"]["uid"] == "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"
    assert event["reason"] == "CoLocated" and "node-b" in event["message"]
    await svc.stop()




async def test_a_decisions_event_waits_while_another_review_is_in_flight(service, session, kmock, tls_files):
    """Each Event's POST is CPU that the reviews in flight would wait for: while a connection is
    still sending its review, the decision's Event is held; once it is gone, the Event is posted."""
    seed(kmock, fixture_cluster())
    kmock.resources["v1/events"] = {}
    api = for_host(str(kmock.url).rstrip("/"))
    svc, base, ops = await service(ClusterStore(api), EventSink(api))

    def created_events():
        return [obj.raw for (resource, _, _), obj in kmock.objects.items() if resource.plural == "events"]

    context = ssl.create_default_context(cafile=str(tls_files["ca"]))
    _, sending = await asyncio.open_connection("localhost", listening.bound_port(svc.runner), ssl=context)
    sending.write(b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{")  # its body still on the way
    await sending.drain()
    async with session.post(f"{base}/mutate?timeout=10s", json=review(hostname_pod())) as r:
        assert r.status == 200 and (await r.json())["response"]["patch"]
    await asyncio.sleep(0.5)
    assert created_events() == []  # held: a review is in flight
    sending.close()
    for _ in range(100):
        if created_events():
            break
        await asyncio.sleep(0.02)
    assert [event["reason"] for event in created_events()] == ["CoLocated"]
    await svc.stop()


async def test_sigterm_drops_no_request(tls_files, tmp_path, kmock):
    """Concurrent clients through a SIGTERM: every request they sent gets its answer; exit 0."""
    seed(kmock, fixture_cluster())
    slow = "/api/v1/namespaces/default/persistentvolumeclaims/slow-disk"
    kmock[f"get {slow}"] << (lambda: asyncio.sleep(3.0))  # outlasts the drain delay
    serving = await Serving.start(tls_files, "--kubeconfig", kubeconfig_for(tmp_path, str(kmock.url).rstrip("/")),
                                  "--drain-delay", "2.0", "--events", "off", env={"LOG_LEVEL": "info"})
    base, ops = serving.base, serving.ops

    results = {"ok": 0, "failed": []}
    sending = True
    context = ssl.create_default_context(cafile=str(tls_files["ca"]))

    async def client():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context),
                                         timeout=aiohttp.ClientTimeout(total=10)) as s:
            while sending:
                try:
                    async with s.post(f"{base}/mutate?timeout=10s", json=review(vm_pod())) as r:
                        assert r.status == 200 and (await r.json())["response"]["allowed"] is True
                        results["ok"] += 1
                except Exception as exc:
                    results["failed"].append(repr(exc))

    clients = [asyncio.create_task(client()) for _ in range(8)]
    await asyncio.sleep(0.5)
    serving.process.send_signal(signal.SIGTERM)
    signalled_at = time.monotonic()
    async with aiohttp.ClientSession() as s:
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            async with s.get(f"{ops}/readyz") as r:
                if r.status == 503:
                    break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("/readyz did not fail after SIGTERM")
    # The endpoint is removed while we drain: one slow request goes in flight, then clients stop sending.
    async def slow_request():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as s:
            async with s.post(f"{base}/mutate?timeout=10s", json=review(vm_pod("slow-disk"))) as r:
                return r.status, time.monotonic()

    slow = asyncio.create_task(slow_request())
    await asyncio.sleep(0.3)
    sending = False
    await asyncio.gather(*clients)
    status, answered_at = await slow
    assert status == 200  # in flight when the listener closed, still answered
    assert answered_at > signalled_at + 2.0  # answered after the drain delay, i.e. after the listener closed
    code = await serving.stop(signalled=True)
    assert code == 0
    assert results["failed"] == [] and results["ok"] > 10
    logged = serving.lines  # every line parsed as JSON
    assert any(entry["msg"] == "admission" and entry["decision"] == "pinned" for entry in logged)
    admission = next(e for e in logged if e["msg"] == "admission" and e["decision"] == "pinned")
    assert admission["vm"] == "vm1" and admission["disks"] == {"vm1-rootdisk": "node-b"} and admission["duration_ms"] > 0
    assert [e["msg"] for e in logged if e["msg"] in ("draining", "exiting")] == ["draining", "exiting"]


async def test_a_degraded_store_stays_ready_and_says_why(service, session):
    class Degraded(SnapshotStore):
        def degraded(self):
            return ["nodes: ApiError: 403"]

    svc, base, ops = await service(Degraded(fixture_cluster()))
    async with session.get(f"{ops}/readyz") as r:
        assert r.status == 200 and "degraded: nodes: ApiError: 403" in await r.text()


async def test_a_taken_port_is_a_clear_error_and_nothing_is_left_open(tls_files):
    import socket
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "webhook", "serve",
            "--state", STATE, "--host", "127.0.0.1", "--port", str(port), "--metrics-host", "127.0.0.1",
            "--metrics-port", "0", "--tls-cert-file", str(tls_files["cert"]), "--tls-key-file", str(tls_files["key"]),
            stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 20)
    assert proc.returncode == 2
    text = err.decode()
    assert "error:" in text and "Traceback" not in text and "Unclosed" not in text
