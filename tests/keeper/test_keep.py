"""`python -m webhook keep`, as deployed: elected through its Lease, acting, reporting on its own
operations port, handing the Lease over on SIGTERM; two replicas, one keeper."""
import asyncio
import datetime
import os
import subprocess
import sys

from tests.support.keep import Keeping
from tests.support.kube import Serving, kubeconfig_for, sample, scrape
from tests.support.kubevirt_api import apart_vm, eventually, three_nodes
from tests.support.stores import api_host

from webhook.kinds import LEASE

NS = "kubevirt-colocate"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/kubevirt-colocate-keeper"


def holder(kmock):
    return kmock.objects[LEASE, NS, "kubevirt-colocate-keeper"].raw["spec"]["holderIdentity"]


async def keeper(kmock, tmp_path, name, *flags):
    """`keep --keep migrate --keep-after 0` as replica `name`, against the emulated cluster."""
    return await Keeping.start("--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)), "--keep", "migrate",
                               "--keep-after", "0", "--lease-namespace", NS, *flags, env={"POD_NAME": name})


def forbidden(what):
    """An API answer of 403 for `what`."""
    import kmock as kmocklib

    def answer():
        raise kmocklib.KubernetesError(status=403, reason="Forbidden", message=f"{what} is forbidden")

    return answer


async def readyz_says(keeping, words):
    status, text = await scrape(f"{keeping.ops}/readyz")
    return (status, text) if words in text else None


async def test_keep_elects_itself_moves_the_vm_and_hands_the_lease_over_on_sigterm(cluster, kmock, tmp_path):
    cluster.seed(three_nodes() + apart_vm())
    keeping = await keeper(kmock, tmp_path, "replica-a")
    try:
        assert await eventually(lambda: cluster.migrations(), timeout=15)
        [made] = cluster.migrations()
        assert made["spec"] == {"vmiName": "vm1", "addedNodeSelector": {"kubernetes.io/hostname": "node-b"},
                                "priority": "system-maintenance"}
        text = await eventually(lambda: keeping.metrics_with("colocate_vms", state="apart"), timeout=5)
        assert sample(text, "colocate_keeper_leader") == 1
        assert sample(text, "colocate_keeper_targeted_migration") == 1
        assert sample(text, "colocate_vms", state="co-located") == 0
        assert sample(text, "colocate_keeper_migrations_total", result="created") == 1
        # Its own caches (no VMIs there: the keeper's KubeVirt watch holds them), and nothing of admission's.
        assert sample(text, "colocate_cache_healthy", cache="pods") == 1
        assert sample(text, "colocate_store_objects", resource="pods") is not None
        for name in ("colocate_admissions_total", "colocate_admission_duration_seconds", "colocate_stranded_pods",
                     "colocate_certificate_expiry_timestamp_seconds", "colocate_event_loop_lag_seconds"):
            assert f"# TYPE {name} " not in text, name
        assert await scrape(f"{keeping.ops}/readyz") == (200, "ok\n")
        assert await scrape(f"{keeping.ops}/healthz") == (200, "ok\n")
        assert holder(kmock) == "replica-a"
    finally:
        code = await keeping.stop()
    assert code == 0
    assert holder(kmock) == ""  # released: a follower takes over at its next try, not after expiry
    said = [line["msg"] for line in keeping.lines]
    assert said.index("keeper leading") < said.index("keeper migration created")
    assert said.index("stopping") < said.index("keeper stopped leading") < said.index("lease released") \
        < said.index("exiting")
    [created] = keeping.said("keeper migration created")
    assert (created["vm"], created["from"], created["to"]) == ("default/vm1", "node-a", "node-b")
    assert {line.get("process") for line in keeping.lines} == {"keeper"}
    assert "Traceback" not in str(keeping.lines)


async def test_of_two_replicas_one_leads_and_acts_and_the_other_takes_over_when_it_stops(cluster, kmock, tmp_path):
    cluster.seed(three_nodes() + apart_vm() + apart_vm("vm2"))
    first = await keeper(kmock, tmp_path, "replica-a", "--keep-max-per-day", "1")
    second = await keeper(kmock, tmp_path, "replica-b", "--keep-max-per-day", "1")
    try:
        assert await eventually(lambda: len(cluster.migrations()) == 2, timeout=15)
        leader_name = holder(kmock)
        leader, follower = (first, second) if leader_name == "replica-a" else (second, first)
        follower_name = "replica-b" if leader_name == "replica-a" else "replica-a"
        text = await eventually(lambda: leader.metrics_with("colocate_vms", state="apart"), timeout=5)
        assert sample(text, "colocate_keeper_leader") == 1
        text = await eventually(lambda: follower.metrics_with("colocate_keeper_leader"), timeout=5)
        assert sample(text, "colocate_keeper_leader") == 0
        assert sample(text, "colocate_vms", state="apart") is None  # a follower holds no VMs, no caches
        assert sample(text, "colocate_cache_healthy", cache="pods") is None
        assert await scrape(f"{follower.ops}/readyz") == (200, "ok\n")  # ready to take over
        assert follower.said("keeper leading") == [] and follower.said("keeper migration created") == []
        assert len(leader.said("keeper migration created")) == 2

        assert await leader.stop() == 0  # a rollout or a drain: the Lease handed over at once
        assert await eventually(lambda: holder(kmock) == follower_name, timeout=10)
        text = await eventually(lambda: follower.metrics_with("colocate_vms", state="apart"), timeout=15)
        assert sample(text, "colocate_keeper_leader") == 1
        assert len(cluster.migrations(ours=False)) == 2  # the new leader finds ours in flight: nothing more
    finally:
        for keeping in (first, second):
            assert await keeping.stop() == 0


