"""The keeper on the kmock emulator: fixtures for a cluster with KubeVirt and keepers driven pass by pass."""
from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests.support.stores import api_host, for_host, watched_store
from tests.support.kubevirt_api import TIMING, Cluster, KubeVirtApi

from webhook.cluster.events import EventSink
from webhook.config import Settings
from webhook.keeper.keeper import Keeper, KeeperTiming
from webhook.keeper.records import state_name, StateStore


@pytest.fixture
def kmock_options(kmock_options: dict[str, Any]) -> dict[str, Any]:
    return {**kmock_options, "cls": KubeVirtApi}


@pytest.fixture
def cluster(kmock: Any) -> Cluster:
    return Cluster(kmock)


@pytest.fixture
async def make_keeper(kmock: Any):
    """A factory: settings → a Keeper on the emulator, its watches started and synced, its state kept in
    the ConfigMap `default/kubevirt-colocate-keeper-state` (where `status --lease-namespace default` reads it)."""
    made: list[tuple[Any, Any, Any, Any]] = []

    async def factory(settings: Settings | None = None, timing: KeeperTiming = TIMING, **options: Any) -> Keeper:
        settings = settings or Settings(keep="migrate", keep_after=0)
        store = await watched_store(kmock, settings)
        api = for_host(api_host(kmock))
        events = EventSink(api)
        kmock.resources.setdefault("v1/configmaps", {})  # the keeper's state, beside its Lease (`default` here)
        options.setdefault("state", StateStore(api, "default", state_name(settings), timeout=timing.request_timeout))
        keeper = Keeper(api, store, settings, events=events, timing=timing, **options)
        watching = keeper.watching()
        watch = await watching.__aenter__()
        made.append((watching, events, store, api))
        await asyncio.wait_for(watch.wait_synced(), 5)
        return keeper

    yield factory
    for watching, events, store, api in made:
        await watching.__aexit__(None, None, None)
        await events.close()
        await store.close()
        await api.close()
