"""Each pass says whether Longhorn reboots co-located VMs when their share-manager restarts: the
metric, and one log line at the first pass and whenever a Setting it reads changes."""
import logging

from tests.support.kube import longhorn_settings, node
from tests.support.kubevirt_api import apart_vm, sample

from webhook.kinds import LONGHORN_SETTING

BLACKLIST = "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly"


def answered():
    return {answer: sample("colocate_longhorn_restarts_vms", answer=answer) for answer in ("yes", "no", "cannot_tell")}


def said(caplog):
    return [r for r in caplog.records if r.getMessage() == "longhorn and share-manager restarts"]


async def test_the_pass_says_it_once_and_again_when_a_setting_changes(cluster, make_keeper, kmock, caplog):
    caplog.set_level(logging.INFO, "webhook.keeper")
    cluster.seed([node("node-a"), node("node-b")] + apart_vm() + longhorn_settings())  # Longhorn 1.12's defaults
    keeper = await make_keeper()

    await keeper.run_pass()
    assert answered() == {"yes": 1, "no": 0, "cannot_tell": 0}
    [line] = said(caplog)
    assert line.levelno == logging.WARNING and line.fields["answer"] == "yes"
    assert line.fields["settings"]["current-longhorn-version"] == "v1.12.0"
    assert f"add kubevirt.io/VirtualMachineInstance to {BLACKLIST}" in line.fields["why"]

    await keeper.run_pass()
    assert len(said(caplog)) == 1  # nothing changed: nothing said

    # The admin puts VMIs on the blacklist, beside the kind already there.
    kmock.objects[LONGHORN_SETTING, "longhorn-system", BLACKLIST]["value"] = "apps/StatefulSet;kubevirt.io/VirtualMachineInstance"
    await keeper.run_pass()
    assert answered() == {"yes": 0, "no": 1, "cannot_tell": 0}
    assert [(r.levelno, r.fields["answer"]) for r in said(caplog)[1:]] == [(logging.INFO, "no")]


async def test_settings_it_cannot_read_are_cannot_tell_and_the_pass_goes_on(cluster, make_keeper, kmock, caplog):
    caplog.set_level(logging.INFO, "webhook.keeper")
    cluster.seed([node("node-a"), node("node-b")] + apart_vm())
    kmock.resources.pop(LONGHORN_SETTING, None)  # no Longhorn Settings served at all
    keeper = await make_keeper()
    report = await keeper.run_pass()
    assert answered() == {"yes": 0, "no": 0, "cannot_tell": 1}
    [line] = said(caplog)
    assert line.fields["answer"] == "cannot tell" and "could not be read" in line.fields["why"]
    assert report.created  # it reports; it acts on nothing less for it


async def test_with_spare_vms_on_the_leader_adds_the_vmi_kind_once(cluster, make_keeper, kmock, caplog):
    from webhook.config import Settings

    caplog.set_level(logging.INFO, "webhook.keeper")
    cluster.seed([node("node-a"), node("node-b")] + apart_vm() + longhorn_settings(blacklist="apps/StatefulSet"))
    keeper = await make_keeper(Settings(keep="report", spare_vms=True))

    await keeper.run_pass()
    setting = kmock.objects[LONGHORN_SETTING, "longhorn-system", BLACKLIST].raw
    assert setting["value"] == "apps/StatefulSet;kubevirt.io/VirtualMachineInstance"
    assert answered() == {"yes": 0, "no": 1, "cannot_tell": 0}  # said after the change, read again
    [event] = [e for e in cluster.events() if e["involvedObject"]["kind"] == "Setting"]
    assert event["reason"] == "VMsSpared" and "kubevirt-colocate (--spare-vms on)" in event["message"]
    version = setting["metadata"]["resourceVersion"]

    await keeper.run_pass()  # nothing missing: nothing written
    assert kmock.objects[LONGHORN_SETTING, "longhorn-system", BLACKLIST].raw["metadata"]["resourceVersion"] == version
    assert len([e for e in cluster.events() if e["involvedObject"]["kind"] == "Setting"]) == 1


async def test_without_spare_vms_or_without_the_lease_nothing_is_written(cluster, make_keeper, kmock):
    from webhook.config import Settings

    cluster.seed([node("node-a"), node("node-b")] + apart_vm() + longhorn_settings())
    for keeper in (await make_keeper(Settings(keep="migrate")),
                   await make_keeper(Settings(keep="migrate", spare_vms=True), authority=lambda within: False)):
        await keeper.run_pass()
        assert kmock.objects[LONGHORN_SETTING, "longhorn-system", BLACKLIST].raw["value"] == ""
        assert answered()["yes"] == 1


async def test_a_blacklist_it_cannot_read_is_left_alone(cluster, make_keeper, kmock):
    from webhook.config import Settings

    cluster.seed([node("node-a"), node("node-b")] + apart_vm() + longhorn_settings(blacklist="apps/StatefulSet, x"))
    keeper = await make_keeper(Settings(keep="report", spare_vms=True))
    await keeper.run_pass()
    assert kmock.objects[LONGHORN_SETTING, "longhorn-system", BLACKLIST].raw["value"] == "apps/StatefulSet, x"
    assert answered() == {"yes": 0, "no": 0, "cannot_tell": 1}
