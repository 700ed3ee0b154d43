"""`python -m webhook serve` with the keeper, as deployed: elected, acting, reporting, handing over."""
import asyncio
import os
import ssl
import subprocess
import sys

import aiohttp
from tests.support.stores import api_host
from tests.support.kube import Serving, kubeconfig_for, metrics_with, review, sample, scrape, vm_pod
from tests.support.kubevirt_api import apart_vm, eventually, three_nodes

from webhook.kinds import LEASE

NS = "kubevirt-colocate"


async def ready(serving):
    return (await scrape(f"{serving.ops}/readyz"))[0] == 200


async def admit_one(serving, tls_files):
    context = ssl.create_default_context(cafile=str(tls_files["ca"]))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context),
                                     timeout=aiohttp.ClientTimeout(total=5)) as session:
        async with session.post(f"{serving.base}/mutate?timeout=5s", json=review(vm_pod())) as response:
            return response.status, (await response.json())["response"]["allowed"]


async def migrating(kmock, tls_files, tmp_path):
    """`serve` with the keeper migrating at once, against the emulated cluster."""
    return await Serving.start(
        tls_files, "--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)), "--drain-delay", "0",
        "--keep", "migrate", "--keep-after", "0", "--lease-namespace", NS)


def forbidden(what):
    """An API answer of 403 for `what`."""
    import kmock as kmocklib

    def answer():
        raise kmocklib.KubernetesError(status=403, reason="Forbidden", message=f"{what} is forbidden")

    return answer


async def test_serve_elects_itself_keeps_the_vm_and_hands_the_lease_over(cluster, kmock, tls_files, tmp_path):
    cluster.seed(three_nodes() + apart_vm())
    serving = await Serving.start(
        tls_files, "--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)), "--drain-delay", "0.2",
        "--keep", "migrate", "--keep-after", "0", "--lease-namespace", NS, env={"POD_NAME": "replica-a"})
    try:
        assert await eventually(lambda: cluster.migrations(), timeout=15)
        [made] = cluster.migrations()
        assert made["spec"] == {"vmiName": "vm1", "addedNodeSelector": {"kubernetes.io/hostname": "node-b"},
                                "priority": "system-maintenance"}

        text = await eventually(lambda: metrics_with(serving, "colocate_vms", state="apart"), timeout=5)
        assert sample(text, "colocate_keeper_leader") == 1
        assert sample(text, "colocate_keeper_targeted_migration") == 1
        assert sample(text, "colocate_vms", state="apart") == 1
        assert sample(text, "colocate_vms", state="co-located") == 0
        assert sample(text, "colocate_keeper_migrations_total", result="created") == 1
        assert await scrape(f"{serving.ops}/readyz") == (200, "ok\n")
        assert kmock.objects[LEASE, NS, "kubevirt-colocate-keeper"].raw["spec"]["holderIdentity"] == "replica-a"
    finally:
        code = await serving.stop()
    assert code == 0
    assert kmock.objects[LEASE, NS, "kubevirt-colocate-keeper"].raw["spec"]["holderIdentity"] == ""  # released
    said = [line["msg"] for line in serving.lines]
    assert said.index("keeper leading") < said.index("keeper migration created")
    assert said.index("keeper stopped leading") < said.index("lease released") < said.index("draining")
    created = next(line for line in serving.lines if line["msg"] == "keeper migration created")
    assert (created["vm"], created["from"], created["to"]) == ("default/vm1", "node-a", "node-b")
    assert "Traceback" not in str(serving.lines)


async def test_the_admission_path_never_waits_on_the_keeper(cluster, kmock, tls_files, tmp_path):
    """The KubeVirt API hangs for the keeper: admissions are answered, the replica is ready."""
    cluster.seed(three_nodes() + apart_vm())
    kmock["list", kmock.resource("kubevirt.io", "v1", "virtualmachineinstances")] << (lambda: asyncio.sleep(60))
    serving = await migrating(kmock, tls_files, tmp_path)
    try:
        assert await eventually(lambda: ready(serving), timeout=10)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await admit_one(serving, tls_files) == (200, True)
        assert loop.time() - started < 1
        assert cluster.migrations() == []
    finally:
        assert await serving.stop() == 0


