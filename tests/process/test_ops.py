"""The operations port answers its probes within the kubelet's 1 s while the process's event loop is
held by long work, says what the loop said last, and fails /healthz only once the loop is wedged."""
from __future__ import annotations

import asyncio
import concurrent.futures
import time
import urllib.error
import urllib.request

from tests.cluster.test_informer import feed, informer_for, listed
from tests.support.kube import running_vm

from webhook.kinds import POD
from webhook.process import listening, ops

HELD = 1.5


def get(url: str) -> tuple[int, str, float]:
    """(status, body, seconds) of a GET from a thread of the caller's own, as the kubelet asks."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode(), time.monotonic() - started
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), time.monotonic() - started


async def held_while(urls: list[str], seconds: float) -> list[tuple[int, str, float]]:
    """The answers to `urls`, asked from other threads while this event loop is held for `seconds`."""
    with concurrent.futures.ThreadPoolExecutor(len(urls)) as pool:
        time.sleep(0.05)
        asked = [pool.submit(get, url) for url in urls]
        time.sleep(seconds)  # long work that never gives the loop back
        return [await asyncio.wrap_future(answer) for answer in asked]


async def test_probes_answer_within_a_second_while_the_loop_is_held():
    reasons: list[str] = []
    port = await ops.Apart(ops.Probes(lambda: reasons, lambda: ["a watch is failing"])).start("127.0.0.1", 0)
    base = f"http://127.0.0.1:{listening.bound_port(port)}"
    try:
        assert (await asyncio.to_thread(get, f"{base}/readyz"))[:2] == (200, "ok, degraded: a watch is failing\n")
        reasons.append("caches syncing")
        status, text, _ = await asyncio.to_thread(get, f"{base}/readyz")
        assert (status, text) == (503, "not ready: caches syncing\n")
        answers = await held_while([f"{base}/healthz", f"{base}/readyz", f"{base}/metrics"], HELD)
        (health, _, health_took), (readiness, said, ready_took), (scraped, _, scrape_took) = answers
        assert (health, readiness, said, scraped) == (200, 503, "not ready: caches syncing\n", 200)
        assert max(health_took, ready_took, scrape_took) < 1.0
        reasons.clear()  # answered as it is now, once the loop turns again
        assert (await asyncio.to_thread(get, f"{base}/readyz"))[:2] == (200, "ok, degraded: a watch is failing\n")
    finally:
        await port.cleanup()


async def test_healthz_fails_once_the_loop_has_not_turned_for_long(monkeypatch):
    monkeypatch.setattr(ops, "STALLED_SECONDS", 0.5)
    port = await ops.Apart(ops.Probes(list)).start("127.0.0.1", 0)
    base = f"http://127.0.0.1:{listening.bound_port(port)}"
    try:
        time.sleep(0.6)  # the loop wedged
        (status, text, took), = await held_while([f"{base}/healthz"], HELD)
        assert status == 500 and text.startswith("the event loop has not turned for") and took < 1.0
        assert (await asyncio.to_thread(get, f"{base}/healthz"))[:2] == (200, "ok\n")
    finally:
        await port.cleanup()


async def test_readyz_is_not_ready_while_the_loop_is_held_before_it_ever_answered():
    """A replica starting: its first cache sync holds the event loop (the list applied at once, 80 s at
    150,000 pods) before the loop has answered any probe. /readyz says not ready, however ready the
    cache is by then, and ready only once the loop itself says so; /healthz is alive throughout."""
    pods = informer_for(POD)
    port = await ops.Apart(ops.Probes(lambda: [] if pods.synced else ["store not synced"])).start("127.0.0.1", 0)
    base = f"http://127.0.0.1:{listening.bound_port(port)}"
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            asked = [pool.submit(get, f"{base}/readyz"), pool.submit(get, f"{base}/healthz")]
            until = time.monotonic() + HELD
            while time.monotonic() < until:  # the first list, applied on the loop
                feed(pods, listed(*(running_vm(f"vm-{i}", "node-a", f"disk-{i}") for i in range(50)))[:-1])
            feed(pods, listed()[-1:])  # synced, but the loop has not said so yet
            (readiness, said, took), (health, _, _) = [await asyncio.wrap_future(answer) for answer in asked]
        assert (readiness, said, health) == (503, "not ready: the process has not answered yet\n", 200)
        assert took < 1.0
        assert (await asyncio.to_thread(get, f"{base}/readyz"))[:2] == (200, "ok\n")
    finally:
        await port.cleanup()
