"""The keeper's decision: move an apart VM back to its storage, or what holds it."""
import dataclasses
import re
from datetime import timedelta

import pytest
from tests.support.keeping import NOW, ago, at, evacuation, fact, failed, succeeded, view, vmi_obj

from webhook.rules.keeping.apart import APART, locality
from webhook.config import KeepMode
from webhook.rules.shared.alone import Alone
from webhook.rules.keeping.record import Action, Refusal
from webhook.rules.keeping.keep import HOLDS as KEEPER_HOLDS
from webhook.rules.keeping.keep import (CHECKS, ON_DEMAND, Limits, PassFacts, VmFacts, decide_keep,
                                        next_read, next_step)
from webhook.rules.keeping.migrations import read_migration
from webhook.rules.shared import declared
from webhook.rules.shared.declaring import Undeclared

# --------------------------------------------------------------------------- the decision

APART_VMI = view()  # runs on node-a, migrated there from node-b
APART_WHERE = locality("node-a", [fact("vm1-rootdisk", "node-b")])
# The descheduler's eviction moved the VM off node-b at 09:58:31, two hours before NOW.
DESCHEDULED = read_migration(evacuation())
HOLD_ENDS = at("2026-11-20T15:58:31Z")  # six hours later
READY = dict(
    now=NOW, apart_since=ago(minutes=15), limits=Limits(), history=[], in_flight_ours=0, in_flight_all=0,
    vmi_migrating=False, last_end=ago(hours=2), target_unfit=None, targeted=True, mode=KeepMode.MIGRATE,
)


REFUSED = Refusal(namespace="default", name="vm1", action=Action.MIGRATE, count=2, retry=NOW + timedelta(minutes=5),
               words="creating a migration failed: API answered 403: virtualmachineinstancemigrations.kubevirt.io "
                     "\"vm1-colocate-x\" is forbidden: ValidatingAdmissionPolicy 'tenant-no-migrations' denied request",
               status=403)
VM_FACTS = {"apart_since", "target_unfit", "history", "vmi_migrating", "last_end", "descheduled", "settling",
            "refused", "stale", "via", "cannot_finish", "stale_since", "full"}


def facts(vmi=APART_VMI, where=APART_WHERE, **changes):
    """READY's conditions, `changes` over them: the VM's own and the pass's."""
    given = {**READY, **changes}
    vm = {k: v for k, v in given.items() if k in VM_FACTS}
    vm["migrating"] = vm.pop("vmi_migrating")
    vm["history"], vm["settling"] = tuple(vm.get("history", ())), tuple(vm.get("settling", ()))
    rest = {k: v for k, v in given.items() if k not in VM_FACTS}
    rest["outbound"] = {where.node: rest.pop("outbound", 0)}
    return VmFacts(vmi, where, **vm), PassFacts(**rest)


def keep(vmi=APART_VMI, where=APART_WHERE, **changes):
    """The decision with READY's conditions, `changes` over them."""
    return decide_keep(*facts(vmi, where, **changes))


def vmi_with(**changes):
    return dataclasses.replace(APART_VMI, **changes)


def annotated(key, value):
    """The VMI (vmi-migrated.yaml) with one more annotation."""
    obj = vmi_obj()
    obj["metadata"].setdefault("annotations", {})[key] = value
    return obj


def test_an_apart_vm_is_moved_to_its_storage():
    decision = keep()
    assert decision.act and decision.hold is None
    assert (decision.source, decision.target, decision.state) == ("node-a", "node-b", APART)
    assert decision.reason == ("migrating from node-a to node-b: disks served from node-b, the VM runs on node-a;"
                               " apart for 900s")


