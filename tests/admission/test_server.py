"""The server over real HTTPS, with certificates made by the project's own code."""
import json
import ssl

import aiohttp
import pytest
from tests.support.stores import for_host
from tests.support.kube import FIXTURES, client_certificate, annotations, apply_valid, decode_patch, fixture_cluster, review, vm_pod

from webhook.admission import server, tls
from webhook.process import listening
from webhook.config import Settings
from webhook.stores.snapshot import SnapshotStore


async def test_fixture_review_over_https_pins_to_node_b(https):
    session, base = https
    body = json.loads((FIXTURES / "admission-review.json").read_text())
    async with session.post(f"{base}/mutate?timeout=10s", json=body) as response:
        assert response.status == 200
        envelope = await response.json()
    assert envelope["response"]["uid"] == body["request"]["uid"]
    assert envelope["response"]["allowed"] is True
    result = apply_valid(body["request"]["object"], decode_patch(envelope))
    assert annotations(result)["kubevirt-scheduler/node"] == "node-b"


async def test_only_post_to_the_admission_path_is_served(https):
    """The apiserver POSTs to the path of its clientConfig; anything else is no review."""
    session, base = https
    async with session.get(f"{base}/mutate") as response:
        assert (response.status, response.headers["Allow"]) == (405, "POST")
    async with session.post(f"{base}/validate", json=review(vm_pod())) as response:
        assert response.status == 404
    async with session.post(f"{base}/mutate", json=review(vm_pod())) as response:  # the connection still serves
        assert response.status == 200


async def test_large_review_is_accepted(https):
    """A pod near etcd's 1.5 MiB limit: over aiohttp's 1 MiB default, within what we take."""
    session, base = https
    pod = vm_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "BIG", "value": "x" * (1400 * 1024)}]
    async with session.post(f"{base}/mutate", json=review(pod)) as response:
        assert response.status == 200
        assert decode_patch(await response.json())


async def test_a_body_larger_than_any_review_is_refused_with_413(https):
    """No apiserver sends more than about 3 MiB: a larger body is refused before it is held."""
    session, base = https
    pod = vm_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "BIG", "value": "x" * (4 * 1024 * 1024)}]
    async with session.post(f"{base}/mutate", json=review(pod)) as response:
        assert response.status == 413
        assert "Maximum request body size" in await response.text()


async def test_a_body_that_trickles_in_is_answered_408_at_the_deadline(https):
    """A client holding a connection with a body it never finishes gets an answer when the
    request's own deadline passes, not the connection held for good."""
    import asyncio
    import time

    session, base = https

    async def trickle():
        yield b'{"apiVersion": "admission.k8s.io/v1", '
        await asyncio.sleep(30)
        yield b"}"

    started = time.monotonic()
    async with session.post(f"{base}/mutate?timeout=2s", data=trickle(),
                            headers={"Content-Type": "application/json"}) as response:
        assert response.status == 408
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("data, content_type, message", [
    (b"{not json", "application/json", "not valid JSON"),
    (b'{"kind": "Pod"}', "application/json", "expected apiVersion"),
    (b"[]", "application/json", "JSON object"),
    (json.dumps(review(vm_pod())).encode(), "text/plain", "Content-Type"),
], ids=["garbage", "not-a-review", "array", "content-type"])
async def test_malformed_requests_get_400_with_a_message(https, data, content_type, message):
    session, base = https
    async with session.post(f"{base}/mutate", data=data, headers={"Content-Type": content_type}) as response:
        assert response.status == 400
        assert message in (await response.json())["message"]