async def test_keep_off_runs_no_election_watches_no_migrations_and_exports_no_keeper_metrics(cluster, kmock,
                                                                                                tls_files, tmp_path):
    """With the keeper off, serve watches what admission reads (VMIs among them: their hotplugged
    disks) and nothing of the keeper's: no Lease, no migrations."""
    cluster.seed(three_nodes() + apart_vm())
    serving = await Serving.start(tls_files, "--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)),
                                  "--drain-delay", "0", "--keep", "off")
    try:
        assert await eventually(lambda: ready(serving), timeout=10)
        assert await admit_one(serving, tls_files) == (200, True)
        # Scraped once the review counts (a keeper would be up by then: the caches synced first).
        text = await eventually(lambda: metrics_with(serving, "colocate_admissions_total"), timeout=5)
    finally:
        assert await serving.stop() == 0
    touched = {r.url.path for r in kmock}
    assert not [p for p in touched if "coordination.k8s.io" in p or "virtualmachineinstancemigrations" in p]
    for name in ("colocate_keeper_leader", "colocate_keeper_targeted_migration", "colocate_vms",
                 "colocate_vms_apart_longest_seconds", "colocate_keeper_migrations_total"):
        assert f"# TYPE {name} " not in text and sample(text, name) is None, name
    assert cluster.migrations() == []


def test_the_keeper_needs_a_lease_namespace_outside_a_cluster(kmock, tls_files, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("POD_NAMESPACE", "COLOCATE_LEASE_NAMESPACE",
                                                            "COLOCATE_KEEP")}
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "serve", "--kubeconfig", kubeconfig_for(tmp_path, api_host(kmock)),
         "--port", "0", "--metrics-port", "0", "--tls-cert-file", str(tls_files["cert"]),
         "--tls-key-file", str(tls_files["key"])],
        capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the keeper needs --lease-namespace"), done.stderr


async def test_a_forbidden_migration_api_is_a_degraded_note_and_nothing_is_created(cluster, kmock, tls_files,
                                                                                    tmp_path):
    kmock["/apis/kubevirt.io/v1/virtualmachineinstancemigrations"] << forbidden("migrations")
    cluster.seed(three_nodes() + apart_vm())
    serving = await migrating(kmock, tls_files, tmp_path)
    try:
        async def noted():
            status, text = await scrape(f"{serving.ops}/readyz")
            return (status, text) if "keeper:" in text else None

        status, text = await eventually(noted, timeout=10)
        assert status == 200 and text.startswith("ok, degraded: keeper: virtualmachineinstancemigrations: ")
        assert "403" in text
        assert await admit_one(serving, tls_files) == (200, True)
    finally:
        assert await serving.stop() == 0
    assert cluster.migrations(ours=False) == []


async def test_a_failing_cache_of_the_keepers_own_is_said_as_the_keepers(cluster, kmock, tls_files, tmp_path):
    """The keeper's process watches the disks' objects itself: one it cannot watch is said in
    /readyz beside serve's own note for it (the keeper holds its VMs as "view incomplete" meanwhile)."""
    sharemanagers = kmock.resource("longhorn.io", "v1beta2", "sharemanagers")
    kmock["watch", sharemanagers] << forbidden("sharemanagers")  # listed, then not watched
    cluster.seed(three_nodes() + apart_vm())
    serving = await migrating(kmock, tls_files, tmp_path)
    try:
        async def noted():
            status, text = await scrape(f"{serving.ops}/readyz")
            theirs = "keeper: sharemanagers in longhorn-system: " in text  # each retry lists, then fails to watch
            return (status, text) if theirs and "degraded: sharemanagers in longhorn-system: " in text else None

        status, text = await eventually(noted, timeout=15)  # serve's own note and the keeper's
        assert status == 200
    finally:
        assert await serving.stop() == 0
