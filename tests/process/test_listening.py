"""The admission port's transport, bounded (listening.py, budget.py): slow headers are closed, slow
bodies answered 408; no connection is closed for being one too many, and bodies beyond the
budget wait unread; `serve`'s memory and /healthz while clients hold connections with unfinished
bodies."""
from __future__ import annotations

import asyncio
import contextlib
import json
import re
import select
import socket
import ssl
import time
from pathlib import Path

import aiohttp
import pytest
from tests.support.kube import (Serving, annotations, answer_of, apply_valid, decode_patch, fixture_cluster, request,
                                review, vm_pod)

from webhook.admission import server, tls
from webhook.process import listening
from webhook.stores.snapshot import SnapshotStore
from webhook.config import Settings


@contextlib.asynccontextmanager
async def port_of(tls_files):
    """The webhook's admission port listening (listening.start), on a free port."""
    webhook = server.make_webhook(SnapshotStore(fixture_cluster()), Settings())
    context = tls.build_context(str(tls_files["cert"]), str(tls_files["key"]))
    port = await listening.start(webhook, "127.0.0.1", 0, context)
    try:
        yield listening.bound_port(port), port, ssl.create_default_context(cafile=str(tls_files["ca"]))
    finally:
        await port.cleanup()


@pytest.fixture
async def guarded(tls_files, monkeypatch):
    """The webhook's admission port behind a guard of 0.5 s for the headers."""
    monkeypatch.setattr(listening, "HEADER_SECONDS", 0.5)
    async with port_of(tls_files) as (port, _, context):
        yield port, context


@pytest.fixture
async def handshaking(tls_files, monkeypatch):
    """The webhook's admission port with 0.5 s for each TLS handshake from its accept."""
    monkeypatch.setattr(listening, "HANDSHAKE_SECONDS", 0.5)
    async with port_of(tls_files) as (port, _, context):
        yield port, context


async def test_a_client_that_never_sends_its_clienthello_is_closed_after_the_handshake_time(handshaking):
    """asyncio's own TLS server closes it; a review on another connection is answered meanwhile."""
    port, context = handshaking
    silent_reader, silent = await asyncio.open_connection("127.0.0.1", port)  # and no TLS from it
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    writer.write(request(json.dumps(review(vm_pod(), uid="meanwhile")).encode()))
    status, body = await answer_of(reader)
    assert status == 200 and json.loads(body)["response"]["uid"] == "meanwhile"
    assert await closed_within(silent_reader, 5)
    assert time.monotonic() - started < 3
    writer.close()
    silent.close()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), seconds) == b""
    except (ConnectionError, ssl.SSLError):
        return True


class Counting(listening.Guarded):
    """A connection's protocol that counts the connections accepted (the port makes it at the accept)."""

    accepted = 0

    def __init__(self, *args) -> None:
        Counting.accepted += 1
        super().__init__(*args)


def test_a_burst_of_connections_is_accepted_at_once_while_the_loop_is_held_in_slices(tls_files, monkeypatch):
    """In a drain, the share-managers hold `serve`'s event loop (uvloop, as in production) in slices
    of 2 ms; the burst's new connections are each accepted at the next turn of the loop, not one a
    turn (uvloop's own server took 250 ms to accept 105 that way, the apiserver's handshakes and
    the VM reviews behind them)."""
    from webhook.process.loop import new_event_loop

    async def main() -> int:
        webhook = server.make_webhook(SnapshotStore(fixture_cluster()), Settings())
        monkeypatch.setattr(listening, "Guarded", Counting)
        context = tls.build_context(str(tls_files["cert"]), str(tls_files["key"]))
        port = await listening.start(webhook, "127.0.0.1", 0, context)
        clients = []
        try:
            # The kernel completes each connection in the port's backlog, accepted or not.
            clients = [socket.create_connection(("127.0.0.1", listening.bound_port(port))) for _ in range(100)]
            for _ in range(5):  # five slices of work, the loop given back after each
                held = time.monotonic() + 0.002
                while time.monotonic() < held:
                    pass
                await asyncio.sleep(0)
            return Counting.accepted
        finally:
            for client in clients:
                client.close()
            await port.cleanup()

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        assert runner.run(main()) == 100


