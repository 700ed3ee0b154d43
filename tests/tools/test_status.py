"""`status` against the kmock emulator, as an admin runs it; its wording as pure functions."""
import asyncio
import copy
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from tests.support.stores import seed
from tests.support.kube import (fixture_cluster, kubeconfig_for, load, longhorn_settings, longhorn_volume, run_verb,
                                rwx_disk, vmi_uid)
from tests.support.kubevirt_api import KubeVirtApi

from webhook.config import Settings
from webhook.kinds import DEPLOYMENT, EVENT, VMI, VMIM
from webhook.rules.keeping.migrations import read_migration
from webhook.rules.keeping.running import read_vmi
from webhook.tools.status import ago, last_action

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kmock_options(kmock_options):
    """KubeVirt's writes as a real apiserver makes them: `dryRun=All` stores nothing."""
    return {**kmock_options, "cls": KubeVirtApi}


NOW = datetime.now(UTC).replace(microsecond=0)  # for the wording tests, which are given the time
FIXTURE_VOLUME = "pvc-7c1d2e3f-0a4b-4c5d-8e6f-9a0b1c2d3e4f"  # vm1-rootdisk in longhorn-rwx.yaml, served from node-b


def stamp(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def before(**span):
    """A moment that long before now (the tool reads the clock when it runs)."""
    return datetime.now(UTC).replace(microsecond=0) - timedelta(**span)


def vmi(name, node, *claims, namespace="default", opted_in=True, phase="Running", migration=None):
    """A VMI shaped as vmi-migrated.yaml, running `claims` on `node`, migrated or never."""
    obj = copy.deepcopy(load("vmi-migrated.yaml"))
    obj["metadata"].update(name=name, namespace=namespace, uid=vmi_uid(name, namespace),
                           creationTimestamp=stamp(before(days=30)))
    if not opted_in:
        del obj["metadata"]["annotations"]["kubevirt-scheduler/co-schedule"]
    obj["spec"]["volumes"] = [{"name": f"disk{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    obj["status"].update(phase=phase, nodeName=node)
    if migration is None:
        obj["status"].pop("migrationState")
    else:
        obj["status"]["migrationState"] = migration
    return obj


def vmim(name, vmi_name, phase, *, created, ended=None, ours=True, target="node-b"):
    obj = copy.deepcopy(load("vmim-to-storage.yaml"))
    obj["metadata"].pop("generateName")
    obj["metadata"].update(name=name, creationTimestamp=stamp(created))
    if ours:
        obj["metadata"]["annotations"] = {"kubevirt-scheduler/node": target}
    else:
        obj["metadata"]["labels"] = {}
    obj["spec"]["vmiName"] = vmi_name
    obj["status"] = {"phase": phase}
    if ended:
        obj["status"]["phaseTransitionTimestamps"] = [{"phase": phase, "phaseTransitionTimestamp": stamp(ended)}]
    return obj


def share_manager_created(objects, volume, when):
    for obj in objects:
        if obj["kind"] == "Pod" and obj["metadata"]["name"] == f"share-manager-{volume}":
            obj["metadata"]["creationTimestamp"] = stamp(when)
    return objects


def migrated():
    """vm1's migrationState as in vmi-migrated.yaml (node-b to node-a), ended 2.5 h ago."""
    return {"sourceNode": "node-b", "targetNode": "node-a", "targetPod": "virt-launcher-vm1-q8w4z",
            "startTimestamp": stamp(before(hours=2, minutes=31)), "endTimestamp": stamp(before(hours=2, minutes=30)),
            "completed": True}


def cluster():
    """vm1 apart after a drain moved it off its storage (we had moved it there 5 h ago), vm2
    co-located, vm3 split, other/vm4 unresolved; a VM not opted in, one not running, one of
    unexpected shape; our migration of vm1 and KubeVirt's evacuation of it."""
    storage = (share_manager_created(fixture_cluster(), FIXTURE_VOLUME, before(days=3))
               + rwx_disk("vm2-disk", "node-c") + rwx_disk("d3a", "node-a") + rwx_disk("d3b", "node-b")
               + rwx_disk("vm4-disk", None, state="stopped", owner="node-c", namespace="other")
               + rwx_disk("vm5-disk", "node-b"))
    broken = vmi("vm8", "node-a", "vm2-disk")
    broken["status"]["nodeName"] = 7
    vmis = [
        vmi("vm1", "node-a", "vm1-rootdisk", migration=migrated()),
        vmi("vm2", "node-c", "vm2-disk"),
        vmi("vm3", "node-c", "d3a", "d3b"),
        vmi("vm4", "node-a", "vm4-disk", namespace="other"),
        vmi("vm5", "node-a", "vm5-disk", opted_in=False),
        vmi("vm6", None, "vm2-disk", phase="Scheduling"),
        broken,
    ]
    vmims = [
        vmim("vm1-colocate-abcde", "vm1", "Succeeded", created=before(hours=5, minutes=31),
             ended=before(hours=5, minutes=30)),
        vmim("kubevirt-evacuation-x7k2p", "vm1", "Succeeded", created=before(hours=2, minutes=32),
             ended=before(hours=2, minutes=30), ours=False, target=None),
    ]
    return storage, vmis, vmims


SPARED = longhorn_settings(blacklist="apps/StatefulSet;kubevirt.io/VirtualMachineInstance")


def seed_cluster(kmock, storage, vmis, vmims, longhorn=SPARED):
    """The objects, and Longhorn 1.12's Settings (by default with VMIs on its blacklist: no warning)."""
    seed(kmock, storage + longhorn)
    kmock.resources[VMI] = {}
    kmock.resources[VMIM] = {}
    kmock.resources[EVENT] = {}  # KubeVirt's IOerror Events: none
    for obj in vmis:
        kmock.objects[VMI, obj["metadata"]["namespace"], obj["metadata"]["name"]] = obj
    for obj in vmims:
        kmock.objects[VMIM, obj["metadata"]["namespace"], obj["metadata"]["name"]] = obj


async def run_status(tmp_path, kmock, *args):
    return await run_verb(tmp_path, kmock, "status", *args)


HEADER = [
    "keeper: report (settings as given here: no Deployment kubevirt-colocate/kubevirt-colocate-keeper), leader none "
    "(no Lease kubevirt-colocate/kubevirt-colocate-keeper), --keep-after 10m",
    "targeted migration: available: spec.addedNodeSelector is kept: targeted migration works",
    "migration priority: available: spec.priority is kept: our migrations queue as system-maintenance",
    "migrations in flight: 0 ours (limit 2), 0 in all (limit 5)",
    "",
]
ROWS = [
    ["NAMESPACE/NAME", "NODE", "STORAGE", "STATE", "SINCE", "NEXT", "LAST ACTION"],
    ["default/vm1", "node-a", "node-b", "apart", "2h ago",
     "held: cannot move to node-b: its launcher pod on node-a is not known", "migrated to node-b 5h ago: Succeeded"],
    ["default/vm2", "node-c", "node-c", "co-located", "-", "stays: co-located", "none"],
    ["default/vm3", "node-c", "node-a,node-b", "split", "-",
     "held: split: disks served from node-a (1), node-b (1), the VM runs on node-c", "none"],
    ["other/vm4", "node-a", "-", "unresolved", "-", "held: unresolved: share-manager of pvc-vm4-disk is stopped", "none"],
]


async def test_status_table(tmp_path, kmock):
    seed_cluster(kmock, *cluster())
    code, out, err = await run_status(tmp_path, kmock)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:5] == HEADER, out
    lines = lines[5:]
    assert [re.split(r"\s{2,}", line) for line in lines[:5]] == ROWS, out
    # aligned: every column starts where its header does
    for column in ("NODE", "STORAGE", "STATE", "SINCE", "NEXT", "LAST ACTION"):
        start = lines[0].index(column)
        assert all(line[start - 2:start] == "  " and line[start] != " " for line in lines[1:5]), out
    assert lines[5] == "4 VMs: 1 co-located, 1 apart, 1 split, 1 unresolved"
    assert lines[6:] == ["skipped VMI default/vm8: status.nodeName is a int, not a string"]


async def test_status_json(tmp_path, kmock):
    seed_cluster(kmock, *cluster())
    code, out, err = await run_status(tmp_path, kmock, "-o", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["summary"] == {"total": 4, "co-located": 1, "apart": 1, "split": 1, "unresolved": 1}
    vms = {f"{vm['namespace']}/{vm['name']}": vm for vm in report["vms"]}
    assert list(vms) == ["default/vm1", "default/vm2", "default/vm3", "other/vm4"]
    ended = vms["default/vm1"]["since"]
    assert before(hours=2, minutes=31) < datetime.fromisoformat(ended) <= before(hours=2, minutes=30)
    assert vms["default/vm1"] == {
        "namespace": "default", "name": "vm1", "node": "node-a", "storage": ["node-b"], "state": "apart",
        "since": ended, "why": "disks served from node-b, the VM runs on node-a",
        "last_action": "migrated to node-b 5h ago: Succeeded",
        "last_migration": {"name": "vm1-colocate-abcde", "target": "node-b", "phase": "Succeeded",
                           "created": vms["default/vm1"]["last_migration"]["created"],
                           "ended": vms["default/vm1"]["last_migration"]["ended"]},
        "keep": True, "moves": False, "hold": "target unfit",
        "decision": "cannot move to node-b: its launcher pod on node-a is not known",
        "next": "held: cannot move to node-b: its launcher pod on node-a is not known",
        "disks": [{"claim": "vm1-rootdisk", "volume": FIXTURE_VOLUME, "share_manager_node": "node-b",
                   "data_locality": None, "local_replica": None,
                   "unknown": "Longhorn volumes and replicas not read: API has no volumes resource"}],
        "note": None, "rebooted_by_storage_restart": "no", "paused": None, "hotplugged": [], "stale_mount": None, "stale_since": None, "waiting_for_retry": None,
        "attachment_pods_deleted_by_storage_restart": None, "hotplugged_disks": [], "loopback_writeback": None,
    }
    assert vms["default/vm2"]["next"] == "stays: co-located" and vms["default/vm2"]["hold"] == "not apart"
    assert report["cluster"] == {
        "mode": "report", "settings_from": "settings as given here: no Deployment kubevirt-colocate/kubevirt-colocate-keeper",
        "leader": "none (no Lease kubevirt-colocate/kubevirt-colocate-keeper)",
        "limits": {"keep_after_seconds": 600.0, "keep_after_descheduled_seconds": 21600.0, "max_inflight": 2,
                   "max_cluster_inflight": 5, "max_per_day": 2, "max_outbound_per_node": 2},
        "targeted_migration": {"available": True, "answer": "available",
                               "why": "spec.addedNodeSelector is kept: targeted migration works", "priority": True,
                               "priority_answer": "available",
                               "priority_why": "spec.priority is kept: our migrations queue as system-maintenance"},
        "in_flight": {"ours": 0, "all": 0}, "longhorn_restarts_vms": None,
        "longhorn_restarts_vms_answer": "no", "state": "ConfigMap kubevirt-colocate/kubevirt-colocate-keeper-state",
        "state_warning": None, "io_errors_unread": None}
    assert vms["default/vm3"]["storage"] == ["node-a", "node-b"] and vms["default/vm3"]["since"] is None
    assert vms["other/vm4"]["last_migration"] is None
    assert report["skipped"] == ["VMI default/vm8: status.nodeName is a int, not a string"]


async def test_apart_since_a_later_share_manager_and_unknown(tmp_path, kmock):
    """The share-manager restarted after the migration: apart since then; a VM that never
    migrated and whose VMI shows no creation time: since ?; a migration in flight is named."""
    storage = share_manager_created(fixture_cluster(), FIXTURE_VOLUME, before(minutes=40)) + rwx_disk("d2", "node-c")
    never = vmi("vm2", "node-a", "d2")
    del never["metadata"]["creationTimestamp"]
    moving = vmi("vm3", "node-b", "d2", migration={"sourceNode": "node-b", "targetNode": "node-c",
                                                   "startTimestamp": stamp(before(minutes=3)), "completed": False})
    ours = vmim("vm3-colocate-aaaaa", "vm3", "Scheduling", created=before(minutes=3, seconds=10), target="node-c")
    seed_cluster(kmock, storage, [vmi("vm1", "node-a", "vm1-rootdisk", migration=migrated()), never, moving], [ours])
    code, out, err = await run_status(tmp_path, kmock)
    assert code == 0, err
    lines = out.splitlines()[5:]
    rows = [re.split(r"\s{2,}", line) for line in lines[1:4]]
    assert rows[0][:5] == ["default/vm1", "node-a", "node-b", "apart", "40m ago"]
    assert rows[1][:5] == ["default/vm2", "node-a", "node-c", "apart", "?"]
    assert rows[2][3:] == ["apart", "?", "held: cannot move to node-c: its launcher pod on node-b is not known",
                           "migration to node-c running for 3m (Scheduling)"]
    assert lines[4] == "3 VMs: 0 co-located, 3 apart, 0 split, 0 unresolved"


async def test_no_vms(tmp_path, kmock):
    seed_cluster(kmock, fixture_cluster(), [], [])
    code, out, err = await run_status(tmp_path, kmock)
    assert (code, out) == (0, "\n".join(HEADER) + "\n0 VMs: 0 co-located, 0 apart, 0 split, 0 unresolved\n"), err


@pytest.mark.parametrize("fault, message", [
    (403, "error: cannot read the cluster: API answered 403 for /apis/kubevirt.io/v1/virtualmachineinstances"),
    (None, "error: cannot read the cluster: API has no virtualmachineinstances resource"),
], ids=["forbidden", "no-kubevirt"])
async def test_errors_are_one_clear_line(tmp_path, kmock, fault, message):
    if fault:
        seed_cluster(kmock, *cluster())
        kmock["get /apis/kubevirt.io/v1/virtualmachineinstances"] << fault
    else:
        seed(kmock, cluster()[0])  # a cluster without KubeVirt
        del kmock.resources[VMI]
    code, out, err = await run_status(tmp_path, kmock)
    assert (code, out) == (1, "") and err.strip().splitlines() == [message], err


async def test_an_unreachable_api_is_one_clear_line(tmp_path):
    config = kubeconfig_for(tmp_path, "http://127.0.0.1:9")  # discard port: nothing listens
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "webhook", "status", "--kubeconfig", config,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: cannot read the cluster: "), lines


# --------------------------------------------------------------------------- wording


@pytest.mark.parametrize("span, text", [
    (timedelta(seconds=-3), "0s"), (timedelta(seconds=59), "59s"), (timedelta(minutes=1), "1m"),
    (timedelta(minutes=59, seconds=59), "59m"), (timedelta(hours=1), "1h"), (timedelta(hours=47), "47h"),
    (timedelta(hours=48), "2d"),
])
def test_ago(span, text):
    assert ago(span) == text


def view(**annotations):
    obj = vmi("vm1", "node-a", "vm1-rootdisk", migration=migrated())
    obj["metadata"]["annotations"].update(annotations)
    return read_vmi(obj, Settings())


@pytest.mark.parametrize("migrations, text", [
    ([], "none"),
    ([vmim("vm1-colocate-a", "vm1", "Succeeded", created=before(hours=3), ended=before(hours=2, minutes=1))],
     "migrated to node-b 2h ago: Succeeded"),
    ([vmim("vm1-colocate-a", "vm1", "Failed", created=before(hours=3), ended=before(hours=2, minutes=1))],
     "migration to node-b 2h ago: Failed"),
    ([vmim("vm1-colocate-a", "vm1", "Failed", created=before(hours=3), ended=before(hours=2, minutes=1)),
      vmim("vm1-colocate-b", "vm1", "Failed", created=before(minutes=50), ended=before(minutes=45, seconds=30))],
     "migration to node-b 45m ago: Failed (2 in a row)"),
    ([vmim("vm1-colocate-a", "vm1", "Running", created=before(minutes=4, seconds=30))],
     "migration to node-b running for 4m (Running)"),
    ([vmim("vm1-colocate-a", "vm1", "Running", created=before(hours=3, minutes=1))],
     "migration to node-b unfinished after 3h (Running)"),
    ([vmim("vm1-colocate-a", "vm1", "Succeeded", created=before(hours=3), ended=before(hours=2, minutes=1)),
      vmim("kubevirt-evacuation-x", "vm1", "Running", created=before(minutes=1), ours=False),
      vmim("vm2-colocate-a", "vm2", "Running", created=before(minutes=1))],
     "migrated to node-b 2h ago: Succeeded"),
], ids=["none", "succeeded", "failed", "failed-twice", "running", "stuck", "only-ours-of-this-vm"])
def test_last_action(migrations, text):
    assert last_action(view(), [read_migration(m) for m in migrations], NOW)[0] == text


def test_last_action_of_a_vm_the_keeper_leaves_alone():
    assert last_action(view(**{"kubevirt-scheduler/keep": "false"}), [], NOW)[0] == "none (keep disabled)"


@pytest.mark.parametrize("local_replica", [True, False], ids=["local-replica", "no-local-replica"])
async def test_status_notes_a_vm_whose_storage_node_has_no_healthy_replica(tmp_path, kmock, local_replica):
    """Co-located or not, a VM whose disk has no healthy replica by its share-manager gets a one-line note."""
    storage, vmis, vmims = cluster()
    seed_cluster(kmock, storage, vmis, vmims)
    longhorn_volume(kmock, local_replica=local_replica)
    code, out, err = await run_status(tmp_path, kmock, "-o", "json")
    assert code == 0, err
    vm1 = next(vm for vm in json.loads(out)["vms"] if vm["name"] == "vm1")
    assert vm1["disks"] == [{"claim": "vm1-rootdisk", "volume": FIXTURE_VOLUME, "share_manager_node": "node-b",
                             "data_locality": "best-effort", "local_replica": local_replica, "unknown": None}]
    code, out, err = await run_status(tmp_path, kmock)
    notes = [line for line in out.splitlines() if line.startswith("note ")]
    assert notes == ([] if local_replica else [
        "note default/vm1: co-location removes only the NFS hop for vm1-rootdisk (no healthy replica on node-b, "
        "data locality best-effort): its block I/O still crosses the network"]), out


def shipped_deployment(*args, env=()):
    """The keeper's Deployment as the manifests ship it, its container's args and env changed."""
    [deployment] = [o for o in yaml.safe_load_all((ROOT / "manifests" / "base" / "keeper.yaml").read_text())
                    if o["kind"] == "Deployment"]
    deployment["metadata"]["namespace"] = "kubevirt-colocate"
    [container] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "keeper"]
    if args:
        container["args"] = list(args)
    container["env"] = container.get("env", []) + [{"name": k, "value": v} for k, v in env]
    return deployment


def seed_deployment(kmock, deployment):
    kmock.resources[DEPLOYMENT] = {}
    kmock.objects[DEPLOYMENT, "kubevirt-colocate", "kubevirt-colocate-keeper"] = deployment


async def test_the_header_goes_by_the_deployed_keeper(tmp_path, kmock):
    """Without keeper flags, status decides as the Deployment runs the keeper: the shipped one migrates."""
    seed_cluster(kmock, *cluster())
    seed_deployment(kmock, shipped_deployment())
    code, out, err = await run_status(tmp_path, kmock)
    assert code == 0, err
    assert out.splitlines()[0] == ("keeper: migrate (from Deployment kubevirt-colocate/kubevirt-colocate-keeper), leader none "
                                   "(no Lease kubevirt-colocate/kubevirt-colocate-keeper), --keep-after 10m"), out


async def test_the_deployments_flags_win_over_its_environment_and_the_flags_given_here_over_both(tmp_path, kmock):
    seed_cluster(kmock, *cluster())
    seed_deployment(kmock, shipped_deployment("--metrics-port=8081", "--keep", "migrate", "--keep-after=60",
                                              "--keep-after-descheduled", "3600",
                                              env=[("COLOCATE_KEEP", "report"), ("COLOCATE_KEEP_MAX_INFLIGHT", "3")]))
    code, out, err = await run_status(tmp_path, kmock, "-o", "json")
    assert code == 0, err
    cluster_facts = json.loads(out)["cluster"]
    assert cluster_facts["mode"] == "migrate" and cluster_facts["limits"]["keep_after_seconds"] == 60
    assert cluster_facts["limits"]["max_inflight"] == 3
    assert cluster_facts["limits"]["keep_after_descheduled_seconds"] == 3600
    assert cluster_facts["settings_from"] == "from Deployment kubevirt-colocate/kubevirt-colocate-keeper"

    code, out, err = await run_status(tmp_path, kmock, "--keep-after-descheduled", "60", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["cluster"]["limits"]["keep_after_descheduled_seconds"] == 60

    code, out, err = await run_status(tmp_path, kmock, "--keep", "report")
    assert code == 0, err
    assert out.splitlines()[0].startswith("keeper: report (from Deployment kubevirt-colocate/kubevirt-colocate-keeper and "
                                          "the flags given here), leader none"), out
    assert "--keep-after 1m" in out.splitlines()[0]  # the Deployment's, where no flag here says otherwise


async def test_without_the_deployment_status_says_it_goes_by_its_own_flags(tmp_path, kmock):
    seed_cluster(kmock, *cluster())
    code, out, err = await run_status(tmp_path, kmock)
    assert code == 0, err
    assert out.splitlines()[0].startswith("keeper: report (settings as given here: "), out


def hotplugged(obj, *claims):
    """The VMI with `claims` hotplugged (`virtctl addvolume --persist`): in spec.volumes, marked
    hotpluggable, as vmi-hotplugged.yaml has it; the launcher pod mounts none of them."""
    obj["spec"]["volumes"] += [{"name": f"hp{i}", "persistentVolumeClaim": {"claimName": c, "hotpluggable": True}}
                               for i, c in enumerate(claims)]
    return obj


async def test_a_vm_whose_hotplugged_disk_alone_is_served_elsewhere_is_not_co_located(tmp_path, kmock):
    """vm2's root disk is served from its node; its hotplugged disk from node-b: split, and
    said so. vm7 boots from a container disk and has only a hotplugged disk, served elsewhere:
    apart."""
    storage = rwx_disk("vm2-disk", "node-c") + rwx_disk("hp-data", "node-b") + rwx_disk("hp-only", "node-b")
    seed_cluster(kmock, storage, [hotplugged(vmi("vm2", "node-c", "vm2-disk"), "hp-data"),
                                  hotplugged(vmi("vm7", "node-c"), "hp-only")], [])
    code, out, err = await run_status(tmp_path, kmock, "-o", "json")
    assert code == 0, err
    states = {vm["name"]: (vm["state"], vm["storage"]) for vm in json.loads(out)["vms"]}
    assert states == {"vm2": ("split", ["node-b", "node-c"]), "vm7": ("apart", ["node-b"])}, out


@pytest.mark.parametrize("longhorn, answer", [
    (longhorn_settings(), "yes"),  # Longhorn 1.12's defaults
    (longhorn_settings(blacklist="kubevirt.io/VirtualMachineInstance"), "no"),
    (longhorn_settings(blacklist="apps/StatefulSet;kubevirt.io/VirtualMachineInstance"), "no"),
    (longhorn_settings("v1.11.2"), "no"),
    (longhorn_settings("v1.11.2", endpoint_network_for_rwx_volume="longhorn-system/rwx-net"), "yes"),
    (longhorn_settings(auto_delete_pod_when_volume_detached_unexpectedly="maybe"), "cannot tell"),
    ([], "cannot tell"),  # nothing to read: no Longhorn Settings at all
], ids=["1.12-defaults", "vmi-blacklisted", "vmi-beside-another-kind", "1.11", "1.11-rwx-network", "garbled",
        "none"])  # every combination: tests/rules/shared/test_longhorn.py
async def test_status_says_whether_a_share_manager_restart_reboots_the_vms(tmp_path, kmock, longhorn, answer):
    storage, vmis, vmims = cluster()
    seed_cluster(kmock, storage, vmis, vmims, longhorn)
    code, out, err = await run_status(tmp_path, kmock)
    assert code == 0, err
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    code, said, err = await run_status(tmp_path, kmock, "-o", "json")
    assert code == 0, err
    header = json.loads(said)["cluster"]
    assert header["longhorn_restarts_vms_answer"] == answer
    # VM by VM: each VM a share-manager serves; the others none.
    vms = json.loads(said)["vms"]
    assert {vm["rebooted_by_storage_restart"] for vm in vms if vm["storage"]} == {answer}
    assert {vm["rebooted_by_storage_restart"] for vm in vms if not vm["storage"]} <= {None}
    if answer == "no":
        assert warnings == [] and header["longhorn_restarts_vms"] is None, out
        return
    assert warnings == [f"warning: {header['longhorn_restarts_vms']}"], out
    if answer == "yes":
        assert warnings[0].startswith("warning: Longhorn reboots VMs when their share-manager restarts: ")
        assert ("add kubevirt.io/VirtualMachineInstance to blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly"
                in warnings[0])
    else:
        assert warnings[0].startswith("warning: cannot tell whether Longhorn reboots VMs")


async def test_a_vm_paused_on_an_io_error_is_said_so(tmp_path, kmock):
    """virt-handler's Paused condition with reason PausedIOError: the VM's disk stopped answering
    (a stale NFS mount after its NFS server restarted, when Longhorn spared it)."""
    storage, vmis, vmims = cluster()
    vm1 = next(obj for obj in vmis if obj["metadata"]["name"] == "vm1")
    vm1["status"]["conditions"] = [*vm1["status"].get("conditions", []), {
        "type": "Paused", "status": "True", "reason": "PausedIOError", "message": "VMI was paused, low-level IO error detected"}]
    seed_cluster(kmock, storage, vmis, vmims)
    code, out, err = await run_status(tmp_path, kmock, "-o", "json")
    assert code == 0, err
    paused = {vm["name"]: vm["paused"] for vm in json.loads(out)["vms"]}
    assert paused["vm1"] == "PausedIOError" and {v for k, v in paused.items() if k != "vm1"} == {None}
    code, out, err = await run_status(tmp_path, kmock)
    assert [line for line in out.splitlines() if "PausedIOError" in line] == [
        "note default/vm1: paused on a disk I/O error (PausedIOError); if its NFS server restarted and Longhorn spared "
        "it, its mount may be stale: a live migration's target pod mounts the volume afresh (docs/operations.md)"]


async def test_a_hotplugged_disks_attachment_pod_is_deleted_even_with_vms_spared(tmp_path, kmock):
    """vm2's hotplugged disk is mounted by an attachment pod its launcher pod owns: with VMIs on the
    blacklist the VM is spared, its attachment pod is not, and status says so for vm2 alone."""
    storage = rwx_disk("vm2-disk", "node-c") + rwx_disk("hp-data", "node-b")
    seed_cluster(kmock, storage, [hotplugged(vmi("vm2", "node-c", "vm2-disk"), "hp-data"), vmi("vm3", "node-c", "vm2-disk")],
                 [], longhorn_settings(blacklist="kubevirt.io/VirtualMachineInstance"))
    code, out, err = await run_status(tmp_path, kmock, "-o", "json")
    assert code == 0, err
    said = {vm["name"]: (vm["hotplugged"], vm["rebooted_by_storage_restart"],
                         vm["attachment_pods_deleted_by_storage_restart"]) for vm in json.loads(out)["vms"]}
    assert said == {"vm2": (["hp-data"], "no", "yes"), "vm3": ([], "no", None)}
    assert {vm["name"]: vm["hotplugged_disks"] for vm in json.loads(out)["vms"]} == {"vm2": [HP_DATA], "vm3": []}
    code, out, err = await run_status(tmp_path, kmock)
    assert [line for line in out.splitlines() if "attachment pod" in line] == [f"note default/vm2: {HP_DATA}"]


# What KubeVirt 1.8 does to a hotplugged disk when its share-manager restarts (docs/operations.md).
HP_DATA = ("hotplugged disk pvc-hp-data (PVC hp-data) stays on the NFS mount it was first attached with: a share-manager "
           "restart deletes its attachment pod (Longhorn's blacklist cannot spare it: its owner is the launcher Pod) and "
           "KubeVirt makes it again on the same node, but never refreshes the VM's mount; if that mount went stale the VM "
           "stays paused until it is live-migrated (the keeper's recovery, whose target pod gets its own attachment pod "
           "and a fresh mount) or restarted")


async def test_the_keep_after_status_prints_is_what_the_flag_and_the_deployment_take(tmp_path, kmock):
    """One duration syntax: the Deployment's `--keep-after=1h30m` is read, printed as it was written,
    and that text given back to `status --keep-after` is the same wait (90 s is 1m30s, not 1m)."""
    seed_cluster(kmock, *cluster())
    seed_deployment(kmock, shipped_deployment("--keep-after=1h30m", env=[("COLOCATE_KEEP_AFTER_DESCHEDULED", "2h")]))
    code, out, err = await run_status(tmp_path, kmock)
    assert code == 0 and "--keep-after 1h30m" in out.splitlines()[0], (out, err)
    code, out, err = await run_status(tmp_path, kmock, "--keep-after", "1h30m", "-o", "json")
    assert code == 0 and json.loads(out)["cluster"]["limits"]["keep_after_seconds"] == 5400, err
    assert json.loads(out)["cluster"]["limits"]["keep_after_descheduled_seconds"] == 7200
    code, out, err = await run_status(tmp_path, kmock, "--keep-after", "90")
    assert code == 0 and "--keep-after 1m30s" in out.splitlines()[0], (out, err)


def with_cache(obj, mode):
    """`obj` with each of its volumes a disk in cache mode `mode` (as `cache: writeback` in the VM spec)."""
    obj["spec"]["domain"]["devices"]["disks"] = [{"name": v["name"], "disk": {"bus": "virtio"}, "cache": mode}
                                                 for v in obj["spec"]["volumes"]]
    return obj


async def test_a_co_located_disk_with_cache_writeback_is_named_with_what_to_do(tmp_path, kmock):
    """vm2 runs beside the share-manager of its disk, in cache mode writeback: the NFS client and server
    share its node (loopback NFS), which can deadlock under memory pressure with dirty pages. vm3's
    writeback disks are served from other nodes, vm1's disk is in KubeVirt's default mode: no note."""
    storage, vmis, vmims = cluster()
    for obj in vmis:
        name = obj["metadata"]["name"]
        if name in ("vm2", "vm3"):
            with_cache(obj, "writeback")
    seed_cluster(kmock, storage, vmis, vmims)
    code, out, err = await run_status(tmp_path, kmock)
    assert code == 0, err
    assert [line for line in out.splitlines() if "writeback" in line] == [
        "note default/vm2: vm2-disk uses cache: writeback and is served by an NFS server on the VM's own node: under "
        "memory pressure its dirty pages written back through it can deadlock the node (loopback NFS); set the disk's "
        "cache to none (KubeVirt's default) or writethrough, or opt the VM out (docs/operations.md)"]
    code, out, err = await run_status(tmp_path, kmock, "-o", "json")
    loopback = {vm["name"]: vm["loopback_writeback"] for vm in json.loads(out)["vms"]}
    assert loopback["vm2"].startswith("vm2-disk uses cache: writeback")
    assert {v for k, v in loopback.items() if k != "vm2"} == {None}
