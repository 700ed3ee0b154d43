"""The one reader of VMIs, migrations and the keeper's Lease that the keeper and `status` share."""
from datetime import timedelta

import pytest
from tests.support.keeping import NOW, SETTINGS, stamp, vmi_obj, vmim

from webhook.rules.keeping.listed import read_kubevirt, read_lease


def broken(opted_in):
    obj = vmi_obj()
    obj["metadata"]["name"] = "vm8"
    obj["status"]["nodeName"] = 7
    if not opted_in:
        obj["metadata"]["annotations"] = {}
    return obj


def test_every_object_is_read_once_and_what_is_of_unexpected_shape_said_when_it_is_ours():
    bad_migration = vmim(name="vm1-bad")
    bad_migration["spec"]["vmiName"] = 3
    seen = read_kubevirt(iter([vmi_obj(), broken(opted_in=True), broken(opted_in=False)]),
                         [vmim(), bad_migration], SETTINGS)
    assert [v.name for v in seen.views] == ["vm1"] and [v.name for v in seen.running] == ["vm1"]
    assert [m.name for m in seen.migrations] == ["vm1-colocate-abcde"]
    assert [str(m).split(":")[0] for m in seen.malformed] == ["VMIM default/vm1-bad", "VMI default/vm8"]


@pytest.mark.parametrize("spec, words", [
    ({"holderIdentity": "pod-a", "renewTime": stamp(NOW - timedelta(seconds=5)), "leaseDurationSeconds": 15},
     "pod-a (renewed 5s ago)"),
    ({"holderIdentity": "pod-a", "renewTime": stamp(NOW - timedelta(seconds=20)), "leaseDurationSeconds": 15},
     "none (pod-a's Lease ran out 5s ago)"),
    ({"holderIdentity": "", "renewTime": stamp(NOW), "leaseDurationSeconds": 1}, "none (the Lease is released)"),
    ({"holderIdentity": "pod-a"}, "pod-a"),
    ({"holderIdentity": 3, "leaseDurationSeconds": True}, "none (the Lease is released)"),
], ids=["held", "ran-out", "released", "no-renewal", "garbled"])
def test_the_lease_says_who_leads(spec, words):
    assert read_lease({"spec": spec}).words(NOW) == words
