from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from webhook.tools import certs  # noqa: E402
from webhook.cluster.cache import WatchedClusterStore
from webhook.cluster.reflector import Timing  # noqa: E402
from webhook.config import Settings  # noqa: E402
from webhook.cluster.direct import ClusterStore  # noqa: E402
from webhook.cluster.snapshot import SnapshotStore  # noqa: E402
from webhook.kinds import RULE_RESOURCES as RESOURCES  # noqa: E402

# Quick recovery in tests; the watch itself lasts as long as in production.
TEST_TIMING = Timing(backoff_initial=0.02, backoff_cap=0.2)

BY_KIND = {(r.api_version, r.kind): r for r in RESOURCES}


def seed(emulator: Any, objects: Iterable[dict[str, Any]]) -> None:
    """Put objects into the kmock Kubernetes emulator, as if created through its API."""
    for resource in RESOURCES:
        emulator.resources[resource] = {}
    for obj in objects:
        resource = BY_KIND[(obj["apiVersion"], obj["kind"])]
        meta = obj["metadata"]
        emulator.objects[resource, meta.get("namespace") if resource.namespaced else None, meta["name"]] = obj


def api_host(emulator: Any) -> str:
    return str(emulator.url).rstrip("/")


async def watched_store(emulator: Any, settings: Settings | None = None, timing: Timing = TEST_TIMING) -> WatchedClusterStore:
    """The watch-backed store on the emulator, started and synced."""
    store = WatchedClusterStore.for_host(api_host(emulator), settings or Settings(), timing)
    store.start()
    try:
        await store.wait_synced(timeout=10)
    except BaseException:
        await store.close()
        raise
    return store


@pytest.fixture(params=["snapshot", "cluster", "watched"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def emulator(store_kind: str, request: pytest.FixtureRequest) -> Any:
    """The kmock Kubernetes emulator for cluster-store runs (None for snapshot runs)."""
    return request.getfixturevalue("kmock") if store_kind != "snapshot" else None


@pytest.fixture
async def make_store(store_kind: str, emulator: Any) -> Any:
    """A factory: objects → a Store holding them: a YAML snapshot, plain GETs on kmock
    (kubernetes-asyncio), or the watch caches on kmock, synced before it is returned."""
    made: list[Any] = []

    async def factory(objects: Iterable[dict[str, Any]], settings: Settings | None = None) -> Any:
        objects = list(objects)
        if store_kind == "snapshot":
            return SnapshotStore(objects)
        seed(emulator, objects)
        if store_kind == "watched":
            store = await watched_store(emulator, settings)
        else:
            store = ClusterStore.for_host(api_host(emulator))
        made.append(store)
        return store

    yield factory
    for store in made:
        await store.close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA and a serving certificate for localhost/127.0.0.1, made with the project's own code."""
    out = tmp_path_factory.mktemp("tls")
    certs.write(certs.generate(["localhost", "127.0.0.1"], days=2), out)
    return {"ca": out / "ca.crt", "cert": out / "tls.crt", "key": out / "tls.key"}


class ReadOnly(Exception):
    """Raised by a change to an object the caches share between readers."""


class FrozenDict(dict):
    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ReadOnly("an object the caches share was changed")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse


class FrozenList(list):
    _refuse = FrozenDict._refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = sort = reverse = _refuse


def frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenDict((k, frozen(v)) for k, v in value.items())
    if isinstance(value, list):
        return FrozenList(frozen(v) for v in value)
    return value


@pytest.fixture(autouse=True)
def shared_objects_are_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test that reads the caches' shared objects (`Table.read`: the admission path and
    the checks' view) gets them frozen: whatever changes one fails (the caches hand them to
    every reader, so none may change them)."""
    from webhook.cluster.table import Table

    read = Table.read

    def read_frozen(self: Table, key: str) -> Any:
        obj = read(self, key)
        if obj is not None and not isinstance(obj, FrozenDict):
            obj = self.shared[key] = frozen(obj)  # and so for the readers that look there first
        return obj

    monkeypatch.setattr(Table, "read", read_frozen)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A real etcd and kube-apiserver for the whole session, KubeVirt's and Longhorn's CRDs
    installed (kubefake/envtest.py). Skipped without KUBEBUILDER_ASSETS; failed so in CI."""
    from kubefake.envtest import ControlPlane, assets, in_ci

    found = assets()
    if isinstance(found, str):
        if in_ci():
            pytest.fail(found)
        pytest.skip(found)
    plane = ControlPlane(found, tmp_path_factory.mktemp("envtest")).start()
    try:
        plane.install_crds()
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def scheduler(control_plane: Any) -> Any:
    """The control plane with kube-scheduler running (started once, for the tests that need it)."""
    control_plane.start_scheduler()
    return control_plane
