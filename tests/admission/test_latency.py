"""A review's latency as its caller waits for it (`colocate_admission_latency_seconds`), over real
HTTPS: from its connection's accept (a kept connection, or one opened ahead and left idle: its
request's first byte) to the answer, as its sender measured it,
by kind of pod; the time before the handler runs is counted, the handler's own duration is not all."""
from __future__ import annotations

import asyncio
import contextlib
import json
import ssl

import pytest
from tests.support.kube import fixture_cluster, review, vm_pod

from kubefake import objects
from webhook import metrics
from webhook.admission import server, tls
from webhook.config import Settings
from webhook.process import listening
from webhook.stores.snapshot import SnapshotStore

WAIT = 0.4


@contextlib.asynccontextmanager
async def serving(tls_files):
    """The admission port as `serve` starts it (its connections noting arrivals for the handler); (port, client context)."""
    arrivals = listening.Arrivals()
    webhook = server.make_webhook(SnapshotStore(fixture_cluster()), Settings(), arrivals=arrivals)
    context = tls.build_context(str(tls_files["cert"]), str(tls_files["key"]))
    port = await listening.start(webhook, "127.0.0.1", 0, context, arrivals=arrivals)
    try:
        yield listening.bound_port(port), ssl.create_default_context(cafile=str(tls_files["ca"]))
    finally:
        await port.cleanup()
    assert not arrivals.busy_within(0.0)  # nothing kept of closed connections


def head(body: bytes) -> bytes:
    return (f"POST /mutate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()


async def status_of(reader: asyncio.StreamReader) -> int:
    status = int((await asyncio.wait_for(reader.readline(), 10)).split()[1])
    length = 0
    while (line := await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    await asyncio.wait_for(reader.readexactly(length), 10)
    return status


def observed(kind: str) -> tuple[float, float]:
    """(count, sum in seconds) of the latency histogram's series for `kind`, as /metrics shows it."""
    def value(suffix: str) -> float:
        return metrics.REGISTRY.get_sample_value(f"colocate_admission_latency_seconds_{suffix}", {"kind": kind}) or 0.0
    return value("count"), value("sum")


def handled() -> float:
    """The handler-to-answer durations' sum so far, every rule's."""
    return sum(metrics.REGISTRY.get_sample_value("colocate_admission_duration_seconds_sum", {"rule": rule}) or 0.0
               for rule in ("vm", "share-manager", "none"))


async def test_a_new_connection_is_counted_from_its_accept(tls_files):
    """A review sent on a new connection as soon as its handshake ends (as the apiserver sends one it
    dialed for it): counted from the accept, its handshake included, as its sender waited."""
    async with serving(tls_files) as (port, context):
        count, total = observed("vm")
        body = json.dumps(review(vm_pod(), uid="new")).encode()
        started = asyncio.get_running_loop().time()
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        writer.write(head(body) + body)
        assert await status_of(reader) == 200
        sent = asyncio.get_running_loop().time() - started
        writer.close()
    count_after, total_after = observed("vm")
    assert count_after == count + 1
    assert 0 < total_after - total <= sent


async def test_a_connection_opened_ahead_and_left_idle_is_counted_from_its_first_byte(tls_files):
    """Go's transport keeps a connection it dialed for a review that took another one freed meanwhile,
    and sends a later review on it seconds after: that review's wait is from its first byte, as its
    sender measured it, not from the accept (the idle time before is nobody's wait)."""
    async with serving(tls_files) as (port, context):
        (count, total), handler = observed("vm"), handled()
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        await asyncio.sleep(WAIT)
        body = json.dumps(review(vm_pod(), uid="late")).encode()
        started = asyncio.get_running_loop().time()
        writer.write(head(body) + body)
        assert await status_of(reader) == 200
        sent = asyncio.get_running_loop().time() - started
        writer.close()
    (count_after, total_after) = observed("vm")
    assert count_after == count + 1
    assert total_after - total <= sent < WAIT
    assert handled() - handler < WAIT / 2


async def test_a_slow_body_upload_is_counted(tls_files):
    """The headers at once, the body after a pause: the wait for the body is the caller's too."""
    async with serving(tls_files) as (port, context):
        count, total = observed("vm")
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        body = json.dumps(review(vm_pod(), uid="slow-body")).encode()
        writer.write(head(body) + body[:100])
        await asyncio.sleep(WAIT)
        writer.write(body[100:])
        assert await status_of(reader) == 200
        writer.close()
    count_after, total_after = observed("vm")
    assert (count_after, total_after - total >= WAIT) == (count + 1, True)


async def test_a_kept_connection_counts_each_request_from_its_first_byte(tls_files):
    """The second review on a connection kept open is counted from when it was sent, not from the
    connection's accept: the idle time between the two is nobody's wait."""
    async with serving(tls_files) as (port, context):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        body = json.dumps(review(vm_pod(), uid="first")).encode()
        writer.write(head(body) + body)
        assert await status_of(reader) == 200
        await asyncio.sleep(WAIT)
        count, total = observed("vm")
        writer.write(head(body) + body)
        assert await status_of(reader) == 200
        writer.close()
    count_after, total_after = observed("vm")
    assert count_after == count + 1
    assert total_after - total < WAIT / 2


@pytest.mark.parametrize(("pod", "namespace", "kind"), [
    (objects.share_manager_pod("pvc-unused"), objects.LONGHORN_NS, "share-manager"),
    ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": {"containers": []}}, "default", "other"),
])
async def test_each_kind_of_pod_is_counted_under_its_own(tls_files, pod, namespace, kind):
    async with serving(tls_files) as (port, context):
        count, _ = observed(kind)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        body = json.dumps(review(pod, namespace=namespace, uid=kind)).encode()
        writer.write(head(body) + body)
        assert await status_of(reader) == 200
        writer.close()
    assert observed(kind)[0] == count + 1


async def test_a_request_refused_before_a_review_does_not_start_the_next_reviews_clock(tls_files):
    """A request to another path (404) on a kept connection, then a pause, then a review: the
    review is counted from its own first byte."""
    async with serving(tls_files) as (port, context):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        writer.write(b"GET /nothing HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert await status_of(reader) == 404
        await asyncio.sleep(WAIT)
        count, total = observed("vm")
        body = json.dumps(review(vm_pod(), uid="after-404")).encode()
        writer.write(head(body) + body)
        assert await status_of(reader) == 200
        writer.close()
    count_after, total_after = observed("vm")
    assert count_after == count + 1 and total_after - total < WAIT / 2