CANNOT_FINISH = "its disk d uses cache mode writeback"
HOLDS = [
    (vmi_with(opted_in=False), APART_WHERE, {}, Alone.NOT_OPTED_IN, "not opted in"),
    (vmi_with(may_move=False), APART_WHERE, {}, Alone.OPTED_OUT, 'annotated kubevirt-scheduler/keep: "false"'),
    (view(annotated("descheduler.alpha.kubernetes.io/prefer-no-eviction", "")), APART_WHERE, {}, Alone.NO_EVICTION,
     "annotated descheduler.alpha.kubernetes.io/prefer-no-eviction: nothing is to evict it"),
    (vmi_with(phase="Succeeded"), APART_WHERE, {}, Alone.NOT_RUNNING, "VMI is Succeeded, not running on a node"),
    (vmi_with(node=None), APART_WHERE, {}, Alone.NOT_RUNNING, "VMI is Running, not running on a node"),
    (APART_VMI, APART_WHERE, {"full": "paused because its disk d is full (KubeVirt: not enough space on volume d)"},
     Alone.DISK_FULL, "paused because its disk d is full (KubeVirt: not enough space on volume d)"),
    (APART_VMI, locality("node-a", [fact("d", "node-a")]), {}, Alone.NOT_APART,
     "co-located: disks served from node-a, where the VM runs"),
    (APART_VMI, locality("node-a", [fact("d", "node-b"), fact("e", "node-c")]), {}, Alone.NOT_APART,
     "split: disks served from node-b (1), node-c (1), the VM runs on node-a"),
    (APART_VMI, locality("node-a", [fact("d", None)]), {}, Alone.NOT_APART,
     "unresolved: share-manager of d is stopped"),
    (APART_VMI, APART_WHERE, {"stale": "its NFS mount is stale", "cannot_finish": CANNOT_FINISH}, Alone.NEEDS_RESTART,
     "its NFS mount is stale, and it cannot be moved to a fresh mount: its disk d uses cache mode writeback; a restart "
     "mounts the volume afresh (`virtctl restart`)"),
    (APART_VMI, APART_WHERE, {"target_unfit": "node node-b is cordoned"}, Alone.TARGET_UNFIT,
     "cannot move to node-b: node node-b is cordoned"),
    (vmi_with(live_migratable=False, not_migratable="HostDeviceNotLiveMigratable"), APART_WHERE, {},
     Alone.NOT_MIGRATABLE, "not live-migratable: HostDeviceNotLiveMigratable"),
    (APART_VMI, APART_WHERE, {"vmi_migrating": True}, Alone.MIGRATING, "a migration of this VMI is in flight"),
    (APART_VMI, APART_WHERE, {"stale": "its NFS mount is stale", "stale_since": ago(hours=1),
                              "history": [failed(ago(minutes=m), recovers=True) for m in (30, 20, 10)]}, Alone.NEEDS_RESTART,
     "its NFS mount is stale, and it cannot be moved to a fresh mount: 3 recovery migrations of the keeper's since "
     "Longhorn's remount request at 2026-11-20T11:00:00Z did not take it off that mount; a restart mounts the volume "
     "afresh (`virtctl restart`)"),
    (APART_VMI, APART_WHERE, {"descheduled": DESCHEDULED}, Alone.DESCHEDULED,
     "moved off node-b by the descheduler (migration kubevirt-evacuation-x7k2p ended 2026-11-20T09:58:31Z): "
     "not moved back before 2026-11-20T15:58:31Z"),
    (APART_VMI, APART_WHERE, {"apart_since": ago(seconds=120)}, Alone.APART_BRIEFLY, "apart for 120s of 600s"),
    (APART_VMI, APART_WHERE, {"apart_since": None}, Alone.APART_BRIEFLY, "apart for 0s of 600s"),
    (APART_VMI, APART_WHERE, {"apart_since": NOW + timedelta(seconds=5)}, Alone.APART_BRIEFLY, "apart for 0s of 600s"),
    (APART_VMI, APART_WHERE, {"last_end": ago(seconds=30)}, Alone.MIGRATED_RECENTLY,
     "last migration ended 30s ago (wait 600s)"),
    (APART_VMI, APART_WHERE, {"history": [failed(ago(minutes=10))]}, Alone.BACKING_OFF,
     "backing off until 2026-11-20T12:20:00Z after 1 failed migration"),
    (APART_VMI, APART_WHERE, {"history": [failed(ago(hours=3)), failed(ago(minutes=50))]}, Alone.BACKING_OFF,
     "backing off until 2026-11-20T12:10:00Z after 2 failed migrations in a row"),
    (APART_VMI, APART_WHERE, {"history": [succeeded(ago(hours=20)), succeeded(ago(hours=10))]}, Alone.DAILY_LIMIT,
     "migrated 2 times in the last 24h (limit 2)"),
    (APART_VMI, APART_WHERE, {"targeted": False}, Alone.UNTARGETED,
     "targeted migration unavailable (spec.addedNodeSelector needs KubeVirt 1.6)"),
    (APART_VMI, APART_WHERE, {"in_flight_ours": 2, "in_flight_all": 2}, Alone.OUR_LIMIT,
     "2 of our migrations in flight (limit 2)"),
    (APART_VMI, APART_WHERE, {"in_flight_ours": 2, "in_flight_all": 3, "flying": (
        ("node-c", "default/vm2-colocate-x", True), ("node-c", "default/evacuation-x", False),
        ("node-a", "default/vm3 (moved in this pass)", True))}, Alone.OUR_LIMIT,
     "2 of our migrations in flight (limit 2): default/vm2-colocate-x, default/vm3 (moved in this pass)"),
    (APART_VMI, APART_WHERE, {"in_flight_all": 5, "flying": tuple(("node-c", f"ns/m{i}", False) for i in range(5))},
     Alone.CLUSTER_LIMIT, "5 migrations in flight cluster-wide (limit 5): ns/m0, ns/m1, ns/m2, ns/m3, ns/m4"),
    (APART_VMI, APART_WHERE, {"outbound": 2, "in_flight_all": 3, "flying": (
        ("node-a", "default/evacuation-x", False), ("node-c", "default/vm2-colocate-x", True),
        ("node-a", "default/vm3 (moved in this pass)", True))}, Alone.SOURCE_BUSY,
     "2 migrations in flight from node-a (KubeVirt runs 2 per source node): default/evacuation-x, default/vm3 (moved "
     "in this pass): its slots are left to them"),
    (APART_VMI, APART_WHERE, {"in_flight_ours": 2, "deferred": {("default", "vm1"): "not tried in this pass: the keeper's "
                                                                            "requests for vm2, vm3 of namespace "
                                                                            "default failed (…)"}},
     Alone.REFUSED, "not tried in this pass: the keeper's requests for vm2, vm3 of namespace default failed (…)"),
    (APART_VMI, APART_WHERE, {"in_flight_all": 5}, Alone.CLUSTER_LIMIT, "5 migrations in flight cluster-wide (limit 5)"),
    (APART_VMI, APART_WHERE, {"outbound": 2, "in_flight_all": 2}, Alone.SOURCE_BUSY,
     "2 migrations in flight from node-a (KubeVirt runs 2 per source node): its slots are left to them"),
    (APART_VMI, APART_WHERE, {"settling": ["share-manager of pvc-d2 is starting"]}, Alone.SETTLING,
     "waiting for its storage to settle: share-manager of pvc-d2 is starting"),
    (APART_VMI, APART_WHERE, {"refused": REFUSED}, Alone.REFUSED,
     "its migration was refused 2 times in a row (creating a migration failed: API answered 403: "
     "virtualmachineinstancemigrations.kubevirt.io \"vm1-colocate-x\" is forbidden: ValidatingAdmissionPolicy "
     "'tenant-no-migrations' denied request); retrying after 2026-11-20T12:05:00Z"),
    (APART_VMI, APART_WHERE, {"incomplete": "pods: not synced"}, Alone.VIEW_INCOMPLETE,
     "not acting on an incomplete view: pods: not synced"),
    (APART_VMI, APART_WHERE, {"mode": KeepMode.REPORT}, Alone.REPORT_ONLY,
     "report only: would migrate from node-a to node-b: disks served from node-b, the VM runs on node-a; apart for 900s"),
    (APART_VMI, APART_WHERE, {"lease": False}, Alone.NO_LEASE,
     "not acting: the lease might run out before the migration is created"),
    (APART_VMI, APART_WHERE, {"targeted": None, "targeted_note": "targeted migration could not be checked: API "
                                                                 "answered 403"}, Alone.UNTARGETED,
     "targeted migration could not be checked: API answered 403"),
]


