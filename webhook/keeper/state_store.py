"""The keeper's record (`rules.keeping.record`) in one ConfigMap beside its Lease, `<lease name>-state`:
read by the leader each pass and by `status`, written by the leader when it changed. Its account may
`get` and `update` that ConfigMap alone (and `create` ConfigMaps: Kubernetes cannot narrow it by name).
"""
from __future__ import annotations

from typing import Any

import orjson

from ..cluster.client import ApiUnreachable, request
from ..config import Settings
from ..kinds import CONFIGMAP, meta
from ..rules.keeping.record import dump, KEY, load, Loss
from ..rules.keeping.record import KeeperState
from .kubevirt_api import answered


class StateUnavailable(Exception):
    """The keeper's state could not be read or written; the message says why."""


def state_name(settings: Settings) -> str:
    return f"{settings.lease_name}-state"


async def _get(api: Any, namespace: str, name: str, timeout: float) -> tuple[str | None, str | None]:
    """The record's text (None: there is no ConfigMap) and the ConfigMap's resourceVersion."""
    path = CONFIGMAP.path(namespace, name)
    try:
        status, raw = await request(api, "GET", path, timeout=timeout)
    except ApiUnreachable as exc:
        raise StateUnavailable(f"ConfigMap {namespace}/{name}: {exc}") from None
    if status == 404:
        return None, None
    if status != 200:
        raise StateUnavailable(f"ConfigMap {namespace}/{name}: {answered(status, raw)}")
    return _answer(raw)


def _answer(raw: bytes) -> tuple[str, str | None]:
    """The record in a ConfigMap as answered ("": none) and its resourceVersion (None: not said)."""
    try:
        obj = orjson.loads(raw)
    except ValueError:
        obj = None
    data, version = obj.get("data") if isinstance(obj, dict) else None, meta(obj).get("resourceVersion")
    text = data.get(KEY) if isinstance(data, dict) else None
    return text if isinstance(text, str) else "", version if isinstance(version, str) else None


async def read_state(api: Any, namespace: str, name: str, *, timeout: float) -> tuple[KeeperState, Loss | None]:
    """The keeper's record as the cluster holds it, and what of it was lost; raises StateUnavailable."""
    return load((await _get(api, namespace, name, timeout))[0])


class StateStore:
    """The leader's copy of the record and its one ConfigMap."""

    def __init__(self, api: Any, namespace: str, name: str, *, timeout: float):
        self.api, self.namespace, self.name, self.timeout = api, namespace, name, timeout
        self.written: str | None = None  # the record as last read or written (None: none)
        self._read = False
        self._version: str | None = None

    async def read(self) -> tuple[KeeperState, Loss | None] | None:
        """The record and what of it was lost, unless it is the one last read or written here (None)."""
        text, self._version = await _get(self.api, self.namespace, self.name, self.timeout)
        if self._read and text == self.written:
            return None
        had, self.written, self._read = self._read and bool(self.written), text, True
        if had and not text:
            return KeeperState(), Loss(kind="deleted", why="deleted or emptied since the keeper last wrote it")
        return load(text)

    async def write(self, state: KeeperState) -> bool:
        """The state written if it changed: whether it was. A conflict (an old leader) is read once and written
        over: the Lease stands behind this leader's view."""
        text = dump(state)
        if text == self.written:
            return False
        for attempt in range(2):
            status, raw = await self._send(text)
            if status in (200, 201):
                self.written, self._version = text, _answer(raw)[1]
                return True
            if status not in (404, 409) or attempt:
                raise StateUnavailable(f"ConfigMap {self.namespace}/{self.name}: {answered(status, raw)}")
            _, self._version = await _get(self.api, self.namespace, self.name, self.timeout)
        raise StateUnavailable(f"ConfigMap {self.namespace}/{self.name}: not written")  # not reached

    async def _send(self, text: str) -> tuple[int, bytes]:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": self.name, "namespace": self.namespace,
                                             "labels": {"app.kubernetes.io/name": "kubevirt-colocate",
                                                        "app.kubernetes.io/component": "keeper"}},
                                "data": {KEY: text}}
        create = self._version is None
        if not create:
            body["metadata"]["resourceVersion"] = self._version
        path = CONFIGMAP.path(self.namespace, None if create else self.name)
        try:
            return await request(self.api, "POST" if create else "PUT", path, body=body, timeout=self.timeout)
        except ApiUnreachable as exc:
            raise StateUnavailable(f"ConfigMap {self.namespace}/{self.name}: {exc}") from None
