"""The admission port's transport, bounded (guard.py): slow headers, slow bodies, too many
connections; and `serve`'s memory and /healthz while clients hold connections with unfinished
bodies."""
from __future__ import annotations

import asyncio
import json
import ssl
import time
from pathlib import Path

import aiohttp
import pytest
from tests.support.kube import Serving, fixture_cluster, review, vm_pod

from webhook.admission import guard, server, tls
from webhook.cluster.snapshot import SnapshotStore
from webhook.config import Settings


@pytest.fixture
async def guarded(tls_files):
    """The webhook's app behind a guard of 3 connections and 0.5 s for the headers."""
    app = server.make_app(SnapshotStore(fixture_cluster()), Settings())
    runner = aiohttp.web.AppRunner(app, access_log=None)
    await runner.setup()
    site = guard.GuardedSite(runner, "127.0.0.1", 0, ssl_context=tls.build_context(str(tls_files["cert"]), str(tls_files["key"])),
                             guard=guard.Guard(runner.server, max_connections=3, header_seconds=0.5))
    await site.start()
    context = ssl.create_default_context(cafile=str(tls_files["ca"]))
    yield server.bound_port(runner), context
    await runner.cleanup()


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), seconds) == b""
    except (ConnectionError, ssl.SSLError):
        return True


async def test_a_client_that_never_finishes_its_headers_is_closed(guarded):
    port, context = guarded
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    writer.write(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n")  # and nothing more
    await writer.drain()
    started = time.monotonic()
    assert await closed_within(reader, 5)
    assert time.monotonic() - started < 3
    writer.close()


async def test_connections_beyond_the_cap_are_closed_and_the_others_served(guarded):
    port, context = guarded
    held = [await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost") for _ in range(3)]
    extra_reader, extra_writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost")
    assert await closed_within(extra_reader, 2)
    # One of the three held sends a whole review: answered.
    reader, writer = held[0]
    body = json.dumps(review(vm_pod())).encode()
    writer.write(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), 5)
    assert status.startswith(b"HTTP/1.1 200")
    for _, w in [*held, (extra_reader, extra_writer)]:
        w.close()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_serve_keeps_within_its_memory_limit_and_answers_healthz_while_clients_hold_bodies(tls_files):
    """64 connections (the cap) each send 3 MiB of a body they never finish, and more knock:
    `serve` stays within the Deployment's 512 Mi, /healthz answers throughout, and the bodies
    are let go at the request's deadline."""
    from tests.support.kube import scrape

    from tests.support.kube import FIXTURES

    serving = await Serving.start(tls_files, "--state", str(FIXTURES / "longhorn-rwx.yaml"), "--keep", "off")
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
