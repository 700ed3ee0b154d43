"""The keeper's state: pruned of what no bound needs, and the holds of refused actions growing as
client-go's per-item rate limiter does (its ConfigMap's spelling: test_record.py)."""
from datetime import timedelta

from tests.support.keeping import NOW, ago, refusals, vmim

from webhook.rules.keeping.migrations import read_migration
from webhook.rules.keeping.record import Action, KeeperState, with_kept


def ours(name, created, phase="Succeeded"):
    obj = vmim(phase, created=created, name=name, transitions=[(phase, created + timedelta(minutes=1))])
    obj["metadata"]["uid"] = f"uid-{name}"
    return read_migration(obj)


def test_a_refusals_hold_grows_with_each_in_a_row_and_ends_when_it_goes_through():
    state = KeeperState()
    for count, wait in ((1, timedelta(minutes=1)), (2, timedelta(minutes=2)), (3, timedelta(minutes=4))):
        state = state.refused("default", "vm1", Action.MIGRATE, 403, "no", NOW)
        refused = state.refusal("default", "vm1", Action.MIGRATE)
        assert (refused.count, refused.retry) == (count, NOW + wait)
    for _ in range(27):
        state = state.refused("default", "vm1", Action.MIGRATE, 403, "no", NOW)
    assert state.refusal("default", "vm1", Action.MIGRATE).retry == NOW + timedelta(hours=1)  # 30 in a row: capped
    unpauses = KeeperState()
    for count, wait in ((1, 10), (2, 20), (3, 40), (4, 80), (5, 160), (6, 300), (7, 300), (8, 300), (9, 300)):
        unpauses = unpauses.refused("default", "vm1", Action.UNPAUSE, 409, "no", NOW)
        assert unpauses.refusal("default", "vm1", Action.UNPAUSE).retry == NOW + timedelta(seconds=wait)
    assert state.cleared("default", "vm1", Action.MIGRATE).refusal("default", "vm1", Action.MIGRATE) is None
    assert refusals(state.only({("default", "vm2"): "uid-2"})) == ()


def test_the_state_forgets_what_no_bound_needs_any_more():
    old, recent, unfinished = ours("a", ago(hours=49)), ours("b", ago(hours=47)), ours("c", ago(hours=60), "Running")
    state = KeeperState(lost=(ago(minutes=61), "not JSON")).refused("default", "vm1", Action.MIGRATE, 403, "no",
                                                                  ago(days=2))
    pruned = state.with_migrations([old, recent, unfinished], NOW)
    assert [m.name for m in pruned.migrations] == ["c", "b"] and refusals(pruned) == ()
    assert pruned.lost is None  # a rebuilt record is said for an hour
    assert KeeperState(lost=(ago(minutes=59), "not JSON")).with_migrations([], NOW).lost is not None


def test_ours_the_cluster_no_longer_shows_still_count():
    shown, collected, deleted = ours("a", ago(hours=1)), ours("b", ago(hours=3)), ours("c", ago(minutes=5), "Running")
    counted = with_kept([shown], [shown, collected, deleted], NOW)
    assert [(m.name, m.phase) for m in counted] == [("a", "Succeeded"), ("b", "Succeeded"), ("c", "Failed")]


def test_what_a_lost_record_cannot_say_the_leader_keeps():
    """Read as lost (deleted, not JSON), the record takes nothing from what this leader knows: its backoffs,
    its unpauses of a VMI, the Events it said; what the record read holds wins where both say something."""
    from webhook.rules.keeping.record import VmRecord
    mine = KeeperState().refused("default", "vm1", Action.MIGRATE, 500, "down", NOW)
    mine = mine.with_vm(VmRecord(namespace="default", name="vm2", uid="u2", unpaused=(ago(minutes=3),),
                                 said=(("NeedsRestart", ago(minutes=1)),)))
    assert KeeperState().over(mine).vms == mine.vms
    read = KeeperState().refused("default", "vm1", Action.UNPAUSE, 409, "no", NOW)
    joined = read.over(mine)
    assert {h.action for h in refusals(joined)} == {Action.MIGRATE, Action.UNPAUSE}
    assert joined.vm("default", "vm2").unpauses(None) == 1
    restarted = KeeperState().with_vm(VmRecord(namespace="default", name="vm2", uid="u3",
                                               said=(("WaitingForStorage", NOW),)))
    assert restarted.over(mine).vm("default", "vm2").unpaused == ()  # another VMI: its unpauses are not this one's


def test_a_vm_that_stops_keeps_only_our_migrations_and_a_new_vmi_starts_afresh():
    from webhook.rules.keeping.record import VmRecord
    from webhook.rules.keeping.recovery import Stale
    record = VmRecord(namespace="default", name="vm1", migrations=(ours("a", ago(hours=1)),), uid="u1",
                      unpaused=(ago(minutes=3),), stale=Stale(requested=ago(hours=1), words="w", last=ago(hours=1)))
    state = KeeperState().with_vm(record).refused("default", "vm1", Action.MIGRATE, 403, "no", NOW)
    assert state.only({("default", "vm1"): "u1"}).vm("default", "vm1").unpaused == record.unpaused
    restarted = state.only({("default", "vm1"): "u2"}).vm("default", "vm1")
    assert (restarted.uid, restarted.unpaused, restarted.stale, len(restarted.refusals)) == ("u2", (), None, 1)
    stopped = state.only({}).vm("default", "vm1")
    assert stopped.migrations == record.migrations and stopped.refusals == () and stopped.unpaused == ()
