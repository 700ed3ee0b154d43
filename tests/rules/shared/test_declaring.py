"""What a declaration of the fields the rules read keeps: whatever a reader declares, the cache's
shape built from the declaration keeps, and the reader reads the same from it."""
import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.stores.shapes import trim
from webhook.config import Settings
from webhook.rules.shared.declaring import Fields
from webhook.rules.shared.reading import Malformed

KEYS = st.text("abcdefghijklmnopqrstuvwxyzABC", min_size=1, max_size=8)
ANNOTATION_KEYS = st.builds(lambda prefix, name: f"{prefix}.example.com/{name}", KEYS, KEYS)
VALUES = st.one_of(st.text(max_size=5), st.integers(), st.booleans(), st.dictionaries(KEYS, st.integers(), max_size=3))


@st.composite
def paths(draw):
    """A dotted path of a few keys, some of them lists ("spec.disks[].bus")."""
    keys = draw(st.lists(KEYS, min_size=1, max_size=4))
    return [(key, draw(st.booleans()) if i < len(keys) - 1 else False) for i, key in enumerate(keys)]


def dotted(path):
    return ".".join(key + ("[]" if each else "") for key, each in path)


def put(obj, path, value):
    """`obj` with `value` at `path`, each list of two items (the second holding the path)."""
    holder = obj
    for key, each in path[:-1]:
        inner = {}
        holder[key] = [{"noise": 1}, inner] if each else inner
        holder = inner
    holder[path[-1][0]] = value
    return obj


def get(obj, path):
    """What a reader finds at `path` (through lists: in each item that has it)."""
    found = [obj]
    for key, each in path:
        found = [item.get(key) for item in found if isinstance(item, dict)]
        if each:
            found = [item for value in found if isinstance(value, list) for item in value]
    return [value for value in found if value is not None]


def inside(other, path):
    return len(other) > len(path) and [k for k, _ in other[:len(path)]] == [k for k, _ in path]


@settings(max_examples=200, deadline=None)
@given(path=paths(), value=VALUES, others=st.lists(paths(), max_size=3), noise=st.dictionaries(KEYS, VALUES, max_size=3))
def test_a_field_a_reader_declares_is_kept_with_its_value(path, value, others, noise):
    """Declared beside other fields (none beneath it: those would keep only their part of it),
    a field keeps its value whatever else the object holds."""
    fields = Fields("Thing")
    for other in others:
        if not inside(other, path):
            fields.field(dotted(other))
    field = fields.field(dotted(path))
    obj = put(copy.deepcopy(noise), path, value)
    kept = trim(obj, fields.keep(Settings()))
    assert get(kept, path) == get(obj, path) == [value]
    holders = [kept] + [h for h in get(kept, path[:-1]) if isinstance(h, dict)] if len(path) > 1 else [kept]
    assert field.value(holders[-1]) == value


def test_a_settings_key_is_kept_as_the_settings_name_it():
    fields = Fields("Thing")
    opt_in = fields.annotation(lambda s: s.opt_in_annotation)
    obj = {"metadata": {"annotations": {"example.com/in": "true", "other": "x"}}}
    chosen = Settings(opt_in_annotation="example.com/in")
    assert trim(obj, fields.keep(chosen)) == {"metadata": {"annotations": {"example.com/in": "true"}}}
    with pytest.raises(TypeError):
        opt_in.of(obj)


def test_a_field_reads_typed_and_names_where_it_is():
    fields = Fields("VMI")
    ended = fields.field("status.migrationState.endTimestamp")
    status = fields.field("status")
    assert status.obj({"status": {"a": 1}}) == {"a": 1} and status.obj({}) == {}
    for read, holder, message in ((status.obj, {"status": []}, "VMI.status is a list, not an object"),
                                  (ended.time, {"endTimestamp": "soon"}, "status.migrationState.endTimestamp 'soon'")):
        try:
            read(holder)
        except Malformed as exc:
            assert str(exc).startswith(message)
        else:
            raise AssertionError(f"{holder} read without complaint")


def test_the_caches_keep_every_field_and_annotation_declared_and_nothing_else():
    fields = Fields("VMI")
    fields.field("status.nodeName")
    fields.field("status.phase")
    fields.annotation("example.com/a")
    kept = fields.keep(Settings())
    assert set(kept) == {"status", "metadata"} and kept["status"] == {"nodeName": True, "phase": True}
    assert kept["metadata"]["annotations"]("example.com/a") and not kept["metadata"]["annotations"]("example.com/b")
