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
  applied (what the apiserver stores), then bound as kube-scheduler would bind it (`bound_to`: the
  first node its pin names, else one of the nodes in turn), by a process of its own (on any core),
  so that `serve`'s informers take both events during the burst, a bound pod changing what its
  node holds; the pods of a batch deleted once it has settled, and their deletions settled, before
  the next batch.
"""
from __future__ import annotations

import asyncio
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

HOSTNAME = "kubernetes.io/hostname"
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
                proc.send_signal(number)

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
    if response.get("patch"):  # in place, as kube-apiserver patches the object it decoded: a deep copy of the
        # pod first was 0.14 of the 0.33 ms it took here per pod pinned, on the cores `serve` shares, none per pod left alone
        pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])), in_place=True)
    meta = pod.setdefault("metadata", {})
    meta["name"] = f"{meta.get('name') or meta.get('generateName') or 'pod-'}{suffix}"
    meta["namespace"] = review["request"]["namespace"]
    return pod


def bound_to(pod: dict[str, Any]) -> str | None:
    """The node a pinned pod goes to: the first its required node affinity names (by name or by
    hostname label), else its nodeSelector's hostname; None for a pod without a pin."""
    spec = pod.get("spec") or {}
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or ():
        for requirement in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            if requirement.get("key") in ("metadata.name", HOSTNAME) and requirement.get("operator") == "In":
                return (requirement.get("values") or [None])[0]
    return (spec.get("nodeSelector") or {}).get(HOSTNAME)


class Stored:
    """The pods a batch's answers stored in the emulator, by a process of the apiserver's own: what the
    apiserver does after an answer (the patch applied, the pod written) takes no time from the sender's
    loop, whose clock times the answers (a write to a pipe, never waited for). Deleted after the batch
    (`delete_all`)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.count = 0

    @classmethod
    async def start(cls, api: str, nodes: list[str]) -> Stored:
        """The storing process, binding a pod without a pin to each of `nodes` in turn."""
        return cls(await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.apiserver_load", api, ",".join(nodes), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

    def create(self, body: bytes, answer: bytes) -> None:
        self.count += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"create %d %d %d\n" % (self.count, len(body), len(answer)) + body + answer)

    async def _ask(self, command: bytes) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + b"\n")
        await self.proc.stdin.drain()
        said = (await self.proc.stdout.readline()).decode().strip()
        if said != "ok":
            raise RuntimeError(f"storing the pods: {said or 'the process ended'}")

    async def created(self) -> None:
        """Until every pod sent so far is stored."""
        await self._ask(b"sync")

    async def delete_all(self) -> None:
        await self._ask(b"delete")

    async def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await asyncio.wait_for(self.proc.wait(), 30)


async def store(api: str, nodes: list[str]) -> None:
    """The storing process: creates (and binds) as they come, `sync` and `delete` answered "ok" once done."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    created: list[tuple[str, str]] = []
    pending: set[asyncio.Task[None]] = set()
    failed: list[str] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def create(pod: dict[str, Any]) -> None:
            namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            async with session.post(f"{api}/api/v1/namespaces/{namespace}/pods", json=pod) as response:
                if response.status >= 300:
                    failed.append(f"the emulator refused pod {namespace}/{name}: {response.status}")
                    return
            created.append((namespace, name))
            node = bound_to(pod) or nodes[len(created) % len(nodes)]
            async with session.patch(f"{api}/api/v1/namespaces/{namespace}/pods/{name}", json={"spec": {"nodeName": node}},
                                     headers={"Content-Type": "application/merge-patch+json"}) as response:
                if response.status >= 300:
                    failed.append(f"the emulator did not bind pod {namespace}/{name}: {response.status}")

        while line := await reader.readline():
            command, *sizes = line.split()
            if command == b"create":
                count, body_size, answer_size = (int(size) for size in sizes)
                body, answer = await reader.readexactly(body_size), await reader.readexactly(answer_size)
                task = asyncio.create_task(create(stored_pod(body, answer, f"-{count:06d}")))
                pending.add(task)
                task.add_done_callback(pending.discard)
                continue
            await asyncio.gather(*pending)
            if command == b"delete":
                for namespace, name in created:
                    async with session.delete(f"{api}/api/v1/namespaces/{namespace}/pods/{name}") as response:
                        if response.status >= 300 and response.status != 404:
                            failed.append(f"the emulator did not delete pod {namespace}/{name}: {response.status}")
                created.clear()
            sys.stdout.write(("ok" if not failed else failed[0]) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(store(sys.argv[1], sys.argv[2].split(",")))