async def test_losing_the_lease_stops_the_keeper_at_once(cluster, kmock, tmp_path):
    """Another holder shows up: the term ends at the next read of the Lease (2 s) and nothing is created
    while the other holds it; the caches stay, for this replica's next term (listed once a process)."""
    cluster.seed(three_nodes() + apart_vm(migratable=False))
    keeping = await keeper(kmock, tmp_path, "replica-a")
    try:
        await eventually(lambda: keeping.metrics_with("colocate_vms_held", hold="not live-migratable"), timeout=15)
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await cluster.patch(LEASE_PATH, {"spec": {"holderIdentity": "replica-b", "renewTime": now, "acquireTime": now,
                                                  "leaseDurationSeconds": 60}})
        text = await eventually(lambda: keeping.said("keeper stopped leading"), timeout=10)
        assert text[0]["why"] == "the lease is held by replica-b"
        metrics = await eventually(lambda: keeping.metrics_with("colocate_keeper_leader"), timeout=5)
        assert sample(metrics, "colocate_keeper_leader") == 0

        await asyncio.sleep(1)  # the cancelled term has unwound
        assert sample(await keeping.metrics(), "colocate_cache_healthy", cache="pods") == 1
        assert cluster.migrations(ours=False) == []
    finally:
        assert await keeping.stop() == 0
    assert holder(kmock) == "replica-b"  # not ours to release


async def test_keep_off_elects_nothing_and_reads_nothing(cluster, kmock, tmp_path):
    cluster.seed(three_nodes() + apart_vm())
    keeping = await Keeping.start("--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)), "--keep", "off")
    try:
        assert await scrape(f"{keeping.ops}/readyz") == (200, "ok\n")
        text = await keeping.metrics()
    finally:
        assert await keeping.stop() == 0
    assert [r for r in kmock] == []  # no Lease, no watches, no migrations
    for name in ("colocate_keeper_leader", "colocate_vms", "colocate_keeper_migrations_total"):
        assert f"# TYPE {name} " not in text, name


def test_the_keeper_needs_a_lease_namespace_outside_a_cluster(kmock, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("POD_NAMESPACE", "COLOCATE_LEASE_NAMESPACE",
                                                            "COLOCATE_KEEP")}
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "keep", "--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)),
         "--metrics-port", "0"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the keeper needs --lease-namespace"), done.stderr


async def test_a_forbidden_migration_api_is_a_degraded_note_and_nothing_is_created(cluster, kmock, tmp_path):
    kmock["/apis/kubevirt.io/v1/virtualmachineinstancemigrations"] << forbidden("migrations")
    cluster.seed(three_nodes() + apart_vm())
    keeping = await keeper(kmock, tmp_path, "replica-a")
    try:
        status, text = await eventually(lambda: readyz_says(keeping, "keeper:"), timeout=10)
        assert status == 200 and text.startswith("ok, degraded: keeper: virtualmachineinstancemigrations: ")
        assert "403" in text
    finally:
        assert await keeping.stop() == 0
    assert cluster.migrations(ours=False) == []


async def test_a_failing_cache_of_the_keepers_is_said(cluster, kmock, tmp_path):
    sharemanagers = kmock.resource("longhorn.io", "v1beta2", "sharemanagers")
    kmock["watch", sharemanagers] << forbidden("sharemanagers")  # listed, then not watched
    cluster.seed(three_nodes() + apart_vm())
    keeping = await keeper(kmock, tmp_path, "replica-a")
    try:
        status, _ = await eventually(lambda: readyz_says(keeping, "keeper: sharemanagers in longhorn-system: "),
                                     timeout=15)
        assert status == 200
    finally:
        assert await keeping.stop() == 0


async def test_serve_with_the_keepers_variables_runs_no_keeper_and_says_so_once(cluster, kmock, tls_files, tmp_path):
    """The chart's `env` goes to both containers: `serve` with COLOCATE_KEEP=migrate in its
    environment starts, reads no keeper setting, says so once; no Lease is read, no migration
    watched or made."""
    cluster.seed(three_nodes() + apart_vm())
    serving = await Serving.start(tls_files, "--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)),
                                  "--drain-delay", "0", env={"COLOCATE_KEEP": "migrate", "COLOCATE_KEEP_AFTER": "0"})
    try:
        assert await eventually(lambda: serving.lines and scrape(f"{serving.ops}/readyz"), timeout=10)
        await eventually(lambda: any(r.url.path.endswith("/virtualmachineinstances") for r in kmock), timeout=10)
        text = (await scrape(f"{serving.ops}/metrics"))[1]
    finally:
        assert await serving.stop() == 0
    [said] = [line for line in serving.lines if line["msg"].startswith("the keeper's variables")]
    assert said["variables"] == ["COLOCATE_KEEP", "COLOCATE_KEEP_AFTER"]
    touched = {r.url.path for r in kmock}
    assert not [p for p in touched if "coordination.k8s.io" in p or "virtualmachineinstancemigrations" in p]
    assert cluster.migrations(ours=False) == []
    assert "colocate_keeper_leader" not in text and "colocate_vms{" not in text