"""Where cluster facts come from: one Store protocol, a snapshot and a live cluster.

A Store answers "this object" (or None when it does not exist) and small look-ups the
rules need. It raises `StoreError` when it cannot tell (API error, timeout); the caller
turns that into "no node for this disk, say why", never into a failed admission.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import orjson
import yaml

from . import metrics


@dataclasses.dataclass(frozen=True)
class Resource:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The API path; names are escaped, so a name from a pod can never step into another path."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{_segment(namespace)}"
        base += f"/{self.plural}"
        return f"{base}/{_segment(name)}" if name else base


# A DNS-1123 subdomain: what Kubernetes accepts as the name of PVCs, PVs, pods and nodes.
NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def valid_name(name: object) -> bool:
    return isinstance(name, str) and len(name) <= 253 and NAME.fullmatch(name) is not None


def _segment(value: str) -> str:
    if value in (".", ".."):
        raise StoreError(f"{value!r} is not an object name")
    return urllib.parse.quote(value, safe="")


PVC = Resource("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", True)
PV = Resource("PersistentVolume", "", "v1", "persistentvolumes", False)
POD = Resource("Pod", "", "v1", "pods", True)
NODE = Resource("Node", "", "v1", "nodes", False)
# Longhorn serves only v1beta2 since 1.9/1.10 (longhorn-manager k8s/crds.yaml).
SHARE_MANAGER = Resource("ShareManager", "longhorn.io", "v1beta2", "sharemanagers", True)
RESOURCES = (PVC, PV, POD, NODE, SHARE_MANAGER)


class StoreError(Exception):
    """The store could not answer (API error, timeout): the fact is unknown, not absent."""


class Store(Protocol):
    async def get(
        self, resource: Resource, namespace: str | None, name: str, *, timeout: float | None = None
    ) -> dict[str, Any] | None:
        """The object, or None when it does not exist. Raises StoreError when unsure."""

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        *,
        timeout: float | None = None,
    ) -> list[dict[str, Any]]:
        """Objects of a resource, optionally in one namespace and with these exact labels."""

    async def pvs_by_volume_handle(self, handle: str, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """PersistentVolumes whose spec.csi.volumeHandle is `handle` (a Longhorn volume)."""

    async def pods_by_claim(self, namespace: str, claim: str, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """virt-launcher pods in `namespace` that mount PVC `claim`."""

    def synced(self) -> bool:
        """Whether reads are answered from a complete view (readiness): caches have synced."""

    async def close(self) -> None: ...

    # Optional: `peek(resource, namespace, name) -> (known, object)` answers from memory without
    # I/O; known is False when only the API can tell. Stores without it are always asked.


VIRT_LAUNCHER_LABELS = {"kubevirt.io": "virt-launcher"}


def volume_handle(pv: dict[str, Any]) -> str | None:
    return (((pv.get("spec") or {}).get("csi")) or {}).get("volumeHandle")


def mounts_claim(pod: dict[str, Any], claim: str) -> bool:
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if isinstance(volume, dict) and ((volume.get("persistentVolumeClaim") or {}).get("claimName")) == claim:
            return True
    return False


class ListLookups:
    """Look-ups built on `list` (no index): for the snapshot and for plain API reads."""

    async def pvs_by_volume_handle(self, handle, *, timeout=None):
        return [pv for pv in await self.list(PV, timeout=timeout) if volume_handle(pv) == handle]

    async def pods_by_claim(self, namespace, claim, *, timeout=None):
        pods = await self.list(POD, namespace, VIRT_LAUNCHER_LABELS, timeout=timeout)
        return [pod for pod in pods if mounts_claim(pod, claim)]


def labels_match(obj: dict[str, Any], labels: dict[str, str] | None) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in (labels or {}).items())


# --------------------------------------------------------------------------- snapshot


class SnapshotStore(ListLookups):
    """Objects from a YAML stream as `kubectl get -o yaml` prints them (documents or Lists)."""

    def __init__(self, objects: Iterable[dict[str, Any]]):
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        by_kind = {(r.api_version, r.kind): r for r in RESOURCES}
        for obj in objects:
            resource = by_kind.get((obj.get("apiVersion"), obj.get("kind")))
            if resource is None:
                continue
            meta = obj.get("metadata") or {}
            namespace = (meta.get("namespace") or "") if resource.namespaced else ""
            self._objects[(resource.kind, namespace, meta.get("name") or "")] = obj

    @classmethod
    def from_file(cls, path: str | Path) -> SnapshotStore:
        text = Path(path).read_text(encoding="utf-8")
        return cls(flatten(yaml.safe_load_all(text)))

    def peek(self, resource, namespace, name):
        namespace = (namespace or "") if resource.namespaced else ""
        return True, self._objects.get((resource.kind, namespace, name))

    async def get(self, resource, namespace, name, *, timeout=None):
        return self.peek(resource, namespace, name)[1]

    async def list(self, resource, namespace=None, labels=None, *, timeout=None):
        return [
            obj
            for (kind, ns, _), obj in self._objects.items()
            if kind == resource.kind and (namespace is None or ns == namespace) and labels_match(obj, labels)
        ]

    def synced(self) -> bool:
        return True

    async def close(self) -> None:
        return None


def flatten(documents: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Yield objects from documents that may be `kind: List` (as `kubectl get -o yaml` prints)."""
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            yield from flatten(doc["items"])
        else:
            yield doc


