"""The apiserver's share of the machine in a drain storm (`python -m bench.storm --apiserver-load CORES`).

Beside a real kube-apiserver `serve` does not have a quiet machine and a quiet watch: the apiserver,
etcd and kube-scheduler work on every create of the burst at the same moments, on every core
(Go's threads are not pinned), and every pod the webhook answered is stored and comes back to
`serve` as its pod watch's ADDED event while the rest of the burst is still being answered.
`bench.storm` sends the reviews itself and, by default, neither happens. With `--apiserver-load`:

- `Busy`: CORES cores' worth of work, on processes the kernel places on any core (`serve`'s
  too), running from each burst's first review sent to its last answer, the quiet starts', the
  control's and the storm's alike. A fraction of a core is a process busy that share of each
  10 ms;
- `Stored`: each review's pod created in the emulator once answered, with the answer's patch
  applied (what the apiserver stores), so that `serve`'s informers take its event during the
  burst; the pods of a batch deleted once it has settled, and their deletions settled, before the
  next batch.
"""
from __future__ import annotations

import base64
import json
import math
import os
import signal
import subprocess
import sys
from typing import Any

import aiohttp
import jsonpatch

PERIOD = 0.01  # a partly busy process is busy its share of each PERIOD
BUSY = """
import time
share, period = {share!r}, {period!r}
while True:
    until = time.monotonic() + share * period
    while time.monotonic() < until:
        pass
    if share < 1:
        time.sleep((1 - share) * period)
"""


class Busy:
    """`cores` cores' worth of work on unpinned processes, stopped between bursts."""

    def __init__(self, cores: float) -> None:
        whole, everywhere = math.floor(cores), os.sched_getaffinity(0)
        shares = [1.0] * whole + ([cores - whole] if cores - whole > 1e-6 else [])
        self.processes = [subprocess.Popen([sys.executable, "-c", BUSY.format(share=share, period=PERIOD)],
                                           preexec_fn=lambda: os.sched_setaffinity(0, everywhere))
                          for share in shares]
        self.stop()

    def _signal(self, number: int) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                os.kill(proc.pid, number)

    def start(self) -> None:
        self._signal(signal.SIGCONT)

    def stop(self) -> None:
        self._signal(signal.SIGSTOP)

    def close(self) -> None:
        for proc in self.processes:
            proc.kill()
            proc.wait()


def stored_pod(body: bytes, answer: bytes, suffix: str) -> dict[str, Any]:
    """The pod the apiserver stores for a review: its object with the answer's patch applied, named
    as the apiserver would name it (`generateName` and a suffix; a fixed name with one, so that
    the same review is stored anew in each round)."""
    review, response = json.loads(body), json.loads(answer)["response"]
    pod = review["request"]["object"]
    if response.get("patch"):
        pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    meta = pod.setdefault("metadata", {})
    meta["name"] = f"{meta.get('name') or meta.get('generateName') or 'pod-'}{suffix}"
    meta["namespace"] = review["request"]["namespace"]
    return pod


class Stored:
    """The pods a batch's answers stored in the emulator, deleted after it."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.session = aiohttp.ClientSession()
        self.created: list[tuple[str, str]] = []
        self.count = 0

    async def create(self, body: bytes, answer: bytes) -> None:
        self.count += 1
        pod = stored_pod(body, answer, f"-{self.count:06d}")
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        async with self.session.post(f"{self.api}/api/v1/namespaces/{namespace}/pods", json=pod) as response:
            if response.status >= 300:
                raise RuntimeError(f"the emulator refused pod {namespace}/{name}: {response.status}")
        self.created.append((namespace, name))

    async def delete_all(self) -> None:
        for namespace, name in self.created:
            async with self.session.delete(f"{self.api}/api/v1/namespaces/{namespace}/pods/{name}") as response:
                if response.status >= 300 and response.status != 404:
                    raise RuntimeError(f"the emulator did not delete pod {namespace}/{name}: {response.status}")
        self.created.clear()

    async def close(self) -> None:
        await self.session.close()
