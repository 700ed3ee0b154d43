"""`status --drain NODE --aim-evacuations on` against the emulator, as an admin runs it: per VM of the
node, where KubeVirt's evacuation would be aimed, or why it would be left as KubeVirt makes it."""
import json

import pytest
from tests.support.kube import OLD_CPU, launcher_pod_of, node, run_verb, rwx_disk, vmi
from tests.support.kubevirt_api import Cluster, KubeVirtApi


@pytest.fixture
def kmock_options(kmock_options):
    return {**kmock_options, "cls": KubeVirtApi}


def cluster():
    """On node-a: vm1 (its disk served from node-b), vm2 (served from node-a: it leaves too), vm3 (served
    from a node of an older CPU generation, which never takes its migration)."""
    objects = [node("node-a"), node("node-b"), node("node-c"), node("old-1", cpu=OLD_CPU)]
    for name, served in (("vm1", "node-b"), ("vm2", "node-a"), ("vm3", "old-1")):
        the_vmi = vmi(name, "node-a", f"{name}-disk")
        objects += [the_vmi, launcher_pod_of(the_vmi), *rwx_disk(f"{name}-disk", served)]
    return objects


async def drained(tmp_path, kmock, *flags):
    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", "--lease-namespace", "default",
                                    "--drain", "node-a", *flags)
    assert code == 0, err
    return {vm["name"]: vm for vm in json.loads(out)["drain"]["vms"]}


async def test_status_says_where_each_evacuation_would_be_aimed_or_why_not(tmp_path, kmock):
    Cluster(kmock).seed(cluster())
    said = await drained(tmp_path, kmock, "--aim-evacuations", "on")
    assert said["vm1"]["evacuation"].startswith("its evacuation would be aimed at node-b:")
    assert "where the NFS server of disk vm1-disk runs" in said["vm1"]["evacuation"]
    assert said["vm2"]["evacuation"].startswith("its evacuation would be aimed at node-c:")  # vm1's aim takes room on node-b
    assert said["vm3"]["evacuation"].startswith("its evacuation would be left as KubeVirt makes it: no node fits")
    assert "node old-1 fails" in said["vm3"]["evacuation"]
    assert said["vm1"]["goes"].startswith("live-migrated off by KubeVirt's evacuation: its evacuation would be aimed")
    code, text, err = await run_verb(tmp_path, kmock, "status", "--lease-namespace", "default", "--drain", "node-a",
                                     "--aim-evacuations", "on")
    assert code == 0 and "default/vm2: live-migrated off by KubeVirt's evacuation: its evacuation would be aimed at node-c" \
        in text, text + err


async def test_with_the_aim_off_status_says_what_it_said(tmp_path, kmock):
    Cluster(kmock).seed(cluster())
    said = await drained(tmp_path, kmock)
    assert {vm["evacuation"] for vm in said.values()} == {None}
    assert said["vm1"]["goes"].startswith("live-migrated off by KubeVirt's evacuation, where kube-scheduler puts")
