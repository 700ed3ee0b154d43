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


async def test_kubevirt_unpause_clears_the_paused_condition_and_refuses_as_virt_api_does():
    """virt-api's `unpause` (`pkg/virt-api/rest/lifecycle.go`): 409 for a VMI not running or without
    a Paused condition, whatever its reason; otherwise the condition goes (virt-handler's part)."""
    from kubefake.apiserver import Apiserver, Call
    from kubefake.kubevirt import VMIS, pause_condition

    apiserver = Apiserver()
    apiserver.resources[VMIS] = {}
    vmi = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
           "metadata": {"name": "vm1", "namespace": "default"},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
                                                         pause_condition("PausedIOError")]}}
    await apiserver.create(Call("POST", VMIS, "default", data=vmi))
    unpause = Call("PUT", kmock.resource("subresources.kubevirt.io", "v1", "virtualmachineinstances"), "default", "vm1",
                   data={}, subresource="unpause")
    assert await apiserver.answer(unpause) == {}
    stored = (await apiserver.fetch(Call("GET", VMIS, "default", "vm1")))["status"]
    assert [c["type"] for c in stored["conditions"]] == ["Ready"]
    with pytest.raises(kmock.KubernetesError) as refused:
        await apiserver.answer(unpause)
    assert refused.value.status == 409 and refused.value.message.endswith('"vm1": VMI is not paused')
    await apiserver.patch(Call("PATCH", VMIS, "default", "vm1", data={"status": {"phase": "Succeeded"}}))
    with pytest.raises(kmock.KubernetesError) as stopped:
        await apiserver.answer(unpause)
    assert stopped.value.status == 409 and stopped.value.message.endswith("VMI is not running")
