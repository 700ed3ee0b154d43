"""The admission server over real HTTPS, for the tests of this package."""
import ssl

import aiohttp
import pytest
from tests.support.kube import fixture_cluster

from webhook.admission import server, tls
from webhook.process import listening
from webhook.stores.snapshot import SnapshotStore
from webhook.config import Settings


@pytest.fixture
async def https(tls_files):
    """(a client session, the base URL) of the webhook's admission port on 127.0.0.1, answering from the
    fixture cluster, with certificates made by the project's own code."""
    webhook = server.make_webhook(SnapshotStore(fixture_cluster()), Settings())
    runner = await listening.start(webhook, "127.0.0.1", 0, tls.build_context(str(tls_files["cert"]), str(tls_files["key"])))
    client_ctx = ssl.create_default_context(cafile=str(tls_files["ca"]))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ctx)) as session:
        yield session, f"https://localhost:{listening.bound_port(runner)}"
    await runner.cleanup()
