"""Reading the objects the checks judge: absent parts read as empty, parts of another shape are
Unreadable and say which; names and keys as the checks' reasons show them."""
import pytest
from tests.support.kube import node, share_manager_pod, vm_pod

from webhook.rules.fit.fields import as_list, as_mapping, name_of, namespace_of, pod_key, pod_spec, Unreadable


def test_absent_parts_read_as_empty():
    assert as_mapping(None, "affinity") == {} and as_list(None, "tolerations") == []
    spec = vm_pod()["spec"]
    assert pod_spec(vm_pod()) == spec
    assert as_list(spec["volumes"], "volumes") is spec["volumes"]


@pytest.mark.parametrize("read, value, words", [
    (as_mapping, ["x"], "affinity is not an object"),
    (as_mapping, "x", "affinity is not an object"),
    (as_list, {"a": 1}, "affinity is not a list"),
    (as_list, "x", "affinity is not a list"),
], ids=["list-for-object", "text-for-object", "object-for-list", "text-for-list"])
def test_a_part_of_another_shape_says_which(read, value, words):
    with pytest.raises(Unreadable) as raised:
        read(value, "affinity")
    assert str(raised.value) == words


@pytest.mark.parametrize("pod, words", [([], "the pod is not an object"), ({"spec": []}, "pod spec is not an object")],
                         ids=["pod", "spec"])
def test_a_pod_of_another_shape_is_unreadable(pod, words):
    with pytest.raises(Unreadable, match=words):
        pod_spec(pod)


def test_names_and_keys():
    assert name_of(node("node-b")) == "node-b" and name_of({"metadata": {"name": 7}}) == "?" and name_of(None) == "?"
    pod = share_manager_pod("pvc-d1", "node-b")
    assert (pod_key(pod), namespace_of(pod)) == ("longhorn-system/share-manager-pvc-d1", "longhorn-system")
    assert namespace_of(vm_pod()) == ""  # a pod under admission may leave its namespace to the request