def row_ids(rows):
    """Each row's id, from its hold (`prefer-no-eviction`), numbered where a hold has several rows
    (`not-apart-2`): a row added to HOLDS needs nothing else."""
    seen = {}
    for row in rows:
        hold = re.sub(r"\W+", "-", str(row[3])).strip("-").lower()
        seen[hold] = seen.get(hold, 0) + 1
        yield hold if seen[hold] == 1 else f"{hold}-{seen[hold]}"


@pytest.mark.parametrize("vmi, where, changes, hold, reason", HOLDS, ids=list(row_ids(HOLDS)))
def test_each_condition_holds_the_vm(vmi, where, changes, hold, reason):
    decision = keep(vmi, where, **changes)
    assert not decision.act and decision.hold is hold and decision.reason == reason


@pytest.mark.parametrize("changes", [
    {"apart_since": ago(seconds=600)},
    {"last_end": ago(seconds=600)},
    {"last_end": None},
    {"history": [failed(ago(minutes=30))]},
    {"history": [failed(ago(hours=3)), failed(ago(hours=1))], "limits": Limits(max_per_day=3)},
    {"history": [failed(ago(hours=2)), succeeded(ago(minutes=20))], "limits": Limits(max_per_day=3)},
    {"history": [succeeded(ago(hours=30)), succeeded(ago(hours=10))]},
    {"history": [succeeded(ago(hours=10))]},
    {"in_flight_ours": 1, "in_flight_all": 4},
    {"outbound": 1, "in_flight_all": 1},
    {"outbound": 2, "in_flight_all": 2, "limits": Limits(max_outbound_per_node=3)},
    {"refused": dataclasses.replace(REFUSED, count=1, retry=NOW)},
    {"descheduled": DESCHEDULED, "now": HOLD_ENDS},
    {"descheduled": DESCHEDULED, "limits": Limits(after_descheduled=timedelta(hours=2))},
    {"limits": Limits(after=timedelta(0), max_inflight=1, max_cluster_inflight=1, max_per_day=1),
     "apart_since": NOW, "last_end": NOW},
], ids=["apart-exactly-long-enough", "settled-exactly-long-enough", "never-migrated", "backoff-over",
        "second-backoff-over", "success-resets-backoff", "old-migrations-do-not-count", "one-today",
        "just-under-limits", "one-slot-left", "outbound-limit-raised", "refusal-waited-out", "descheduler-hold-over",
        "descheduler-hold-shortened", "zero-wait"])
