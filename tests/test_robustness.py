"""Garbage in, never a 5xx out: property-based tests over mutated AdmissionReviews."""
import asyncio
import copy
import json
import ssl

import aiohttp
import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.kube import FIXTURES, LONGHORN_NS, decode_patch, fixture_cluster, paths, review, share_manager_pod, vm_pod

from webhook.admission import server, tls
from webhook.process import listening
from webhook.admission.review import BadReview, build_response, parse_review
from webhook.config import Settings
from webhook.rules.shared.alone import Alone
from webhook.deadline import Deadline
from webhook.admission.admit import admit
from webhook.stores.snapshot import SnapshotStore

BASE = json.loads((FIXTURES / "admission-review.json").read_text())
STORE = SnapshotStore(fixture_cluster())

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=10,
)


def mutate(draw, document, changes, values):
    """Remove, or replace by one of `values`, what `changes` paths of `document` lead to, in place."""
    all_paths = [p for p in paths(document) if p]
    for _ in range(changes):
        path = draw(st.sampled_from(all_paths))
        parent = document
        try:
            for step in path[:-1]:
                parent = parent[step]
            last = path[-1]
            if not (isinstance(parent, dict) and isinstance(last, str)
                    or isinstance(parent, list) and isinstance(last, int) and last < len(parent)):
                continue  # an earlier change made this path lead elsewhere (JSON: no int keys)
            if draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(last, None)
            else:
                parent[last] = draw(values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed this path
    return document


@st.composite
def mutated_reviews(draw):
    return mutate(draw, copy.deepcopy(BASE), draw(st.integers(1, 4)), json_values)


async def respond(body):
    try:
        request = parse_review(body)
    except BadReview:
        return None
    outcome = await admit(request, STORE, Settings(), Deadline.after(5, 0.5))
    return request, outcome, build_response(request.uid, outcome)


def assert_allowed_with_a_patch_that_applies(request, outcome, envelope):
    response = envelope["response"]
    assert outcome.skipped is not Alone.INTERNAL_ERROR, outcome  # the rules coped: no crash
    assert response["allowed"] is True and response["uid"] == request.uid
    assert ("patch" in response) == ("patchType" in response)
    assert all(isinstance(w, str) and len(w) < 120 for w in response.get("warnings", []))
    ops = decode_patch(envelope)
    if ops:
        jsonpatch.apply_patch(request.object, ops)  # every patch applies to the object it was made for


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=mutated_reviews())
def test_any_review_is_a_clean_400_or_allowed_with_a_patch_that_applies(body):
    result = asyncio.run(respond(body))
    if result is None:
        return  # the envelope is malformed: the server answers 400 with the reason
    assert_allowed_with_a_patch_that_applies(*result)


# Pods that reach the rules: the launcher pod and a share-manager pod of the fixture cluster, on its
# disk or not, with some of their fields removed or replaced by any JSON (as orjson reads it).
small_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=10,
)
CLAIMS = st.lists(st.sampled_from(["vm1-rootdisk", "missing-claim", ""]), max_size=3)
VOLUMES = [v["spec"]["csi"]["volumeHandle"] for v in fixture_cluster() if v["kind"] == "PersistentVolume"]


@st.composite
def pods(draw):
    if draw(st.booleans()):
        pod, namespace = vm_pod(*draw(CLAIMS)), BASE["request"]["namespace"]
    else:
        pod, namespace = share_manager_pod(draw(st.sampled_from([*VOLUMES, "other-volume"]))), LONGHORN_NS
    mutate(draw, pod, draw(st.integers(0, 4)), small_json)
    return pod, namespace


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod_in=pods())
def test_any_pod_in_a_valid_review_is_allowed_with_a_patch_that_applies(pod_in):
    pod, namespace = pod_in
    result = asyncio.run(respond(orjson.loads(orjson.dumps(review(pod, namespace=namespace)))))
    assert result is not None  # a valid envelope, whatever the pod: the rules answer it
    assert_allowed_with_a_patch_that_applies(*result)


@pytest.fixture(scope="module")
def https_server(tls_files):
    """One real HTTPS server for the whole module, on its own event loop thread."""
    import threading

    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder = {}

    async def main():
        webhook = server.make_webhook(STORE, Settings())
        holder["runner"] = await listening.start(webhook, "127.0.0.1", 0, tls.build_context(str(tls_files["cert"]), str(tls_files["key"])))
        holder["url"] = f"https://localhost:{listening.bound_port(holder['runner'])}/mutate?timeout=5s"
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(main()), loop.run_forever()), daemon=True)
    thread.start()
    started.wait(10)
    yield holder["url"]
    asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(mutated_reviews().map(lambda r: json.dumps(r).encode()),
                      st.binary(max_size=200),
                      json_values.map(lambda v: json.dumps(v).encode())))
def test_over_https_every_answer_is_200_or_400_with_no_traceback(https_server, tls_files, body):
    async def post():
        context = ssl.create_default_context(cafile=str(tls_files["ca"]))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            async with session.post(https_server, data=body, headers={"Content-Type": "application/json"}) as r:
                return r.status, await r.text()

    status, text = asyncio.run(post())
    assert status in (200, 400), text
    assert "Traceback" not in text
    document = json.loads(text)
    if status == 400:
        assert document["message"]
    else:
        assert document["response"]["allowed"] is True


async def test_body_over_the_limit_is_refused_cleanly(tls_files):
    webhook = server.make_webhook(STORE, Settings())
    runner = await listening.start(webhook, "127.0.0.1", 0, tls.build_context(str(tls_files["cert"]), str(tls_files["key"])))
    context = ssl.create_default_context(cafile=str(tls_files["ca"]))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            body = b'{"pad": "' + b"x" * (9 * 1024 * 1024) + b'"}'
            async with session.post(f"https://localhost:{listening.bound_port(runner)}/mutate", data=body,
                                    headers={"Content-Type": "application/json"}) as r:
                assert r.status == 413
    finally:
        await runner.cleanup()