async def test_a_burst_of_300_new_connections_is_connected_at_once_while_the_loop_is_held():
    """A drain's reviews come each on a new connection, a few hundred at once, while the loop is busy:
    the kernel completes every one of them at once, none dropped to be tried again a second later."""
    port = await listening.start(aiohttp.web.Application(), "127.0.0.1", 0, None)
    clients = [socket.socket() for _ in range(300)]
    try:
        for client in clients:
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", listening.bound_port(port)))
        waiting, held = set(clients), time.monotonic() + 0.8
        while waiting and time.monotonic() < held:  # the loop held meanwhile: nothing is accepted
            waiting -= set(select.select([], list(waiting), [], 0.05)[1])
        assert not waiting, f"{len(waiting)} of 300 not connected within 0.8 s"
    finally:
        for client in clients:
            client.close()
        await port.cleanup()


class Exhausted(socket.socket):
    """A listening socket whose first accept fails as it does when the process is out of descriptors."""

    failures = 1

    def accept(self):
        if self.failures:
            self.failures -= 1
            raise OSError(24, "Too many open files")
        return super().accept()


async def test_accepting_pauses_when_out_of_descriptors_and_then_goes_on(tls_files, monkeypatch, caplog):
    """As asyncio's own server: said once, accepting paused (not a loop spinning on a readable
    socket), and the waiting connection accepted and answered once the pause is over."""
    monkeypatch.setattr(listening, "ACCEPT_PAUSE", 0.2)
    listening_socket = Exhausted(socket.AF_INET, socket.SOCK_STREAM)
    listening_socket.bind(("127.0.0.1", 0))
    listening_socket.listen(8)
    listening_socket.setblocking(False)
    monkeypatch.setattr(listening, "bind", lambda host, port: [listening_socket])
    async with port_of(tls_files) as (port, _, context):
        started = time.monotonic()
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        waited = time.monotonic() - started
        writer.write(request(json.dumps(review(vm_pod(), uid="after-the-pause")).encode()))
        status, body = await answer_of(reader)
        writer.close()
    assert status == 200 and json.loads(body)["response"]["uid"] == "after-the-pause"
    assert waited >= 0.15
    assert [r.message for r in caplog.records if "accepting a connection failed" in r.message] == [
        "accepting a connection failed ([Errno 24] Too many open files): paused for 0.2 s"]


async def test_a_client_that_never_finishes_its_headers_is_closed(guarded):
    port, context = guarded
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    writer.write(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n")  # and nothing more
    await writer.drain()
    started = time.monotonic()
    assert await closed_within(reader, 5)
    assert time.monotonic() - started < 3
    writer.close()


async def test_300_connections_at_once_are_each_answered_with_a_decision_and_none_closed(tls_files):
    """As kube-apiserver calls in a drain storm (HTTP/1.1 only: one connection per review in
    flight, three apiservers of an HA control plane together): 300 connections open at once,
    each sends one valid review; all 300 answered 200 with the decision (a pin), none closed."""
    from tests.support.kube import FIXTURES

    serving = await Serving.start(tls_files, "--state", str(FIXTURES / "longhorn-rwx.yaml"),
                                  "--events", "off")
    port = int(serving.base.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(tls_files["ca"]))
    opened = []
    try:
        opened = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                                server_hostname="localhost") for _ in range(300)))
        for i, (_, writer) in enumerate(opened):
            writer.write(request(json.dumps(review(vm_pod(), uid=f"storm-{i}")).encode()))
        await asyncio.gather(*(writer.drain() for _, writer in opened))
        answers = await asyncio.gather(*(answer_of(reader) for reader, _ in opened))
    finally:
        for _, writer in opened:
            writer.close()
        await serving.stop()
    assert [status for status, _ in answers] == [200] * 300
    envelopes = [json.loads(body) for _, body in answers]
    assert [e["response"]["uid"] for e in envelopes] == [f"storm-{i}" for i in range(300)]
    decisions = {annotations(apply_valid(vm_pod(), decode_patch(e))).get("kubevirt-scheduler/decision")
                 for e in envelopes}
    assert decisions == {"pinned"}, decisions