# --------------------------------------------------------------------------- cluster


async def raw_get(api_client: Any, path: str, query: list[tuple[str, str]], timeout: float | None) -> Any:
    """A GET through kubernetes-asyncio (its auth and TLS), the response left unread: the
    caller parses it (orjson) and releases it."""
    return await api_client.call_api(
        path,
        "GET",
        query_params=query,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=timeout,
    )


class ClusterStore(ListLookups):
    """Reads the live cluster with kubernetes-asyncio: plain GETs, each within its timeout."""

    def __init__(self, api_client: Any):
        self._api = api_client

    @classmethod
    async def connect(cls, kubeconfig: str | None = None) -> ClusterStore:
        return cls(await connect_api(kubeconfig))

    @property
    def api_client(self) -> Any:
        return self._api

    @classmethod
    def for_host(cls, host: str) -> ClusterStore:
        """An unauthenticated client for an API at `host` (local emulators, kubectl proxy)."""
        from kubernetes_asyncio import client

        return cls(new_api_client(client.Configuration(host=host)))

    async def _call(self, path: str, query: list[tuple[str, str]], timeout: float | None,
                    resource: Resource) -> dict[str, Any] | None:
        try:
            return await self._read(path, query, timeout)
        except StoreError:
            metrics.API_ERRORS.labels(resource.plural).inc()
            raise

    async def _read(self, path: str, query: list[tuple[str, str]], timeout: float | None) -> dict[str, Any] | None:
        if timeout is not None and timeout <= 0:
            raise StoreError(f"no time left to read {path}")
        try:
            async with asyncio.timeout(timeout):
                response = await raw_get(self._api, path, query, timeout)
                try:
                    body = await response.read()
                finally:
                    response.release()
        except TimeoutError:
            raise StoreError(f"timed out after {timeout:.1f}s reading {path}") from None
        except StoreError:
            raise
        except Exception as exc:  # connection refused, TLS, DNS: the API is unreachable
            raise StoreError(f"cannot reach the API for {path}: {type(exc).__name__}: {exc}") from None
        if response.status == 404:
            return None
        if not 200 <= response.status < 300:
            raise StoreError(f"API answered {response.status} for {path}")
        try:
            return orjson.loads(body)
        except ValueError:
            raise StoreError(f"API sent a body that is not JSON for {path}") from None

    async def get(self, resource, namespace, name, *, timeout=None):
        return await self._call(resource.path(namespace, name), [], timeout, resource)

    async def list(self, resource, namespace=None, labels=None, *, timeout=None):
        query = []
        if labels:
            query.append(("labelSelector", ",".join(f"{k}={v}" for k, v in labels.items())))
        body = await self._call(resource.path(namespace), query, timeout, resource)
        if body is None:
            raise StoreError(f"API has no {resource.plural} resource")
        items = body.get("items") or []
        # Lists omit apiVersion/kind on items; the rules don't need them. Filter client-side too.
        return [item for item in items if labels_match(item, labels)]

    def synced(self) -> bool:
        return True

    async def close(self) -> None:
        await self._api.close()


async def connect_api(kubeconfig: str | None = None) -> Any:
    """A kubernetes-asyncio ApiClient: in-cluster config when running in a pod, else
    --kubeconfig / KUBECONFIG / ~/.kube/config."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    if kubeconfig is None and config.incluster_config.SERVICE_HOST_ENV_NAME in os.environ:
        config.load_incluster_config(client_configuration=configuration)
    else:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return new_api_client(configuration)


def new_api_client(configuration: Any) -> Any:
    """kubernetes-asyncio's ApiClient without environment look-ups on every request.

    Its aiohttp session trusts the environment (`trust_env=True`): each request then reads
    ~/.netrc and the proxy variables in a worker thread, which costs more CPU than the
    request itself. The proxy the environment names for the API server (HTTPS_PROXY,
    NO_PROXY...) is looked up once here instead.
    """
    import aiohttp
    import yarl
    from aiohttp.helpers import get_env_proxy_for_url
    from kubernetes_asyncio import client

    if not configuration.proxy:
        try:
            proxy, proxy_auth = get_env_proxy_for_url(yarl.URL(configuration.host))
        except LookupError:
            pass
        else:
            configuration.proxy = str(proxy)
            if proxy_auth is not None:
                configuration.proxy_headers = {"Proxy-Authorization": proxy_auth.encode()}
    api = client.ApiClient(configuration)
    trusting = api.rest_client.pool_manager
    # aiohttp's default read buffer, not kubernetes-asyncio's 2 MiB: our watch reader does not
    # need a whole event in the buffer, and six watches streaming at start add up.
    api.rest_client.pool_manager = aiohttp.ClientSession(connector=trusting.connector, trust_env=False)
    trusting.detach()  # hands the connector over; the old session is closed without closing it
    return api
