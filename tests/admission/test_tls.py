"""Certificate hot reload: the real server over HTTPS on loopback, its files swapped under it."""
import asyncio
import logging
import os
import ssl

import pytest
from tests.support.kube import fixture_cluster

from webhook.admission import pem, server, tls
from webhook.process import listening
from webhook.tools import certs
from webhook.config import Settings
from webhook.stores.snapshot import SnapshotStore

NAMES = ["localhost", "127.0.0.1"]
INTERVAL = 0.05  # poll fast in tests; the server default is tls.DEFAULT_INTERVAL


def new_pair(directory, names=NAMES):
    bundle = certs.generate(names, days=2)
    directory.mkdir(parents=True, exist_ok=True)
    certs.write(bundle, directory)
    return bundle


def client_context(*bundles):
    context = ssl.create_default_context(cadata="".join(b.ca_cert.decode() for b in bundles))
    return context


async def handshake(port, context, server_hostname="localhost"):
    """A fresh TLS connection; returns (served certificate as PEM, reader, writer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=server_hostname)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    return ssl.DER_cert_to_PEM_cert(der).encode(), reader, writer


def same_cert(pem_a, pem_b):
    return ssl.PEM_cert_to_DER_cert(pem_a.decode()) == ssl.PEM_cert_to_DER_cert(pem_b.decode())


async def answered(reader, writer):
    """Status of one HTTP request over this TLS connection (GET on the admission path: 405)."""
    writer.write(b"GET /mutate HTTP/1.1\r\nHost: localhost\r\n\r\n")
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), 5)
    return status.split()[1]


async def close(writer):
    writer.close()
    try:
        await writer.wait_closed()
    except (ssl.SSLError, ConnectionError):
        pass


async def eventually(check, timeout=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await check()
        if result or loop.time() > deadline:
            return result
        await asyncio.sleep(INTERVAL)


@pytest.fixture
async def served(tmp_path):
    """The webhook's admission port on 127.0.0.1 with a reloading context over tmp_path/tls.{crt,key}."""
    first = new_pair(tmp_path)
    reloader = tls.ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", interval=INTERVAL)
    webhook = server.make_webhook(SnapshotStore(fixture_cluster()), Settings())
    runner = await listening.start(webhook, "127.0.0.1", 0, reloader.context)
    reloader.start()
    yield tmp_path, first, listening.bound_port(runner)
    await reloader.stop()
    await runner.cleanup()


async def test_new_handshakes_get_the_new_certificate_open_connections_stay(served):
    directory, first, port = served
    old_cert, old_reader, old_writer = await handshake(port, client_context(first))
    assert same_cert(old_cert, first.cert)

    second = new_pair(directory)  # what cert-manager or the kubelet does to the mounted files
    trusting_both = client_context(first, second)

    async def serves_second():
        pem, _, writer = await handshake(port, trusting_both)
        await close(writer)
        return same_cert(pem, second.cert)

    assert await eventually(serves_second)
    # Without SNI (clients dialling an IP send none), the new certificate too.
    pem, _, writer = await handshake(port, trusting_both, server_hostname="127.0.0.1")
    await close(writer)
    assert same_cert(pem, second.cert)
    # The connection opened before the swap was not dropped and still answers.
    assert await answered(old_reader, old_writer) == b"405"
    await close(old_writer)


@pytest.mark.parametrize("breakage", ["mismatched", "garbage", "key-missing"])
async def test_a_broken_pair_is_ignored_with_an_error_and_serving_goes_on(served, caplog, breakage):
    directory, first, port = served
    caplog.set_level(logging.INFO, logger="webhook.tls")
    if breakage == "mismatched":
        other = certs.generate(NAMES, days=2)
        (directory / "tls.crt").write_bytes(other.cert)  # a certificate without its key
    elif breakage == "garbage":
        (directory / "tls.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64\n")
    else:
        os.remove(directory / "tls.key")

    async def error_logged():
        return any(r.levelno == logging.ERROR and "ignored" in r.getMessage() for r in caplog.records)

    assert await eventually(error_logged)
    pem, _, writer = await handshake(port, client_context(first))
    assert same_cert(pem, first.cert)
    assert await answered(_, writer) == b"405"
    await close(writer)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    await asyncio.sleep(10 * INTERVAL)
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == len(errors) == 1  # logged once

    # A good pair afterwards is picked up: one bad update does not stop the watcher.
    third = new_pair(directory)

    async def serves_third():
        pem, _, writer = await handshake(port, client_context(first, third))
        await close(writer)
        return same_cert(pem, third.cert)

    assert await eventually(serves_third)


async def test_secret_volume_symlink_swap_with_unchanged_mtimes_is_seen(tmp_path):
    """The kubelet's atomic writer: files are links into ..data, which is re-pointed at once."""
    first_dir, second_dir = tmp_path / "..2026_01_01", tmp_path / "..2026_01_02"
    first = new_pair(first_dir)
    second = new_pair(second_dir)
    for path in (second_dir / "tls.crt", second_dir / "tls.key"):  # same mtimes as the old files
        stat = (first_dir / path.name).stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    os.symlink(first_dir.name, tmp_path / "..data")
    for name in ("tls.crt", "tls.key"):
        os.symlink(f"..data/{name}", tmp_path / name)
    reloader = tls.ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", interval=INTERVAL)
    runner = await listening.start(server.make_webhook(SnapshotStore([]), Settings()), "127.0.0.1", 0, reloader.context)
    port = listening.bound_port(runner)
    try:
        pem, _, writer = await handshake(port, client_context(first))
        await close(writer)
        assert same_cert(pem, first.cert)
        os.symlink(second_dir.name, tmp_path / "..data_tmp")
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
        assert reloader.reload() is True
        pem, _, writer = await handshake(port, client_context(second))
        await close(writer)
        assert same_cert(pem, second.cert)
        assert reloader.reload() is False  # nothing changed since
    finally:
        await runner.cleanup()


