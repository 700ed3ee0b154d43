from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from webhook import certs  # noqa: E402
from webhook.store import RESOURCES, ClusterStore, SnapshotStore  # noqa: E402

BY_KIND = {(r.api_version, r.kind): r for r in RESOURCES}


def seed(emulator: Any, objects: Iterable[dict[str, Any]]) -> None:
    """Put objects into the kmock Kubernetes emulator, as if created through its API."""
    for resource in RESOURCES:
        emulator.resources[resource] = {}
    for obj in objects:
        resource = BY_KIND[(obj["apiVersion"], obj["kind"])]
        meta = obj["metadata"]
        emulator.objects[resource, meta.get("namespace") if resource.namespaced else None, meta["name"]] = obj


@pytest.fixture(params=["snapshot", "cluster"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def emulator(store_kind: str, request: pytest.FixtureRequest) -> Any:
    """The kmock Kubernetes emulator for cluster-store runs (None for snapshot runs)."""
    return request.getfixturevalue("kmock") if store_kind == "cluster" else None


@pytest.fixture
async def make_store(store_kind: str, emulator: Any) -> Any:
    """A factory: objects → a Store holding them, a YAML snapshot or kubernetes-asyncio on kmock."""
    made: list[Any] = []

    async def factory(objects: Iterable[dict[str, Any]]) -> Any:
        objects = list(objects)
        if store_kind == "snapshot":
            return SnapshotStore(objects)
        seed(emulator, objects)
        store = ClusterStore.for_host(str(emulator.url).rstrip("/"))
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


CertFactory = Callable[[list[str]], dict[str, Path]]
