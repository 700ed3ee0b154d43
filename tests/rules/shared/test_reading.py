"""Reading KubeVirt objects for the keeper: typed fields of a VMI and a migration as KubeVirt
stores them, and the words for each field of unexpected shape (the object is then left alone)."""
import copy
from datetime import UTC, datetime

import pytest
from tests.support.kube import load

from webhook.rules.shared.reading import Malformed, read_identity, read_time, read_typed

VMI = load("vmi-migrated.yaml")
MIGRATION = load("vmim-evacuation.yaml")
STATE = VMI["status"]["migrationState"]


def read_bool(container, key, where):
    """A boolean field, as the rules read one (`declaring.Field.flag`)."""
    return read_typed(container, key, where, bool)


def read_str(container, key, where):
    """A string field, as the rules read one (`declaring.Field.text`)."""
    return read_typed(container, key, where, str)


def read_object(container, key, where):
    """An object field, as the rules read one (`declaring.Field.obj`)."""
    return read_typed(container, key, where, dict)


def test_the_fields_of_kubevirts_own_objects():
    assert read_time(MIGRATION["metadata"], "creationTimestamp", "metadata") == datetime(2026, 11, 20, 9, 58, tzinfo=UTC)
    assert read_time(STATE, "endTimestamp", "migrationState") == datetime(2026, 11, 20, 9, 58, 31, tzinfo=UTC)
    assert read_str(STATE, "targetNode", "migrationState") == "node-a"
    assert read_bool(STATE, "completed", "migrationState") is True
    assert read_object(VMI, "status", "VMI")["nodeName"] == "node-a"
    assert read_identity(VMI, "VMI")[:2] == ("default", "vm1")
    assert read_identity(MIGRATION, "migration")[2] is MIGRATION["metadata"]


@pytest.mark.parametrize("read, key, empty", [
    (read_time, "startTimestamp", None), (read_str, "sourcePod", ""), (read_bool, "failed", False),
    (read_object, "migrationConfiguration", {}),
], ids=["time", "string", "boolean", "object"])
def test_an_absent_field_reads_as_empty(read, key, empty):
    state = {k: v for k, v in STATE.items() if k != key}
    got = read(state, key, "migrationState")
    assert got == empty and type(got) is type(empty)


def test_an_empty_time_is_no_time():
    assert read_time(dict(STATE, endTimestamp=""), "endTimestamp", "migrationState") is None


@pytest.mark.parametrize("read, key, value, words", [
    (read_time, "endTimestamp", "yesterday", "migrationState.endTimestamp 'yesterday' is not an RFC 3339 time"),
    (read_time, "endTimestamp", "2026-11-20T09:58:31Z" + "9" * 100,
     f"migrationState.endTimestamp {('2026-11-20T09:58:31Z' + '9' * 100)[:40]!r} is not an RFC 3339 time"),
    (read_str, "targetNode", 7, "migrationState.targetNode is a int, not a string"),
    (read_bool, "completed", "true", "migrationState.completed is a str, not a boolean"),
    (read_object, "mode", ["PreCopy"], "migrationState.mode is a list, not an object"),
], ids=["time-words", "time-clipped", "string-number", "boolean-string", "object-list"])
def test_a_field_of_unexpected_shape_says_which_and_what(read, key, value, words):
    with pytest.raises(Malformed) as raised:
        read(dict(STATE, **{key: value}), key, "migrationState")
    assert str(raised.value) == words


def renamed(obj, **metadata):
    obj = copy.deepcopy(obj)
    obj["metadata"].update(metadata)
    return obj


@pytest.mark.parametrize("obj, words", [
    ([VMI], "a VMI is a list, not an object"),
    (dict(VMI, metadata="vm1"), "VMI.metadata is a str, not an object"),
    (renamed(VMI, name=None), "metadata.namespace/name 'default'/'' is not a valid object name"),
    (renamed(VMI, name="VM_1"), "metadata.namespace/name 'default'/'VM_1' is not a valid object name"),
    (renamed(VMI, namespace=["default"]), "metadata.namespace is a list, not a string"),
    (renamed(VMI, name="x" * 300), f"metadata.namespace/name 'default'/{'x' * 60!r} is not a valid object name"),
], ids=["not-an-object", "metadata-not-an-object", "no-name", "invalid-name", "namespace-not-a-string", "clipped"])
def test_an_object_without_a_readable_identity(obj, words):
    with pytest.raises(Malformed) as raised:
        read_identity(obj, "VMI")
    assert str(raised.value) == words


def test_a_malformed_object_says_which_and_why():
    assert str(Malformed("status.nodeName is a int, not a string").of("VMI default/vm1")) == \
        "VMI default/vm1: status.nodeName is a int, not a string"
