"""What the rules read of VMIs, migrations and pods, declared once: the keeper's and admission's
caches keep it, a new annotation included, and the readers read it through the declaration."""
import copy

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.kube import launcher_pod_of, vmi
from tests.support.stores import listed_store

from webhook import kinds
from webhook.stores.shapes import shapes
from webhook.config import Settings
from webhook.rules.keeping.running import read_vmi
from webhook.rules.shared.classify import opted_in_launcher, running_exemption
from webhook.rules.shared.declared import _opt_in
from webhook.rules.shared.declaring import Undeclared
from webhook.rules.shared.facts import claims_of
from webhook.rules.shared import declared

SETTINGS = Settings()

KEYS = st.text("abcdefghijklmnopqrstuvwxyzABC", min_size=1, max_size=8)
ANNOTATION_KEYS = st.builds(lambda prefix, name: f"{prefix}.example.com/{name}", KEYS, KEYS)


@settings(max_examples=100, deadline=None)
@given(key=ANNOTATION_KEYS, value=st.text(max_size=5), opt_in=st.sampled_from(["kubevirt-scheduler/co-schedule",
                                                                               "example.com/colocate"]))
def test_an_annotation_a_rule_starts_reading_on_a_vmi_is_kept_by_the_keepers_cache(key, value, opt_in):
    """A hold on a new annotation declares it (`declared.VMI.annotation`): the keeper's VMI cache
    keeps it, and the VMI's view has it, the opt-in of the settings beside it."""
    whole = vmi("vm1", "node-a", "d1", opted_in=True)
    whole["metadata"]["annotations"] = {key: value, opt_in: "true", "example.com/unread": "x"}
    the_settings = Settings(opt_in_annotation=opt_in)
    extended = copy.deepcopy(declared.VMI)
    extended.shaped = False  # a declaration not yet shaped
    new = extended.annotation(key)
    original = declared.VMI
    declared.VMI = extended
    try:
        kept = shapes(the_settings)["VirtualMachineInstance"](copy.deepcopy(whole))
        view = read_vmi(kept, the_settings)
    finally:
        declared.VMI = original
    assert new.of(kept) == value
    assert view.annotations[key] == value and view.opted_in
    assert "example.com/unread" not in kept["metadata"]["annotations"]


def test_every_replica_keeps_of_a_vmi_what_the_keeper_and_status_read():
    """One shape for every cache of VMIs: what admission reads (its disks, what its migration target
    is rendered from) and what the keeper reads (conditions, migrations, the declared annotations)
    alike, so a rule reads the same VMI wherever it runs."""
    from webhook.stores.cache import WatchedClusterStore
    from webhook.keeper.kubevirt_api import KubeVirtWatch

    the_settings = Settings()
    whole = vmi("vm1", "node-a", "d1", "d2", migrated_from="node-b", opted_in=True)
    kept = shapes(the_settings)["VirtualMachineInstance"](copy.deepcopy(whole))
    assert claims_of(kept) == claims_of(whole) == ["d1", "d2"]
    assert read_vmi(kept, the_settings) == read_vmi(whole, the_settings)
    admission, keeper = WatchedClusterStore(None, the_settings), KubeVirtWatch(None, the_settings)
    assert admission.vmis.shape(copy.deepcopy(whole)) == keeper.vmis.shape(copy.deepcopy(whole)) == kept
    assert set(declared.VMI.keep(the_settings)["status"]) >= {"nodeName", "machine", "conditions", "migrationState", "phase"}


def test_the_pods_annotations_kept_are_those_the_rules_read():
    """The opt-in of the settings, our decisions (the prefix), the provisioning pod's mark."""
    ours = declared.POD.named("annotations", Settings(opt_in_annotation="example.com/colocate"))
    assert [key for key in ("example.com/colocate", "kubevirt-scheduler/decision", "kubevirt-scheduler/anything",
                            "kubevirt.io/ephemeral-provisioning", "kubevirt.io/co-schedule", "other/x")
            if ours(key)] == ["example.com/colocate", "kubevirt-scheduler/decision", "kubevirt-scheduler/anything",
                              "kubevirt.io/ephemeral-provisioning"]
    pod = launcher_pod_of(vmi("vm1", "node-a", "d1"), "node-a")
    assert claims_of(pod) == ["d1"]


# --------------------------------------------------------------------------- a launcher pod's annotations

HOLD = "example.com/hold"  # an annotation a new rule starts reading on launcher pods


def held(pod):
    """A rule reading a launcher pod's annotation, as a hold would: is the VM asked to stay?"""
    return kinds.annotations(pod).get(HOLD) == "yes"


def cached_launcher(the_settings=Settings()):
    """The launcher pod of an opted-in VM carrying HOLD, whole and as the pod cache hands it out."""
    whole = launcher_pod_of(vmi("vm1", "node-a", "d1"), "node-a")
    whole["metadata"]["annotations"].update({HOLD: "yes", the_settings.opt_in_annotation: "true"})
    store = listed_store([whole], the_settings)
    [kept] = store.launcher_pods(whole["metadata"]["namespace"], whole["metadata"]["labels"][kinds.CREATED_BY_LABEL])
    return whole, kept


def test_a_rule_reading_an_undeclared_launcher_pod_annotation_from_the_caches_fails_naming_the_declaration():
    """On the whole pod the rule would pass its tests; the cache keeps only declared annotations, so
    in production it would read nothing. Its first read of a cached pod says what to declare."""
    whole, kept = cached_launcher()
    assert held(whole)
    with pytest.raises(Undeclared, match=rf"the Pod annotation '{HOLD}' is read but not declared: declare it with "
                                         rf"`POD.annotation\('{HOLD}'\)`, beside the rule that reads it or in "
                                         r"webhook/rules/shared/declared.py"):
        held(kept)
    with pytest.raises(Undeclared):
        assert HOLD in kinds.annotations(kept)
    # What the rules read is declared, and reads as before; the pod is still a plain object to the rest.
    assert opted_in_launcher(kept, SETTINGS) is None and running_exemption(kept, SETTINGS) is None
    assert orjson.loads(orjson.dumps(kept)) == kept and copy.deepcopy(kept) == kept


def test_a_launcher_pod_annotation_once_declared_is_kept_and_read(monkeypatch):
    keys = {**declared.POD.keys, "annotations": [*declared.POD.keys["annotations"], HOLD]}
    monkeypatch.setattr(declared.POD, "keys", keys)  # the declaration added: `POD.annotation(HOLD)`
    _, kept = cached_launcher()
    assert held(kept)


def test_a_rule_whose_pod_annotation_declaration_is_taken_out_fails_rather_than_reads_nothing(monkeypatch):
    """The opt-in without its declaration: not "not opted in" (the cache dropped it), but Undeclared.
    (The default opt-in shares the decisions' prefix, which is declared too: another key here.)"""
    keys = {**declared.POD.keys, "annotations": [k for k in declared.POD.keys["annotations"] if k is not _opt_in]}
    monkeypatch.setattr(declared.POD, "keys", keys)
    the_settings = Settings(opt_in_annotation="example.com/colocate")
    _, kept = cached_launcher(the_settings)
    with pytest.raises(Undeclared, match=r"declare it with `POD.annotation\('example.com/colocate'\)`"):
        opted_in_launcher(kept, the_settings)
