"""The keeper's benchmark works end to end (tiny and quick here; its numbers come from `make bench`),
and its checker catches what it is there to catch."""
import datetime
import re
import subprocess
import sys
from pathlib import Path

import yaml

from bench import kubevirt
from kubefake import objects

ROOT = Path(__file__).resolve().parent.parent


def bench_keeper(*args):
    return subprocess.run([sys.executable, "-m", "bench.keeper", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)


def figure(out, pattern):
    found = re.search(pattern, out)
    assert found, (pattern, out)
    return [int(g) for g in found.groups()]


def test_a_tiny_simulation_reports_every_figure_and_no_violation():
    # Old CPUs, a node cordoned under a migration of ours (cancelled 2 s after its target pod could
    # not be placed), another not Ready, a drain: all of it in a few seconds.
    done = bench_keeper("--vmis", "20", "--apart", "8", "--delay-min", "0.05", "--delay-max", "0.1",
                        "--period", "0.1", "--timeout", "60", "--unplaceable", "2", "--skip-memory")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "keeper: 20 opted-in VMIs on 20 nodes (2 not Ready, 2 cordoned)" in out, out
    assert "KubeVirt runs 5 at once, 2 from one node" in out, out
    assert re.search(r"CPU generations: 4 Broadwell-IBRS, 16 Skylake-Client-IBRS nodes; the opted-in VMs run "
                     r"machine types \d+ pc-q35-rhel9.4.0, \d+ pc-q35-rhel9.6.0", out), out
    apart, movable = figure(out, r"apart at start: (\d+); movable: (\d+);")
    assert (apart, movable) == (8, 3)
    for held in ('1 annotated keep: "false"', "1 not live-migratable", "1 storage on a cordoned node",
                 "1 storage on an unready node", "1 storage on an older CPU generation"):
        assert held in out, out
    assert re.search(r"during the run: node-\d+ cordoned, node-\d+ not Ready, node-\d+ drained;", out), out
    on_it, evacuations, completed = figure(
        out, r"drain: node-\d+ drained at [\d.]+ s with (\d+) VMs on it: (\d+) evacuation migrations "
             r"\(system-critical\) created, (\d+) completed, 0 failed, done in [\d.]+ s")
    assert on_it >= 1 and evacuations == completed >= 1
    created, succeeded, cancelled = figure(out, r"migrations created: (\d+) \((\d+) succeeded, (\d+) cancelled\)")
    assert created == succeeded + cancelled and succeeded >= 1 and cancelled >= 1
    back, of, backing_off = figure(out, r"brought back: (\d+) of (\d+) movable; (\d+) whose migration failed or "
                                        r"was cancelled back off")
    assert 1 <= back <= succeeded and of == back + backing_off  # nodes lost and drained hold the others
    assert "migrations created that cannot be placed: 0; over a slot limit: 0 (KubeVirt runs 2 per source node, " \
           "5 in the cluster)" in out, out
    pods, ended = figure(out, r"unplaceable target pods of ours: (\d+) \((\d+) cancelled by the keeper\); ended at most")
    assert pods == ended == cancelled
    after = float(re.search(r"ended at most ([\d.]+) s after they became unschedulable", out).group(1))
    assert 1 <= after <= 2.6, out  # the keeper reads whole seconds: from 1 s after, within 2 s, a pass and its slack
    ours, limit = figure(out, r"peak in flight: ours (\d+) \(limit (\d+)\)")
    assert 1 <= ours <= limit == 2
    assert re.search(r"keeper CPU per full pass \(20 VMIs\): median [\d.]+ ms, max [\d.]+ ms", out), out
    assert "passes: " in out and "2 leaders" in out
    assert re.search(r"held by the keeper during the run \(most VMs in one pass\): .*\d+ target unfit", out), out
    assert "invariant violations: 0" in out
    assert ("targets: invariants hold met, every movable VM settled met, 0 migrations created that cannot be "
            "placed met, 0 over a slot limit met, unplaceable ones cancelled within 2.6 s met, drain done met") in out


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


def by_role(layout):
    found = {}
    for vm in layout.vms:
        found.setdefault(vm.role, []).append(vm)
    return found


def test_the_checker_flags_each_broken_promise():
    layout = kubevirt.plan(40, 16, 8, 1, 1, 0, seed=1, old_cpu=2)
    tracker = kubevirt.Tracker(layout, max_inflight=1)
    now = datetime.datetime.now(datetime.UTC)
    roles = by_role(layout)
    first, second, third = roles[kubevirt.MOVABLE][:3]

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
    fenced = roles[kubevirt.ON_CORDONED][0]
    assert tracker.check(manifest(fenced, fenced.storage), now)[1] == [
        f"{fenced.name} must be left alone (storage on a cordoned node)",
        f"created a migration that cannot be placed: targets {fenced.storage}, which is cordoned"]
    elsewhere = next(n for n in layout.healthy if n != second.storage and n != second.node
                     and layout.cpu[n] == layout.cpu[second.storage])
    assert tracker.check(manifest(second, elsewhere), now)[1] == [
        f"targets {elsewhere}, but the disk of {second.name} is served from {second.storage}"]

    tracker.lost(second.storage, "not Ready", now)  # a node lost during the run: a moment's race is not a violation
    _, broken, raced = tracker.check(manifest(second, second.storage), now + datetime.timedelta(milliseconds=20))
    assert broken == [] and len(raced) == 2
    _, broken, _ = tracker.check(manifest(second, second.storage), now + datetime.timedelta(seconds=2))
    assert broken == [f"{second.name} must be left alone (storage node not Ready during the run)",
                      f"created a migration that cannot be placed: targets {second.storage}, which is not Ready"]
    tracker.record("vms-0/m-9", broken, [])
    assert len(tracker.cannot_place) == 1


def test_the_checker_knows_what_a_target_pod_needs_of_its_node():
    layout = kubevirt.plan(40, 16, 8, 1, 1, 0, seed=1, old_cpu=2)
    tracker = kubevirt.Tracker(layout, max_inflight=2)
    now = datetime.datetime.now(datetime.UTC)
    older = by_role(layout)[kubevirt.ON_OLDER_CPU][0]  # runs with a Skylake host model, its disk on a Broadwell
    assert layout.cpu[older.storage] == "Broadwell-IBRS" and layout.cpu[older.node] == "Skylake-Client-IBRS"
    _, broken, _ = tracker.check(manifest(older, older.storage), now)
    assert broken == [f"{older.name} must be left alone (storage on an older CPU generation)",
                      f"created a migration that cannot be placed: node {older.storage} lacks "
                      "cpu-feature.node.kubevirt.io/ssbd, which its target pod selects"]
    # A VM drained off a Broadwell node carries its CPU since: it may go back there.
    back = next(vm for vm in by_role(layout)[kubevirt.MOVABLE] if layout.cpu[vm.storage] == "Broadwell-IBRS")
    assert back.selector["cpu-model-migration.node.kubevirt.io/Broadwell-IBRS"] == "true"
    assert back.machine == "pc-q35-rhel9.4.0" and tracker.check(manifest(back, back.storage), now)[1] == []
    assert tracker.role_of(older) == kubevirt.ON_OLDER_CPU and tracker.role_of(back) == kubevirt.MOVABLE


def test_the_checker_counts_the_slots_kubevirt_has():
    layout = kubevirt.plan(40, 16, 8, 1, 1, 0, seed=1)
    tracker = kubevirt.Tracker(layout, max_inflight=5)
    now = datetime.datetime.now(datetime.UTC)
    vm = by_role(layout)[kubevirt.MOVABLE][0]
    neighbours = [v for v in layout.vms if v.node == vm.node and v is not vm][:2]
    for i, other in enumerate(neighbours):
        tracker.added(kubevirt.Migration(f"kubevirt-evacuation-{i}", other.namespace, other, False, None,
                                         created=now - datetime.timedelta(seconds=5), evacuation=True))
    assert tracker.check(manifest(vm, vm.storage), now)[1] == [
        f"over the per-node slot limit: 2 migrations in flight from {vm.node} (KubeVirt runs 2)"]
    tracker.migrations[neighbours[1].namespace, "kubevirt-evacuation-1"].created = now  # not seen yet: a race
    _, broken, raced = tracker.check(manifest(vm, vm.storage), now)
    assert broken == [] and raced == [f"per-node slot limit: 2 migrations in flight from {vm.node} (KubeVirt runs 2), "
                                      "1 created within 1 s"]
    elsewhere = [v for v in layout.vms if v.node != vm.node and v.migrating is None][:3]
    for i, other in enumerate(elsewhere):
        tracker.added(kubevirt.Migration(f"other-{i}", other.namespace, other, False, None,
                                         created=now - datetime.timedelta(seconds=5)))
    _, broken, raced = tracker.check(manifest(vm, vm.storage), now)
    assert broken == [] and raced[1] == "cluster-wide slot limit: 5 migrations in flight (KubeVirt runs 5), 1 created " \
                                        "within 1 s"
    tracker.migrations[neighbours[1].namespace, "kubevirt-evacuation-1"].created = now - datetime.timedelta(seconds=5)
    _, broken, _ = tracker.check(manifest(vm, vm.storage), now)
    assert broken == [f"over the per-node slot limit: 2 migrations in flight from {vm.node} (KubeVirt runs 2)",
                      "over the cluster-wide slot limit: 5 migrations in flight (KubeVirt runs 5)"]
    tracker.record("vms-0/m-1", broken, [])
    assert len(tracker.over_slots) == 1


def test_the_checker_flags_a_cancellation_that_was_not_due():
    layout = kubevirt.plan(40, 16, 8, 1, 1, 0, seed=1)
    tracker = kubevirt.Tracker(layout, max_inflight=5, unplaceable=60)
    now = datetime.datetime.now(datetime.UTC)
    a, b, c, d = by_role(layout)[kubevirt.MOVABLE][:4]
    theirs = kubevirt.Migration("kubevirt-evacuation-x", a.namespace, a, False, None)
    placed = kubevirt.Migration("m-b", b.namespace, b, True, b.storage)
    early = kubevirt.Migration("m-c", c.namespace, c, True, c.storage, unschedulable=now - datetime.timedelta(seconds=30))
    due = kubevirt.Migration("m-d", d.namespace, d, True, d.storage, unschedulable=now - datetime.timedelta(seconds=59.5))
    for migration in (theirs, placed, early, due):
        tracker.added(migration)
        tracker.deleted(migration, now)
    assert tracker.violations == [
        f"{a.namespace}/kubevirt-evacuation-x: deleted, and it is not ours",
        f"{b.namespace}/m-b: cancelled, and its target pod was not unschedulable",
        f"{c.namespace}/m-c: cancelled 30.0 s after its target pod became unschedulable (not before 60 s)"]
    assert due.how == "cancelled" and due.final and d.failed_at == now and d.migrating is None
    assert tracker.ended["Cancelled"] == 3  # ours


# --------------------------------------------------------------------------- the objects


def fixture(name):
    return yaml.safe_load((ROOT / "tests" / "fixtures" / "kubevirt-1.8" / name).read_text())


def test_pods_select_nodes_as_kubevirt_renders_them():
    """The bench's own rendering (not the keeper's rules.target) against what KubeVirt 1.8 made."""
    vmi = fixture("vmi-running.yaml")
    launcher = fixture("launcher-pod.yaml")
    assert objects.launcher_node_selector(vmi) == launcher["spec"]["nodeSelector"]
    target = fixture("migration-target-pod-host-model.yaml")
    source = {"host-model-cpu.node.kubevirt.io/Skylake-Client-IBRS": "true",
              "host-model-required-features.node.kubevirt.io/vmx": "true", "cpu-vendor.node.kubevirt.io/Intel": "true"}
    selector = objects.migration_node_selector(vmi, launcher["spec"]["nodeSelector"], source,
                                               {"kubernetes.io/hostname": "kv-old"})
    assert selector == target["spec"]["nodeSelector"]
    # Migrated once, a VM keeps the CPU it left with, wherever it goes next.
    again = objects.migration_node_selector(vmi, selector, objects.labeller(objects.OLD_CPU))
    assert again == {k: v for k, v in selector.items() if k != "kubernetes.io/hostname"}
    old = objects.node("n", cpu=objects.OLD_CPU)["metadata"]["labels"]
    assert old["cpu-model-migration.node.kubevirt.io/Broadwell-IBRS"] == "true"
    assert "cpu-model-migration.node.kubevirt.io/Skylake-Client-IBRS" not in old
    assert "machine-type.node.kubevirt.io/pc-q35-rhel9.6.0" not in old
