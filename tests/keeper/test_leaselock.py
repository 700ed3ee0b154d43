"""The keeper's one extension of kubernetes-asyncio's leader election (webhook/keeper/leaselock.py)
rests on these parts of the library: when one changes under it, this fails first."""
import inspect
import re

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.leaderelection import leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from webhook.keeper.leaselock import ReportingLeaseLock


def test_leader_election_calls_only_what_the_lock_overrides():
    called = set(re.findall(r"\.lock\.(\w+)\(", inspect.getsource(leaderelection)))
    assert called == {"get", "create", "update"}
    assert {"get", "create", "update"} <= set(vars(ReportingLeaseLock))


def test_the_library_lock_has_what_ours_reuses():
    assert list(inspect.signature(LeaseLock.__init__).parameters) == ["self", "name", "namespace", "identity",
                                                                       "api_client"]
    assert list(inspect.signature(LeaseLock.update_lease).parameters)[:3] == ["self", "leader_election_record",
                                                                               "current_spec"]
    source = inspect.getsource(LeaseLock)
    assert "self.lease_reference" in source and "self.api_instance" in source and "def election_record" in source


def test_the_lease_calls_take_a_request_timeout():
    ours = inspect.getsource(ReportingLeaseLock)
    for name in ("read_namespaced_lease", "create_namespaced_lease", "replace_namespaced_lease"):
        assert re.search(rf"{name}\([^)]*_request_timeout=", ours), name
        assert "_request_timeout" in inspect.getsource(getattr(k8s.CoordinationV1Api, f"{name}_with_http_info"))
