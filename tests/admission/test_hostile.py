"""Hostile input: pods shaped to make the rules' work grow (a tenant shapes its VM's affinity,
volumes and resources; any pod can send a review straight to the webhook's port). Each is
answered `allowed` over real HTTPS, its patch (if any) applies, at once, and a normal review sent
beside it keeps its answer and its time. The bounds are in docs/operations.md (Limits)."""
from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from typing import Any

import aiohttp
import jsonpatch
import pytest
from tests.support.kube import review, vm_pod

from webhook.admission import server
from webhook.process import listening

# Each answer is timed by the sender, parsing of the body included. Measured here: 1-100 ms (the
# largest: 45,000 claims, mostly JSON); the assertion leaves room for a loaded machine (before: up to 16.5 s).
BOUND = 1.0


def with_claims(n: int) -> dict[str, Any]:
    pod = vm_pod()
    pod["spec"]["volumes"] += [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": f"c{i}"}} for i in range(n)]
    return pod


def with_pod_terms(kind: str, n: int, expressions: int = 1) -> dict[str, Any]:
    pod = vm_pod()
    term = {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchExpressions": [
        {"key": f"k{j}", "operator": "DoesNotExist"} for j in range(expressions)]}}
    pod["spec"]["affinity"][kind] = {"requiredDuringSchedulingIgnoredDuringExecution": [dict(term) for _ in range(n)]}
    return pod


def with_spread(n: int) -> dict[str, Any]:
    pod = vm_pod()
    pod["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": f"a{i}"}}} for i in range(n)]
    return pod


def with_node_terms(n: int) -> dict[str, Any]:
    pod = vm_pod()
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [
        {"matchExpressions": [{"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}]}
        for _ in range(n)]
    return pod


def with_cpu(text: str) -> dict[str, Any]:
    pod = vm_pod()
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = text
    return pod


HOSTILE = {
    "20000-claims": (with_claims(20_000), "20004 volumes"),
    "45000-claims": (with_claims(45_000), "45004 volumes"),
    "1000-anti-affinity-terms": (with_pod_terms("podAntiAffinity", 1000), "1000 required podAntiAffinity terms"),
    "2000-expressions-in-one-term": (with_pod_terms("podAntiAffinity", 1, 2000), "2000 requirements"),
    "1000-affinity-terms": (with_pod_terms("podAffinity", 1000), "1000 required podAffinity terms"),
    "1000-spread-constraints": (with_spread(1000), "1000 topology spread constraints"),
    "20000-node-affinity-terms": (with_node_terms(20_000), "20000 required node-affinity terms"),
    "30000-digit-cpu": (with_cpu("1" * 30_000 + "x"), "cannot tell"),
    "200-unknown-claims": (with_claims(200), "not pinned"),
}


async def answered(session: aiohttp.ClientSession, base: str, pod: dict[str, Any]) -> tuple[dict[str, Any], float]:
    body = json.dumps(review(pod)).encode()
    started = time.monotonic()
    async with session.post(f"{base}/mutate?timeout=5s", data=body, headers={"Content-Type": "application/json"}) as r:
        assert r.status == 200
        envelope = await r.json()
    return envelope["response"], time.monotonic() - started


def applied(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return jsonpatch.apply_patch(pod, ops)


@pytest.mark.parametrize("pod, said", HOSTILE.values(), ids=HOSTILE.keys())
async def test_a_hostile_pod_is_answered_at_once_allowed_and_unpinned(https, pod, said):
    session, base = https
    response, seconds = await answered(session, base, pod)
    assert response["allowed"] is True and seconds < BOUND, seconds
    result = applied(pod, response)
    annotations = result["metadata"].get("annotations") or {}
    assert annotations.get("kubevirt-scheduler/decision") != "pinned"
    assert said in " ".join(response.get("warnings", [])) + annotations.get("kubevirt-scheduler/reason", "")
    assert len(response.get("warnings", [])) <= 11  # ten, and how many more


async def test_a_normal_review_beside_a_hostile_one_keeps_its_answer_and_its_time(https):
    session, base = https
    normal = vm_pod()
    alone = [await answered(session, base, normal) for _ in range(3)][-1][1]
    (hostile, _), (beside, seconds) = await asyncio.gather(
        answered(session, base, with_pod_terms("podAntiAffinity", 1000)), answered(session, base, normal))
    assert hostile["allowed"] and beside["allowed"]
    assert applied(normal, beside)["metadata"]["annotations"]["kubevirt-scheduler/decision"] == "pinned"
    assert seconds < alone + BOUND


async def test_a_body_over_the_limit_is_refused_whole(https):
    """60,000 claims: more than the apiserver ever sends (3 MiB): 413, nothing read."""
    session, base = https
    body = json.dumps(review(with_claims(60_000))).encode()
    assert len(body) > server.MAX_BODY
    async with session.post(f"{base}/mutate", data=body, headers={"Content-Type": "application/json"}) as r:
        assert r.status == 413


async def test_a_client_that_goes_on_sending_a_refused_body_is_cut_off(tls_files):
    """A body announced larger than any review is answered 413 unread; a client that keeps sending
    it anyway has its bytes dropped for `LINGER` seconds, then its connection is closed (not the
    10 s aiohttp would give it)."""
    import ssl

    from webhook.admission import tls
    from webhook.stores.snapshot import SnapshotStore
    from webhook.config import Settings

    runner = await listening.start(server.make_webhook(SnapshotStore([]), Settings()), "127.0.0.1", 0,
                                tls.build_context(str(tls_files["cert"]), str(tls_files["key"])))
    try:
        context = ssl.create_default_context(cafile=str(tls_files["ca"]))
        reader, writer = await asyncio.open_connection("127.0.0.1", listening.bound_port(runner), ssl=context,
                                                       server_hostname="localhost")
        size = server.MAX_BODY + 1
        writer.write(f"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {size}\r\n\r\n".encode())
        await writer.drain()
        assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"HTTP/1.1 413")
        answered = time.monotonic()

        async def trickle():  # a few bytes every 100 ms, never the whole body
            with contextlib.suppress(ConnectionError):
                while True:
                    writer.write(b" " * 64)
                    await writer.drain()
                    await asyncio.sleep(0.1)

        sending = asyncio.create_task(trickle())
        try:
            while await asyncio.wait_for(reader.read(65536), listening.LINGER + 3):
                pass  # the rest of the answer, then the end of the connection
        finally:
            sending.cancel()
            writer.close()
        assert time.monotonic() - answered < listening.LINGER + 1.5
    finally:
        await runner.cleanup()