def test_at_the_edges_the_vm_is_moved(changes):
    assert keep(**changes).act


@pytest.mark.parametrize("vmi, where, changes, hold", [
    (vmi_with(opted_in=False, may_move=False), APART_WHERE, {}, Alone.NOT_OPTED_IN),
    (vmi_with(may_move=False), locality("node-a", [fact("d", "node-a")]), {"mode": KeepMode.REPORT}, Alone.OPTED_OUT),
    (APART_VMI, locality("node-a", [fact("d", "node-a")]), {"target_unfit": "node node-b is cordoned"}, Alone.NOT_APART),
    (vmi_with(live_migratable=False), APART_WHERE, {"target_unfit": "node node-b is not Ready"}, Alone.TARGET_UNFIT),
    (APART_VMI, APART_WHERE, {"vmi_migrating": True, "in_flight_all": 5, "apart_since": NOW}, Alone.MIGRATING),
    (APART_VMI, APART_WHERE, {"apart_since": NOW, "history": [failed(ago(minutes=1))]}, Alone.APART_BRIEFLY),
    (APART_VMI, APART_WHERE, {"vmi_migrating": True, "descheduled": DESCHEDULED}, Alone.MIGRATING),
    (vmi_with(live_migratable=False), APART_WHERE, {"descheduled": DESCHEDULED}, Alone.NOT_MIGRATABLE),
    (APART_VMI, APART_WHERE, {"descheduled": DESCHEDULED, "apart_since": NOW, "last_end": NOW}, Alone.DESCHEDULED),
    (APART_VMI, APART_WHERE, {"targeted": False, "mode": KeepMode.REPORT}, Alone.UNTARGETED),
    (APART_VMI, APART_WHERE, {"in_flight_all": 5, "mode": KeepMode.REPORT}, Alone.CLUSTER_LIMIT),
    (APART_VMI, APART_WHERE, {"history": [failed(ago(minutes=1)), failed(ago(hours=3))], "targeted": False},
     Alone.BACKING_OFF),
    (APART_VMI, APART_WHERE, {"incomplete": "x", "mode": KeepMode.REPORT, "lease": False}, Alone.VIEW_INCOMPLETE),
    (APART_VMI, APART_WHERE, {"mode": KeepMode.REPORT, "lease": False}, Alone.REPORT_ONLY),
], ids=["never-touch-not-opted-in", "opt-out-before-state", "state-before-target", "target-before-migratable",
        "own-migration-before-cluster", "time-before-backoff", "in-flight-before-descheduled",
        "migratable-before-descheduled", "descheduled-before-time", "report-shows-untargeted", "report-shows-limits",
        "vm-before-cluster", "view-before-report", "report-needs-no-lease"])
