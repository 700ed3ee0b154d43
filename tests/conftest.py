from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from tests.support.stores import FrozenDict, api_host, for_host, frozen, seed, watched_store
from webhook.stores.direct import ClusterStore
from webhook.stores.snapshot import SnapshotStore
from webhook.config import Settings
from webhook.tools import certs


# Property tests draw the same examples every run (CI included), so that a failure is the same on
# every machine until it is fixed; HYPOTHESIS_PROFILE=explore draws new ones each run, for a run
# meant to find what the fixed ones miss. Loaded before any test module sets its own @settings.
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False, deadline=None, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test on the real control plane is marked `real`, whichever module it is in."""
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real)


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
            store = ClusterStore(for_host(api_host(emulator)))
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
    installed (kubefake/envtest.py). Skipped, CI included, without KUBEBUILDER_ASSETS (the
    project ships no control-plane binaries; `make test-real` fails instead)."""
    from kubefake.envtest import ControlPlane, assets

    found = assets()
    if isinstance(found, str):
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