def test_the_first_load_must_succeed(tmp_path):
    with pytest.raises(pem.BadFile, match="tls.crt: no such file"):
        tls.ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    pair = new_pair(tmp_path)
    (tmp_path / "tls.key").write_bytes(certs.generate(NAMES).key)
    with pytest.raises(pem.BadFile, match="tls.key: not the private key of the certificate in"):
        tls.ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert pair


def test_an_expiring_certificate_is_warned_about(tmp_path, caplog):
    certs.write(certs.generate(NAMES, days=3), tmp_path)
    with caplog.at_level(logging.INFO, logger="webhook.tls"):
        tls.ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert any(r.levelno == logging.WARNING and "expires soon" in r.getMessage() for r in caplog.records)
    loaded = [r for r in caplog.records if r.getMessage() == "serving certificate loaded"]
    assert loaded and "localhost" in loaded[0].fields["sans"]


def test_a_pair_caught_between_two_writes_is_not_reported(tmp_path, caplog):
    """cert written, key not yet: the next check sees the whole pair, and nobody was alarmed."""
    new_pair(tmp_path)
    reloader = tls.ReloadingTLS(tmp_path / "tls.crt", tmp_path / "tls.key", interval=INTERVAL)
    following = certs.generate(NAMES, days=2)
    with caplog.at_level(logging.INFO, logger="webhook.tls"):
        (tmp_path / "tls.crt").write_bytes(following.cert)
        assert reloader.reload() is False
        (tmp_path / "tls.key").write_bytes(following.key)
        assert reloader.reload() is True
    assert not [r for r in caplog.records if r.levelno == logging.ERROR]
    assert reloader._current is not reloader.context  # new handshakes get the new pair (the SNI callback's pick)


async def test_rotation_under_load_fails_no_handshake(served):
    """Clients open a new TLS connection per request while the pair is replaced again and again."""
    directory, first, port = served
    pairs = [first] + [certs.generate(NAMES, days=2) for _ in range(4)]
    trust = client_context(*pairs)  # the caBundle holds old and new CAs while a rotation rolls out
    seen, failures, done = set(), [], asyncio.Event()

    async def client():
        while not done.is_set():
            try:
                served_pem, reader, writer = await handshake(port, trust)
                assert await answered(reader, writer) == b"405"
                seen.add(served_pem)
                await close(writer)
            except Exception as exc:
                failures.append(repr(exc))

    clients = [asyncio.create_task(client()) for _ in range(4)]
    for bundle in pairs[1:]:
        await asyncio.sleep(0.3)
        # Written as cert-manager's Secret update lands: one file, then the other.
        for name, data in (("tls.crt", bundle.cert), ("tls.key", bundle.key)):
            tmp = directory / f".{name}.new"
            tmp.write_bytes(data)
            os.replace(tmp, directory / name)
    await asyncio.sleep(0.3)
    done.set()
    await asyncio.gather(*clients)
    assert failures == []
    served_certs = {ssl.PEM_cert_to_DER_cert(p.decode()) for p in seen}
    assert len(served_certs) >= 4  # the rotations really happened while clients were connecting


async def test_a_rotated_client_ca_is_loaded_and_enforced(tmp_path):
    """Mutual TLS: the client CA file rotates like the pair; the new CA is required from then on."""
    from tests.support.kube import client_certificate

    serving = tmp_path / "serving"
    pair = new_pair(serving)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old_ca, old_cert, old_key = client_certificate(tmp_path / "a")
    new_ca, new_cert, new_key = client_certificate(tmp_path / "b")
    ca_file = tmp_path / "client-ca.crt"
    ca_file.write_bytes(old_ca.read_bytes())
    reloader = tls.ReloadingTLS(serving / "tls.crt", serving / "tls.key", interval=INTERVAL, client_ca_file=ca_file)
    runner = await listening.start(server.make_webhook(SnapshotStore(fixture_cluster()), Settings()), "127.0.0.1", 0,
                                reloader.context)
    reloader.start()
    port = listening.bound_port(runner)

    async def admitted(cert, key):
        context = client_context(pair)
        context.load_cert_chain(str(cert), str(key))
        try:
            _, reader, writer = await handshake(port, context)
            status = await answered(reader, writer)
            await close(writer)
            return status == b"405"
        except (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError, IndexError):
            return False

    try:
        assert await admitted(old_cert, old_key) and not await admitted(new_cert, new_key)
        ca_file.write_bytes(new_ca.read_bytes())
        assert await eventually(lambda: admitted(new_cert, new_key))
        assert not await admitted(old_cert, old_key)
    finally:
        await reloader.stop()
        await runner.cleanup()


async def test_no_session_ticket_is_sent(served):
    """kube-apiserver never resumes a session, so a ticket would be work for nothing on every handshake."""
    _, first, port = served
    _, reader, writer = await handshake(port, client_context(first))
    assert await answered(reader, writer) == b"405"  # the tickets, if any, came before the answer
    session = writer.get_extra_info("ssl_object").session
    assert writer.get_extra_info("ssl_object").version() == "TLSv1.3"
    assert session is None or not session.has_ticket
    await close(writer)