def test_the_first_condition_in_order_is_reported(vmi, where, changes, hold):
    assert keep(vmi, where, **changes).hold is hold


def test_the_descheduler_hold_lasts_until_the_moment_it_names():
    assert keep(descheduled=DESCHEDULED, now=HOLD_ENDS - timedelta(seconds=1)).hold is Alone.DESCHEDULED
    assert keep(descheduled=DESCHEDULED, now=HOLD_ENDS).act


def test_a_vm_is_never_moved_twice_in_a_day_after_successes_even_when_apart_again():
    history = [succeeded(ago(hours=23)), succeeded(ago(hours=12))]
    assert keep(history=history).hold is Alone.DAILY_LIMIT
    assert keep(history=history, now=NOW + timedelta(hours=1, seconds=1)).act


def test_every_hold_has_a_case():
    assert {hold for *_, hold, _ in HOLDS} == set(KEEPER_HOLDS)


# --------------------------------------------------------------------------- what each check reads


class Noted:
    """An object whose attributes read are noted in `read`."""

    def __init__(self, inner, read):
        self._inner, self._read = inner, read

    def __getattr__(self, name):
        self._read.add(name)
        return getattr(self._inner, name)


@pytest.mark.parametrize("vmi, where, changes, hold, reason", HOLDS)
def test_each_check_reads_only_the_facts_it_declares(vmi, where, changes, hold, reason):
    """What the observer reads for a VM follows the checks' `needs` (`next_read`): a check reading
    a fact it does not declare could read it before the observer has; one marked `own` holds the
    VM while the pass is observed, so it must read nothing of the pass."""
    vm, p = facts(vmi, where, **changes)
    for check in CHECKS:
        of_vm, of_pass = set(), set()
        check.holds(Noted(vm, of_vm), Noted(p, of_pass))
        assert of_vm <= set(check.needs), check.hold
        assert not (check.own and of_pass), check.hold


def test_the_hold_table_says_what_the_observer_reads_next():
    """In the table's order: nothing more of a VM an own check holds before its storage node is
    needed; then the storage node's answer, then how long it has been apart."""
    def first(vmi=APART_VMI, where=APART_WHERE, read=(), **changes):
        vm, _ = facts(vmi, where, **changes)
        return next_read(vm, set(read))

    assert first(vmi_with(may_move=False)) is None  # opted out
    assert first(where=locality("node-a", [fact("d", "node-a")])) == "stale"  # is its mount stale?
    assert first(where=locality("node-a", [fact("d", "node-a")]), read={"stale"}) is None  # co-located
    # Stale beside its NFS server: which other node its recovery goes through.
    assert first(where=locality("node-a", [fact("d", "node-a")]), read={"stale"}, stale=STALE) == "target_unfit"
    assert first() == "stale"
    assert first(read={"stale"}) == "target_unfit"
    assert first(read={"stale", "target_unfit"}, target_unfit="node node-b is cordoned") is None
    assert first(vmi_with(live_migratable=False), read={"stale", "target_unfit"}) is None
    assert first(read={"stale", "target_unfit"}, vmi_migrating=True) is None
    assert first(read={"stale", "target_unfit"}) == "apart_since"
    # A check that reads the pass (its moment, its bounds) holds only once the pass decides.
    assert first(read={"stale", "target_unfit"}, descheduled=DESCHEDULED) == "apart_since"
    assert first(read=ON_DEMAND) is None


