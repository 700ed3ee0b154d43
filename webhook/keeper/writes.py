"""What came of each of the keeper's writes, and when a pass stops writing. A failed write holds its VM alone;
SHARED failures of a namespace, or one that waited WAITED (a webhook hanging until its `timeoutSeconds`), hold
its other VMs for the pass (`deferred`), a hanging one for a backoff too. A failure naming a tenant's webhook is
never the API lost and gives its token back; LOST namespaces failing otherwise in a row stop the pass. A token
bucket bounds the writes, as client-go's controller rate limiter does.
"""
from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Awaitable, Callable

from ..rules.keeping.record import Action
from .kubevirt_api import Created

BURST = 10  # writes at once: more than a pass makes while nothing is wrong
RATE = 1.0  # writes a second past the burst
LOST = 3  # namespaces failing in a row, nothing answered in between: the API is lost
SHARED = 2  # failures of one namespace in a row: its other VMs wait for the next pass
WEBHOOK = re.compile(r'failed calling webhook "([^"]+)"')
KUBEVIRT = ".kubevirt.io"  # virt-api's webhooks: down, no namespace can migrate
WEBHOOK_BOUND = 32.0  # seconds a write waits for its answer: the longest webhook call, and a margin
WAITED = 4.0  # seconds a failed write took for its namespace to count as hanging: far more than an answer takes
NAMESPACE_BACKOFF, NAMESPACE_CAP = 60.0, 600.0  # a hanging namespace's VMs not tried for this, doubling


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """What came of one action on a VM, in words: created (namespace/name), done, or held (`status`: 0, no answer)."""

    key: tuple[str, str]
    action: Action
    words: str = ""
    created: str | None = None
    done: bool = False
    holds: bool = False
    status: int = 0
    uid: str = ""  # the VMI's, of one unpaused
    dry_run: bool = False  # a dry run answered: the namespace answers, writes may still fail (etcd)


def failed(key: tuple[str, str], action: Action, answer: Created, words: str) -> Result:
    """A failed write: the VM is held, with the API's words ("API answered 500: …", "no answer within 5s")."""
    return Result(key=key, action=action, words=f"{words}: {answer.error}", holds=True, status=answer.status)


def about_the_object(status: int) -> bool:
    """The API answered about the object asked for (a 4xx but 429): it is there, and answers."""
    return 400 <= status < 500 and status != 429


class Writes:
    """The keeper's writes: the bucket (across passes), a pass's failures (`begin`), its dry runs in flight."""

    def __init__(self, rate: float = RATE, burst: int = BURST, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.rate, self.burst, self.clock, self.sleep = rate, burst, clock, sleep
        self.tokens, self.at = float(burst), clock()
        self.failing: list[str] = []  # the namespaces failing in a row
        self.lost = ""  # why this pass stopped writing ("": it did not)
        self.namespaces: dict[str, list[Result]] = {}  # each namespace's failures in a row
        self.deferred: dict[str, str] = {}  # namespace: why its VMs wait (for the next pass, or a dry run's answer)
        self.tenants: set[str] = set()  # of those, the namespaces whose failures name a webhook outside the API
        self.hanging: dict[str, tuple[float, float, str]] = {}  # namespace: its backoff, until when, why
        self.answering: set[str] = set()  # namespaces whose last request went through
        self.probes: dict[asyncio.Task[tuple[Result, float]], str] = {}  # dry runs in flight: their namespace
        self._taken = self.at

    def begin(self) -> None:
        """A new pass: the API and every namespace are given a fresh chance, but those hanging in their backoff."""
        now = self.clock()
        self.stop()
        self.failing, self.lost, self.namespaces = [], "", {}
        self.deferred = {ns: why for ns, (_, until, why) in self.hanging.items() if now < until}
        self.tenants = set(self.deferred)

    def stop(self) -> None:
        """The dry runs still in flight given up: they change nothing."""
        for task, namespace in self.probes.items():
            task.cancel()
            self.deferred.pop(namespace, None)
        self.probes = {}

    async def take(self) -> bool:
        """One write's token, waiting for it past the burst; False once the pass has stopped writing."""
        while not self.lost:
            now = self.clock()
            self.tokens, self.at = min(float(self.burst), self.tokens + (now - self.at) * self.rate), now
            if self.tokens >= 1:
                self.tokens, self._taken = self.tokens - 1, now
                return True
            await self.sleep((1 - self.tokens) / self.rate)
        return False

    def came(self, result: Result, took: float | None = None) -> Result:
        """Count a result (that took `took` s; by default since the last token) for its namespace and the API lost."""
        namespace, took = result.key[0], self.clock() - self._taken if took is None else took
        if result.done or about_the_object(result.status):
            self.failing = self.failing if result.dry_run else []
            self.namespaces.pop(namespace, None)
            self.hanging.pop(namespace, None)
            self.answering.add(namespace)
        elif result.holds:
            self.answering.discard(namespace)
            named = WEBHOOK.search(result.words)  # a webhook outside the API (not KubeVirt's) failed it: a tenant's
            tenant = named is not None and not named[1].endswith(KUBEVIRT)
            self.tokens += 1 if tenant else 0  # the tenant's webhook failed it: it cost the API nothing
            failed = self.namespaces.setdefault(namespace, [])
            failed.append(result)
            if len(failed) >= SHARED or took >= WAITED:
                names = ", ".join(sorted({one.key[1] for one in failed}))
                self.deferred[namespace] = (f"not tried in this pass: the keeper's requests for {names} of namespace "
                                            f"{namespace} failed ({result.words})")
                self.tenants.update([namespace] if tenant else [])
            if took >= WAITED:
                backoff = min(self.hanging.get(namespace, (NAMESPACE_BACKOFF / 2, 0.0, ""))[0] * 2, NAMESPACE_CAP)
                self.hanging[namespace] = (backoff, self.clock() + backoff, (
                    f"not tried until {backoff:g}s after its last request, which waited {took:.0f}s and failed "
                    f"({result.words})"))
            if not tenant and namespace not in self.failing:
                self.failing.append(namespace)
            if len(self.failing) >= LOST:
                self.lost = (f"the API failed in {LOST} namespaces in a row ({', '.join(self.failing)}), the pass "
                             f"stopped: {result.words}")
        return result
