"""The keeper's state as its ConfigMap keeps it: read back as written, pruned, refused when it is not
the keeper's, and the holds of refused actions growing as client-go's per-item rate limiter does."""
from datetime import timedelta

import pytest
from tests.support.keeping import NOW, ago, vmim

from webhook.rules.keeping.migrations import read_migration
from webhook.rules.keeping.state import (Action, dump, KeeperState, load, MOST_MIGRATIONS, retry_delay, Unreadable,
                                         with_kept)


def ours(name, created, phase="Succeeded"):
    obj = vmim(phase, created=created, name=name, transitions=[(phase, created + timedelta(minutes=1))])
    obj["metadata"]["uid"] = f"uid-{name}"
    return read_migration(obj)


def test_the_state_reads_back_as_it_was_written():
    state = KeeperState(migrations=(ours("vm1-colocate-a", ago(hours=2)),
                                    ours("vm1-colocate-b", ago(minutes=5), phase="Running")))
    state = state.refused("default", "vm1", Action.MIGRATE, 403, "creating a migration failed: API answered 403: no", NOW)
    assert load(dump(state)) == state
    assert load(None) == load("") == KeeperState()


@pytest.mark.parametrize("text", ["{", "[]", '{"version": 2}', '{"version": 1, "migrations": {}}',
                                  '{"version": 1, "refusals": [{"action": "reboot", "count": 1}]}',
                                  '{"version": 1, "migrations": [{"name": "x"}]}'])
def test_what_is_not_the_keepers_state_is_refused(text):
    with pytest.raises(Unreadable):
        load(text)


def test_a_refusals_hold_grows_with_each_in_a_row_and_ends_when_it_goes_through():
    state = KeeperState()
    for count, wait in ((1, timedelta(minutes=1)), (2, timedelta(minutes=2)), (3, timedelta(minutes=4))):
        state = state.refused("default", "vm1", Action.MIGRATE, 403, "no", NOW)
        refused = state.refusal("default", "vm1", Action.MIGRATE)
        assert (refused.count, refused.retry) == (count, NOW + wait)
    assert retry_delay(Action.MIGRATE, 30) == timedelta(hours=1)
    assert [retry_delay(Action.UNPAUSE, n) for n in (1, 2, 6, 9)] == [timedelta(seconds=s) for s in (10, 20, 300, 300)]
    assert state.cleared("default", "vm1", Action.MIGRATE).refusal("default", "vm1", Action.MIGRATE) is None
    assert state.only([("default", "vm2")]).refusals == ()


def test_the_state_forgets_what_no_bound_needs_any_more():
    old, recent, unfinished = ours("a", ago(hours=49)), ours("b", ago(hours=47)), ours("c", ago(hours=60), "Running")
    state = KeeperState().refused("default", "vm1", Action.MIGRATE, 403, "no", ago(days=2))
    pruned = state.with_migrations([old, recent, unfinished], NOW)
    assert [m.name for m in pruned.migrations] == ["c", "b"] and pruned.refusals == ()
    many = [ours(f"m{i}", NOW - timedelta(seconds=i)) for i in range(MOST_MIGRATIONS + 10)]
    assert len(KeeperState().with_migrations(many, NOW).migrations) == MOST_MIGRATIONS


def test_ours_the_cluster_no_longer_shows_still_count():
    shown, collected, deleted = ours("a", ago(hours=1)), ours("b", ago(hours=3)), ours("c", ago(minutes=5), "Running")
    counted = with_kept([shown], [shown, collected, deleted], NOW)
    assert [(m.name, m.phase) for m in counted] == [("a", "Succeeded"), ("b", "Succeeded"), ("c", "Failed")]