# --------------------------------------------------------------------------- a stale mount's recovery

STALE = ("paused on a disk I/O error, and its pod started 2026-11-20T11:00:00Z, before Longhorn asked for volume "
         "pvc-d to be remounted (2026-11-20T11:30:00Z): its NFS mount is stale")
CO_LOCATED_WHERE = locality("node-a", [fact("d", "node-a")])


def test_a_vm_on_a_stale_mount_apart_from_its_storage_goes_there_at_once():
    """Its recovery is the keeper's usual move, without the waits: it is stopped until it moves."""
    decision = keep(stale=STALE, apart_since=NOW, last_end=ago(seconds=5), descheduled=DESCHEDULED)
    assert decision.act and decision.target == "node-b"
    assert decision.reason.startswith("recovering a stale mount: migrating from node-a to node-b: paused on a disk I/O")


@pytest.mark.parametrize("where, changes, hold", [
    (CO_LOCATED_WHERE, {"target_unfit": "node-b: node node-b is cordoned"}, Alone.TARGET_UNFIT),
    (CO_LOCATED_WHERE, {}, Alone.TARGET_UNFIT),  # no other node read: never a migration to nowhere
    (APART_WHERE, {"target_unfit": "node node-b is cordoned"}, Alone.TARGET_UNFIT),
    (APART_WHERE, {"targeted": False}, Alone.UNTARGETED),
], ids=["beside-no-other-node", "beside-none-read", "storage-node-unfit", "untargeted"])
def test_a_vm_on_a_stale_mount_that_cannot_be_moved_is_held_and_said(where, changes, hold):
    decision = keep(where=where, stale=STALE, **changes)
    assert not decision.act and decision.hold is hold and decision.stale == STALE
    said = next_step(decision, None, facts(where=where, stale=STALE, **changes)[1])
    assert said.startswith("held: ")
    if where is CO_LOCATED_WHERE:
        assert said.startswith("held: no other node can take it for its recovery: ")


def test_a_vm_on_a_stale_mount_beside_its_storage_goes_away_and_comes_back():
    """KubeVirt's migration target pod cannot share the VM's node: its recovery goes through another
    node that passes the checks, and the keeper's usual return brings it back, two migrations."""
    decision = keep(where=CO_LOCATED_WHERE, stale=STALE, via="node-c", apart_since=NOW)
    assert decision.act and decision.round_trip and (decision.source, decision.target) == ("node-a", "node-c")
    assert decision.reason.startswith("recovering a stale mount: migrating from node-a to node-c and back (2 migrations")
    said = next_step(decision, None, facts(where=CO_LOCATED_WHERE, stale=STALE, via="node-c")[1])
    assert said == ("moves to node-c at the keeper's next pass and back to node-a after (stale mount beside its NFS "
                    "server: 2 migrations, no reboot)")
    # A day's budget that drift (or an earlier round trip) used up does not keep it frozen.
    spent = [succeeded(ago(hours=20)), succeeded(ago(hours=10), recovers=True), succeeded(ago(hours=9))]
    assert keep(where=CO_LOCATED_WHERE, stale=STALE, via="node-c", history=spent).act
    report = keep(where=CO_LOCATED_WHERE, stale=STALE, via="node-c", mode=KeepMode.REPORT)
    assert report.hold is Alone.REPORT_ONLY and "from node-a to node-c and back" in report.reason


