"""The keeper's benchmark works end to end (tiny and quick here; its numbers come from `make bench`),
and its checker catches what it is there to catch."""
import datetime
import re
import subprocess
import sys
from pathlib import Path

from bench import kubevirt

ROOT = Path(__file__).resolve().parent.parent


def bench_keeper(*args):
    return subprocess.run([sys.executable, "-m", "bench.keeper", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)


def figure(out, pattern):
    found = re.search(pattern, out)
    assert found, (pattern, out)
    return [int(g) for g in found.groups()]


def test_a_tiny_simulation_reports_every_figure_and_no_violation():
    done = bench_keeper("--vmis", "20", "--apart", "8", "--delay-min", "0.05", "--delay-max", "0.1",
                        "--period", "0.1", "--timeout", "60", "--skip-memory")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "keeper: 20 opted-in VMIs on 20 nodes (2 not Ready, 2 cordoned)" in out, out
    apart, movable = figure(out, r"apart at start: (\d+); movable: (\d+);")
    assert (apart, movable) == (8, 4)
    for held in ('1 annotated keep: "false"', "1 not live-migratable", "1 storage on a cordoned node",
                 "1 storage on an unready node"):
        assert held in out, out
    created, succeeded = figure(out, r"migrations created: (\d+) \((\d+) succeeded")
    back, of = figure(out, r"brought back: (\d+) of (\d+) movable")
    assert created == succeeded == back == of >= 1  # what a node lost during the run holds is not movable
    ours, limit = figure(out, r"peak in flight: ours (\d+) \(limit (\d+)\)")
    assert 1 <= ours <= limit == 2
    assert re.search(r"keeper CPU per full pass \(20 VMIs\): median [\d.]+ ms, max [\d.]+ ms", out), out
    assert "passes: " in out and "2 leaders" in out
    assert "invariant violations: 0" in out
    assert "targets: invariants hold met, every movable VM settled met" in out


def test_the_memory_figure_at_a_tiny_scale():
    done = bench_keeper("--memory-only", "--memory", "200,40,40", "--memory-vmis", "40", "--memory-passes", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(r"RSS [\d.]+ MiB after the keeper's first pass \(peak [\d.]+ MiB\); [\d.]+ MiB with --keep off: "
                     r"the keeper takes", out), out
    cached = next(line for line in out.splitlines() if line.startswith("cached: "))
    assert "40 virtualmachineinstances" in cached and "0 virtualmachineinstancemigrations" in cached, cached
    assert "the keeper's pass: " in out and "targets: RSS ≤ 170 MiB" in out


# --------------------------------------------------------------------------- the checker


def manifest(vm, node, name="m-1"):
    return {"metadata": {"name": name, "namespace": vm.namespace, "labels": {kubevirt.MANAGED_BY: kubevirt.OURS}},
            "spec": {"vmiName": vm.name, "addedNodeSelector": {kubevirt.HOSTNAME: node}}}


def test_the_checker_flags_each_broken_promise():
    layout = kubevirt.plan(40, 16, 8, 1, 1, 0, seed=1)
    tracker = kubevirt.Tracker(layout, max_inflight=1)
    now = datetime.datetime.now(datetime.UTC)
    by_role = {}
    for vm in layout.vms:
        by_role.setdefault(vm.role, []).append(vm)
    first, second, third = by_role[kubevirt.MOVABLE][:3]

    vm, broken, raced = tracker.check(manifest(first, first.storage), now)
    assert vm is first and broken == raced == []
    tracker.added(kubevirt.Migration("m-1", first.namespace, first, True, first.storage))

    assert tracker.check(manifest(first, first.storage), now)[1] == [
        "2 of our migrations in flight (limit 1)", f"{first.name} has a migration in flight already (m-1)"]
    assert tracker.check(manifest(second, second.storage), now)[1] == ["2 of our migrations in flight (limit 1)"]
    tracker.migrations[first.namespace, "m-1"].phase = "Succeeded"
    first.migrating, first.node = None, first.storage
    assert tracker.check(manifest(second, second.storage), now)[1] == []
    assert tracker.check(manifest(first, first.storage), now)[1] == [
        f"{first.name} is migrated a second time (m-1 before)", f"{first.name} already runs on {first.storage}, "
        "where its disk is served"]
    tracker.added(kubevirt.Migration("m-3", third.namespace, third, True, third.storage, phase="Failed"))
    third.migrating, third.failed_at = None, now - datetime.timedelta(minutes=10)
    assert tracker.check(manifest(third, third.storage), now)[1] == [f"{third.name} is migrated again 600s after a failure"]
    assert tracker.check(manifest(third, third.storage), now + datetime.timedelta(minutes=21))[1] == []
    fenced = by_role[kubevirt.ON_CORDONED][0]
    assert tracker.check(manifest(fenced, fenced.storage), now)[1] == [
        f"{fenced.name} must be left alone (storage on a cordoned node)", f"targets {fenced.storage}, which is cordoned"]
    elsewhere = next(n for n in layout.healthy if n != second.storage)
    assert tracker.check(manifest(second, elsewhere), now)[1] == [
        f"targets {elsewhere}, but the disk of {second.name} is served from {second.storage}"]

    tracker.lost(second.storage, "not Ready", now)  # a node lost during the run: a moment's race is not a violation
    _, broken, raced = tracker.check(manifest(second, second.storage), now + datetime.timedelta(milliseconds=20))
    assert broken == [] and len(raced) == 2
    _, broken, _ = tracker.check(manifest(second, second.storage), now + datetime.timedelta(seconds=2))
    assert broken == [f"{second.name} must be left alone (storage node not Ready during the run)",
                      f"targets {second.storage}, which is not Ready"]
