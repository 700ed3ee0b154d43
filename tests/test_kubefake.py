"""kubefake's apiserver where it stands in for a real one: lists by label selector, and watches
from a resourceVersion, as the apiserver serves them."""
from __future__ import annotations

import asyncio

import kmock
import pytest

from kubefake.apiserver import label_selector


@pytest.mark.parametrize("selector, selected", [
    ("", True),
    ("name=rel,owner=helm", True),
    ("name==rel", True),
    ("name=other", False),
    ("owner!=helm", False),
    ("status in (deployed, superseded)", True),
    ("status notin (deployed)", False),
    ("absent notin (x)", True),
    ("owner", True),
    ("!owner", False),
    ("!absent,name in (rel)", True),
])
def test_label_selectors(selector, selected):
    assert label_selector(selector)({"name": "rel", "owner": "helm", "status": "deployed"}) is selected


def call(method, name=None, params=None, data=None):
    from kubefake.apiserver import Call
    from webhook.kinds import POD

    resource = kmock.resource(POD.group, POD.version, POD.plural)
    return Call(method, resource, "default", name, params or {}, data)


async def watched(apiserver, since, count):
    """The first `count` events of a watch of pods from resourceVersion `since` (None: none sent)."""
    params = {"watch": "true"} | ({"resourceVersion": since} if since is not None else {})
    events = apiserver.events(call("GET", params=params))
    found = []
    async with asyncio.timeout(2):
        async for event in events:
            found.append((event["type"], event["object"].get("metadata", {}).get("name")))
            if len(found) == count:
                break
    await events.aclose()
    return found


def pod(name):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}


async def test_a_watch_from_the_lists_resource_version_sends_only_what_changed_after_it():
    """As the apiserver's watch cache: a reflector that listed does not get every object again."""
    from kubefake.apiserver import Apiserver

    apiserver = Apiserver()
    apiserver.resources[call("GET").resource] = {}
    await apiserver.create(call("POST", data=pod("a")))
    listed = await apiserver.list(call("GET"))
    await apiserver.create(call("POST", data=pod("b")))
    assert await watched(apiserver, listed["metadata"]["resourceVersion"], 1) == [("ADDED", "b")]
    await apiserver.patch(call("PATCH", "a", data={"metadata": {"labels": {"x": "y"}}}))
    later = await apiserver.list(call("GET"))
    assert await watched(apiserver, listed["metadata"]["resourceVersion"], 2) == [("ADDED", "b"), ("MODIFIED", "a")]
    await apiserver.delete(call("DELETE", "b"))
    assert await watched(apiserver, later["metadata"]["resourceVersion"], 1) == [("DELETED", "b")]
    # From no resourceVersion (or "0"): every object first.
    assert await watched(apiserver, None, 1) == [("ADDED", "a")]
    assert await watched(apiserver, "0", 1) == [("ADDED", "a")]


async def test_a_watch_from_a_resource_version_no_longer_kept_is_410_gone():
    from kubefake.apiserver import Apiserver

    apiserver = Apiserver(history=2)
    apiserver.resources[call("GET").resource] = {}
    listed = await apiserver.list(call("GET"))
    for name in ("a", "b", "c"):
        await apiserver.create(call("POST", data=pod(name)))
    events = apiserver.events(call("GET", params={"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}))
    event = await anext(events)
    assert event["type"] == "ERROR" and event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    await events.aclose()
