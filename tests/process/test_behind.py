"""The share-manager webhook's port, behind the VM starts' (listening.py): its connections accepted at
once, their TLS handshakes begun after the VM starts', a few at a time, none held longer than
BEHIND_SECONDS, and the wait counted in the review's latency."""
from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time

from tests.support.kube import answer_of, fixture_cluster, request, review, vm_pod

from webhook import metrics
from webhook.admission import server, tls
from webhook.config import Settings
from webhook.process import listening
from webhook.stores.snapshot import SnapshotStore


@contextlib.asynccontextmanager
async def two_ports(tls_files):
    """The admission port and the port behind it, as `serve --share-manager-port` starts them; (first
    port, the port behind, the client's context)."""
    arrivals = listening.Arrivals()
    webhook = server.make_webhook(SnapshotStore(fixture_cluster()), Settings(), arrivals=arrivals)
    context = tls.build_context(str(tls_files["cert"]), str(tls_files["key"]))
    port = await listening.start(webhook, "127.0.0.1", 0, context, arrivals=arrivals, behind=0)
    try:
        yield (listening.bound_port(port), listening.bound_port(port, behind=True),
               ssl.create_default_context(cafile=str(tls_files["ca"])))
    finally:
        await port.cleanup()


def handshake(port: int, context: ssl.SSLContext) -> asyncio.Task:
    """A TLS connection being opened: done once the server has ended its handshake."""
    return asyncio.ensure_future(asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost"))


async def decided(opened: asyncio.Task, uid: str) -> bool:
    """A VM start's review sent on the opened connection: whether its answer pins it (a patch)."""
    return await pinned_on(*await opened, uid)


async def pinned_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, uid: str) -> bool:
    writer.write(request(json.dumps(review(vm_pod(), uid=uid)).encode()))
    status, body = await answer_of(reader, 10)
    writer.close()
    answer = json.loads(body)
    assert status == 200 and answer["response"]["uid"] == uid and answer["response"]["allowed"]
    return "patch" in answer["response"]


def waited() -> float:
    """The latency histogram's sum for VM reviews so far (every review here is one)."""
    return metrics.REGISTRY.get_sample_value("colocate_admission_latency_seconds_sum", {"kind": "vm"}) or 0.0


async def test_a_share_managers_handshake_waits_for_a_vm_starts_under_way_at_most_behind_seconds(tls_files, monkeypatch):
    """A VM start's handshake under way (here one whose client never sends its ClientHello) holds the
    share-managers' port's from beginning; a VM start beside it is answered at once; the share-manager
    begins once it has waited BEHIND_SECONDS, and its wait is in the latency it is counted with."""
    monkeypatch.setattr(listening, "BEHIND_SECONDS", 1.0)
    async with two_ports(tls_files) as (first, behind, context):
        _, silent = await asyncio.open_connection("127.0.0.1", first)  # in its handshake until it times out (10 s)
        await asyncio.sleep(0.1)
        before, started = waited(), time.monotonic()
        share_manager = handshake(behind, context)
        assert await decided(handshake(first, context), "vm-start") is True
        await asyncio.sleep(0.5)
        assert not share_manager.done()  # held: a VM start's handshake is under way
        assert await decided(share_manager, "share-manager") is True
        took = time.monotonic() - started
        silent.close()
    assert 1.0 <= took < 5.0
    assert waited() - before >= 1.0  # counted from its accept, not from its handshake's beginning


async def test_a_vm_starts_review_not_answered_yet_holds_the_share_managers_until_it_is(tls_files, monkeypatch):
    """Past its handshake, a VM start's connection still holds them until its review is answered (its
    request comes a moment after the handshake; a wave of handshakes begun then would stand before it),
    and they begin as soon as it is, not BEHIND_SECONDS later."""
    monkeypatch.setattr(listening, "BEHIND_SECONDS", 5.0)
    async with two_ports(tls_files) as (first, behind, context):
        reader, writer = await asyncio.open_connection("127.0.0.1", first, ssl=context, server_hostname="localhost")
        share_manager = handshake(behind, context)
        await asyncio.sleep(0.3)
        assert not share_manager.done()  # the VM start's review not sent yet
        started = time.monotonic()
        assert await pinned_on(reader, writer, "vm-start") is True
        assert await decided(share_manager, "share-manager") is True
        assert time.monotonic() - started < 2.0


async def test_the_share_managers_port_begins_its_handshakes_a_few_at_a_time(tls_files, monkeypatch):
    """With BEHIND_AT_ONCE of its handshakes under way, another waits for one of them to end, not for
    BEHIND_SECONDS; the first port's go on meanwhile."""
    monkeypatch.setattr(listening, "BEHIND_AT_ONCE", 2)
    monkeypatch.setattr(listening, "BEHIND_SECONDS", 5.0)
    async with two_ports(tls_files) as (first, behind, context):
        silent = [(await asyncio.open_connection("127.0.0.1", behind))[1] for _ in range(2)]
        await asyncio.sleep(0.1)
        third = handshake(behind, context)
        assert await decided(handshake(first, context), "vm-start") is True
        await asyncio.sleep(0.3)
        assert not third.done()  # two under way already
        started = time.monotonic()
        silent[0].close()  # its handshake ends: the third begins
        assert await decided(third, "third") is True
        assert time.monotonic() - started < 2.0
        silent[1].close()


async def test_with_nothing_ahead_the_share_managers_are_answered_at_once(tls_files):
    """No VM start under way: the port behind answers as the first one does, a burst of them together."""
    async with two_ports(tls_files) as (_, behind, context):
        started = time.monotonic()
        assert await asyncio.gather(*(decided(handshake(behind, context), f"sm-{i}") for i in range(40))) == \
            [True] * 40
        assert time.monotonic() - started < 5.0