async def test_deadline_comes_from_the_timeout_query(tls_files, kmock):
    """An API that never answers: the apiserver's ?timeout=2s still gets an answer in time."""
    import asyncio
    import time

    from tests.support.stores import seed
    from webhook.cluster import client
    from webhook.stores.direct import ClusterStore

    seed(kmock, fixture_cluster())
    kmock["get /api/v1/namespaces/default/persistentvolumeclaims/vm1-rootdisk"] << (lambda: asyncio.sleep(30))
    store = ClusterStore(for_host(str(kmock.url).rstrip("/")))
    webhook = server.make_webhook(store, Settings())
    runner = await listening.start(webhook, "127.0.0.1", 0, tls.build_context(str(tls_files["cert"]), str(tls_files["key"])))
    client_ctx = ssl.create_default_context(cafile=str(tls_files["ca"]))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ctx)) as session:
            started = time.monotonic()
            url = f"https://localhost:{listening.bound_port(runner)}/mutate?timeout=2s"
            async with session.post(url, json=review(vm_pod())) as response:
                envelope = await response.json()
            elapsed = time.monotonic() - started
    finally:
        await runner.cleanup()
        await store.close()
    assert 1.0 < elapsed < 2.0  # used the budget the apiserver gave, and answered before it ran out
    assert envelope["response"]["allowed"] is True
    assert any("vm1-rootdisk" in w for w in envelope["response"]["warnings"])


async def test_client_certificate_is_required_with_a_client_ca(tls_files, tmp_path):
    client_ca, client_cert, client_key = client_certificate(tmp_path)
    context = tls.build_context(str(tls_files["cert"]), str(tls_files["key"]), str(client_ca))
    runner = await listening.start(server.make_webhook(SnapshotStore(fixture_cluster()), Settings()), "127.0.0.1", 0, context)
    url = f"https://localhost:{listening.bound_port(runner)}/mutate"
    try:
        anonymous = ssl.create_default_context(cafile=str(tls_files["ca"]))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=anonymous)) as session:
            with pytest.raises(aiohttp.ClientError):
                async with session.post(url, json=review(vm_pod())) as response:
                    await response.read()
        apiserver = ssl.create_default_context(cafile=str(tls_files["ca"]))
        apiserver.load_cert_chain(str(client_cert), str(client_key))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=apiserver)) as session:
            async with session.post(url, json=review(vm_pod())) as response:
                assert response.status == 200
                assert decode_patch(await response.json())
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("metadata", [[1], "x", 5, None], ids=["list", "string", "number", "null"])
async def test_pod_metadata_of_any_shape_is_answered_not_500(https, metadata):
    session, base = https
    pod = vm_pod()
    pod["metadata"] = metadata
    async with session.post(f"{base}/mutate", json=review(pod)) as response:
        assert response.status == 200
        assert (await response.json())["response"]["allowed"] is True


async def test_deeply_nested_body_is_a_400(https):
    session, base = https
    body = b"[" * 100_000 + b"]" * 100_000
    async with session.post(f"{base}/mutate", data=body, headers={"Content-Type": "application/json"}) as response:
        assert response.status == 400
        message = (await response.json())["message"]
        assert "depth limit" in message or "nested too deeply" in message


@pytest.mark.parametrize("query, seconds", [("", 10), ("?timeout=3s", 3), ("?timeout=5m", 30), ("?timeout=bogus", 10)])
def test_request_timeout(query, seconds):
    from aiohttp.test_utils import make_mocked_request

    request = make_mocked_request("POST", f"/mutate{query}")
    assert server.timeout_in(request.rel_url.raw_query_string, Settings().default_timeout) == seconds


@pytest.mark.parametrize(("query", "seconds"), [
    ("timeout=10s", 10.0), ("timeout=500ms", 0.5), ("timeout=1m", 30.0), ("timeout=1.5s", 1.5), ("timeout=2", 2.0),
    ("timeout=0m15s", 15.0), ("", 7.0), ("other=1", 7.0), ("timeout=10x", 7.0), ("timeout=s", 7.0),
    ("timeout=soon", 7.0), ("timeout=0s", 7.0), ("timeout=5s&timeout=9s", 5.0), ("timeout=1%30s", 10.0),
])
def test_the_review_timeout_is_the_apiservers_at_most_30_s(query, seconds):
    assert server.timeout_in(query, 7.0) == seconds
