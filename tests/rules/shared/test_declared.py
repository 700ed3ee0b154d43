"""What the rules read of VMIs, migrations and pods, declared once: the keeper's and admission's
caches keep it, a new annotation included, and the readers read it through the declaration."""
import copy

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.kube import launcher_pod_of, vmi

from webhook.cluster.shapes import pod_annotations, shapes, vmi_kept
from webhook.config import Settings
from webhook.rules.keeping.running import read_vmi
from webhook.rules.shared.facts import claims_of
from webhook.rules.shared import declared

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
    from webhook.cluster.cache import WatchedClusterStore
    from webhook.cluster.kubevirt_api import KubeVirtWatch

    the_settings = Settings()
    whole = vmi("vm1", "node-a", "d1", "d2", migrated_from="node-b", opted_in=True)
    kept = shapes(the_settings)["VirtualMachineInstance"](copy.deepcopy(whole))
    assert claims_of(kept) == claims_of(whole) == ["d1", "d2"]
    assert read_vmi(kept, the_settings) == read_vmi(whole, the_settings)
    admission, keeper = WatchedClusterStore(None, the_settings), KubeVirtWatch(None, the_settings)
    assert admission.vmis.shape(copy.deepcopy(whole)) == keeper.vmis.shape(copy.deepcopy(whole)) == kept
    assert set(vmi_kept(the_settings)["status"]) >= {"nodeName", "machine", "conditions", "migrationState", "phase"}


def test_the_pods_annotations_kept_are_those_the_rules_read():
    """The opt-in of the settings, our decisions (the prefix), the provisioning pod's mark."""
    ours = pod_annotations(Settings(opt_in_annotation="example.com/colocate"))
    assert [key for key in ("example.com/colocate", "kubevirt-scheduler/decision", "kubevirt-scheduler/anything",
                            "kubevirt.io/ephemeral-provisioning", "kubevirt.io/co-schedule", "other/x")
            if ours(key)] == ["example.com/colocate", "kubevirt-scheduler/decision", "kubevirt-scheduler/anything",
                              "kubevirt.io/ephemeral-provisioning"]
    pod = launcher_pod_of(vmi("vm1", "node-a", "d1"), "node-a")
    assert claims_of(pod) == ["d1"]