async def test_a_body_beyond_the_budget_waits_unread_and_is_answered_once_room_frees(tls_files):
    """--body-budget 4 (MiB): one client holds 3 MiB of a body it has not finished; a 1.5 MiB review
    that comes next does not fit, waits (the gauge says so, its connection stays open) and is
    answered as soon as the first body is done and answered."""
    from tests.support.kube import FIXTURES, scrape

    serving = await Serving.start(tls_files, "--state", str(FIXTURES / "longhorn-rwx.yaml"),
                                  "--events", "off", "--body-budget", "4")
    port = int(serving.base.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(tls_files["ca"]))

    async def waiting() -> float:
        _, text = await scrape(f"{serving.ops}/metrics")
        return float(re.search(r"^colocate_admission_requests_waiting (\S+)$", text, re.M).group(1))

    try:
        first_reader, first = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        large = b"x" * (3 * 1024 * 1024 - 1)
        first.write(request(large)[:-1])  # all but its last byte
        await first.drain()
        pod = vm_pod()
        pod["metadata"]["annotations"]["example.com/padding"] = "p" * (1536 * 1024)
        second_reader, second = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        second.write(request(json.dumps(review(pod, uid="waits")).encode()))
        await second.drain()
        for _ in range(100):
            if await waiting() == 1:
                break
            await asyncio.sleep(0.05)
        assert await waiting() == 1
        assert not second_reader.at_eof()
        first.write(large[-1:])  # the first body is done: answered (it is no review), its room freed
        await first.drain()
        assert (await answer_of(first_reader))[0] == 400
        status, body = await answer_of(second_reader)
        assert status == 200 and json.loads(body)["response"]["uid"] == "waits"
        assert await waiting() == 0
        first.close()
        second.close()
    finally:
        await serving.stop()


async def test_a_body_that_finds_no_room_before_its_deadline_is_answered_503_unread(tls_files):
    """The apiserver stops waiting at its timeout: a review still waiting for room then is answered
    503 (failurePolicy Ignore lets the pod in), counted, and its connection closed."""
    from tests.support.kube import FIXTURES, scrape

    serving = await Serving.start(tls_files, "--state", str(FIXTURES / "longhorn-rwx.yaml"),
                                  "--events", "off", "--body-budget", "4")
    port = int(serving.base.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(tls_files["ca"]))
    try:
        _, first = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        first.write(request(b"x" * (3 * 1024 * 1024 - 1), "20s")[:-1])
        await first.drain()
        pod = vm_pod()
        pod["metadata"]["annotations"]["example.com/padding"] = "p" * (1536 * 1024)
        reader, second = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
        second.write(request(json.dumps(review(pod)).encode(), "3s"))
        started = time.monotonic()
        status, body = await answer_of(reader)
        assert status == 503 and b"no room for a body" in body, body
        assert 1.5 <= time.monotonic() - started < 3.5  # its deadline: 3 s less the 1 s margin
        assert await closed_within(reader, 5)
        _, text = await scrape(f"{serving.ops}/metrics")
        assert "colocate_admission_bodies_turned_away_total 1.0" in text
        first.close()
        second.close()
    finally:
        await serving.stop()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_serve_keeps_within_its_memory_limit_and_answers_healthz_while_clients_hold_bodies(tls_files):
    """70 connections each send 3 MiB of a body they never finish: 64 fit the default budget
    (192 MiB) and are read, the others wait unread; `serve` stays within the Deployment's 512 Mi,
    /healthz answers throughout, and the bodies are let go at the request's deadline."""
    from tests.support.kube import scrape

    from tests.support.kube import FIXTURES

    serving = await Serving.start(tls_files, "--state", str(FIXTURES / "longhorn-rwx.yaml"))
    port = int(serving.base.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(tls_files["ca"]))
    chunk = b"x" * (1024 * 1024)
    held = []
    try:
        for _ in range(70):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
            writer.write(b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {3 * len(chunk) - 1}\r\n\r\n".encode())
            for _ in range(3):
                writer.write(chunk[:-2] if _ == 2 else chunk)  # all but the last byte: never finished
            held.append((reader, writer))
        await asyncio.gather(*(w.drain() for _, w in held), return_exceptions=True)
        for _ in range(10):
            status, _ = await scrape(f"{serving.ops}/healthz")
            assert status == 200
            assert rss_mib(serving.process.pid) < 512
            await asyncio.sleep(0.3)
        # At the request's deadline (10 s less the 1 s margin) each is answered 408.
        reader, _ = held[0]
        line = await asyncio.wait_for(reader.readline(), 15)
        assert line.startswith(b"HTTP/1.1 408"), line
    finally:
        for _, writer in held:
            writer.close()
        await serving.stop()


def test_arrivals_are_busy_while_a_request_is_in_flight_and_a_while_after_its_answer():
    import time as clock

    arrivals, connection = listening.Arrivals(), object()
    assert not arrivals.busy_within(0.1)  # nothing answered yet
    arrivals.connected(connection, clock.monotonic())
    assert arrivals.busy_within(0.0)
    arrivals.answered(connection)
    assert arrivals.busy_within(0.1) and not arrivals.busy_within(0.0)
    clock.sleep(0.12)
    assert not arrivals.busy_within(0.1)
    arrivals.answered(connection)  # a connection answered twice counts once
    assert not arrivals.busy_within(0.1)
