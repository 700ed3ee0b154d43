"""The keeper's state (`rules.keeping.state`) in the cluster: one ConfigMap beside the keeper's
Lease, `<lease name>-state`, read by a leader when its term begins and by `status`, written by the
leader after a pass that changed it. One read and at most one write a pass; the keeper's account
may `get` and `update` that ConfigMap alone (and `create` ConfigMaps in its namespace: Kubernetes
cannot narrow `create` by name).
"""
from __future__ import annotations

import logging
from typing import Any

import orjson

from ..cluster.client import ApiUnreachable, request
from ..config import Settings
from ..kinds import CONFIGMAP
from ..rules.keeping.state import dump, KEY, KeeperState, load, Unreadable
from .kubevirt_api import answered

log = logging.getLogger("webhook.keeper")


class StateUnavailable(Exception):
    """The keeper's state could not be read or written; the message says why."""


def state_name(settings: Settings) -> str:
    return f"{settings.lease_name}-state"


async def _get(api: Any, namespace: str, name: str, timeout: float) -> tuple[KeeperState, str | None]:
    """The state and the ConfigMap's resourceVersion (None: there is none yet)."""
    path = CONFIGMAP.path(namespace, name)
    try:
        status, raw = await request(api, "GET", path, timeout=timeout)
    except ApiUnreachable as exc:
        raise StateUnavailable(f"ConfigMap {namespace}/{name}: {exc}") from None
    if status == 404:
        return KeeperState(), None
    if status != 200:
        raise StateUnavailable(f"ConfigMap {namespace}/{name}: {answered(status, raw)}")
    try:
        obj = orjson.loads(raw)
        data = obj.get("data") or {}
        return load(data.get(KEY)), obj["metadata"]["resourceVersion"]
    except (ValueError, KeyError, TypeError, AttributeError, Unreadable) as exc:
        raise StateUnavailable(f"ConfigMap {namespace}/{name} does not hold the keeper's state: {exc}") from None


def _version_of(raw: bytes) -> str | None:
    """The resourceVersion of a ConfigMap as the API answered it (None: not said, the next write reads it)."""
    try:
        version = orjson.loads(raw)["metadata"]["resourceVersion"]
    except (ValueError, KeyError, TypeError):
        return None
    return version if isinstance(version, str) else None


async def read_state(api: Any, namespace: str, name: str, *, timeout: float) -> KeeperState:
    """The keeper's state as the cluster holds it (none yet: empty); raises StateUnavailable."""
    return (await _get(api, namespace, name, timeout))[0]


class StateStore:
    """The leader's copy of the state and its one ConfigMap."""

    def __init__(self, api: Any, namespace: str, name: str, *, timeout: float):
        self.api, self.namespace, self.name, self.timeout = api, namespace, name, timeout
        self.written: str | None = None  # the state as last read or written
        self._version: str | None = None

    async def read(self) -> KeeperState:
        """The state as the cluster holds it; raises StateUnavailable."""
        state, self._version = await _get(self.api, self.namespace, self.name, self.timeout)
        self.written = dump(state)
        return state

    async def write(self, state: KeeperState) -> bool:
        """The state written when it changed: whether it was; raises StateUnavailable. A conflict
        (another writer, an old leader) is read once and written over: the leader's view is the
        one the Lease stands behind."""
        text = dump(state)
        if text == self.written:
            return False
        for attempt in range(2):
            status, raw = await self._send(text)
            if status in (200, 201):
                self.written, self._version = text, _version_of(raw)
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