def test_when_no_migration_of_a_vm_on_a_stale_mount_can_finish_it_needs_a_restart():
    """One answer decides it (`recovery.cannot_finish`): no migration is tried, and why is said."""
    for where, via in ((APART_WHERE, None), (CO_LOCATED_WHERE, "node-c")):
        decision = keep(where=where, stale=STALE, via=via, cannot_finish=CANNOT_FINISH)
        assert not decision.act and decision.hold is Alone.NEEDS_RESTART
        said = next_step(decision, None, facts(where=where, stale=STALE, cannot_finish=CANNOT_FINISH)[1], off=True)
        assert said == (f"needs a restart: {STALE}, and it cannot be moved to a fresh mount: {CANNOT_FINISH}; a restart "
                        "mounts the volume afresh (`virtctl restart`)")
    assert keep(cannot_finish=CANNOT_FINISH).act  # a VM on a good mount is moved as ever


@pytest.mark.parametrize("vmi, where, changes, hold", [
    (vmi_with(live_migratable=False), APART_WHERE, {}, Alone.NOT_MIGRATABLE),
    (APART_VMI, APART_WHERE, {"vmi_migrating": True}, Alone.MIGRATING),
    (APART_VMI, locality("node-a", [fact("d", None)]), {}, Alone.NOT_APART),
    (APART_VMI, APART_WHERE, {"in_flight_ours": 3, "in_flight_all": 3}, Alone.OUR_LIMIT),
    (APART_VMI, APART_WHERE, {"outbound": 2, "in_flight_all": 2}, Alone.SOURCE_BUSY),
    (APART_VMI, APART_WHERE, {"in_flight_all": 5}, Alone.CLUSTER_LIMIT),
    (APART_VMI, APART_WHERE, {"incomplete": "pods: not synced"}, Alone.VIEW_INCOMPLETE),
    (APART_VMI, APART_WHERE, {"mode": KeepMode.REPORT}, Alone.REPORT_ONLY),
    (APART_VMI, APART_WHERE, {"lease": False}, Alone.NO_LEASE),
    (vmi_with(may_move=False), APART_WHERE, {}, Alone.OPTED_OUT),
], ids=["not-migratable", "migrating", "unresolved", "our-limit", "source-busy", "cluster-limit", "view-incomplete", "report",
        "no-lease", "opted-out"])
def test_a_stale_mounts_recovery_keeps_the_keepers_bounds(vmi, where, changes, hold):
    """Only drift's limits give way: the VM's own state, the bounds (ours with the slot kept for recoveries), a
    drain's slots, the mode and the lease hold."""
    decision = keep(vmi, where, stale=STALE, **changes)
    assert not decision.act and decision.hold is hold
    if hold is Alone.OUR_LIMIT:
        assert decision.reason == "3 of our migrations in flight (limit 2 and the one kept for recoveries)"


@pytest.mark.parametrize("changes", [
    {"history": [failed(ago(minutes=10))]},
    {"history": [failed(ago(minutes=10), recovers=True), failed(ago(minutes=5), recovers=True)],
     "stale_since": ago(minutes=30)},
    {"history": [succeeded(ago(hours=20)), succeeded(ago(hours=10))]},
    {"apart_since": ago(seconds=5), "last_end": ago(seconds=5), "descheduled": DESCHEDULED},
    {"in_flight_ours": 2, "in_flight_all": 2},
], ids=["drift-backoff", "two-recoveries-failed", "daily-limit", "waits", "our-drift-fills-the-limit"])
def test_no_drift_limit_holds_a_frozen_vm(changes):
    """A VM on a stale mount is frozen: drift's backoff, budget and waits give way (its recoveries have a bound)."""
    assert keep(stale=STALE, **changes).act
    assert not keep(**changes).act  # they hold a VM on a good mount


# --------------------------------------------------------------------------- what a hold reads is declared


def test_a_hold_on_an_annotation_nobody_declared_fails_at_once_naming_the_declaration(monkeypatch):
    """Without its declaration the production cache drops the annotation: the hold would never
    hold. Its first read says which declaration to add instead."""
    key = "descheduler.alpha.kubernetes.io/prefer-no-eviction"
    keys = {**declared.VMI.keys, "annotations": [k for k in declared.VMI.keys["annotations"] if k != key]}
    monkeypatch.setattr(declared.VMI, "keys", keys)  # the declaration taken out
    with pytest.raises(Undeclared, match=rf"declare it with `VMI.annotation\('{key}'\)`, beside the rule"):
        keep(view(annotated(key, "")))
