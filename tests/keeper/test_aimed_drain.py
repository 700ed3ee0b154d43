"""After the emulator's drain of 8 VMs (tests/test_drain_evacuations.py), the keeper's next pass over
the cluster as the drain left it, with nothing holding it back (`--keep=migrate --keep-after=0`): with
the aim on it finds every VM beside its storage and makes no migration; with it off it moves the VMs
the drain left apart. (The drain's own migrations are left out: what the keeper decides on is where each
VM runs and where its storage is.)"""
from __future__ import annotations

import copy

import pytest
from tests.test_drain_evacuations import drain

from webhook.config import Settings


@pytest.mark.parametrize("aimed", [True, False], ids=["aim on", "aim off"])
async def test_after_a_drain_the_keeper_moves_only_what_the_drain_left_apart(cluster, make_keeper, aimed):
    played = await drain(settings=Settings(aim_evacuations=aimed))
    cluster.seed([copy.deepcopy(o) for o in played.objects if o["kind"] != "VirtualMachineInstanceMigration"])
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, keep_max_inflight=8))
    await keeper.run_pass()
    moved = sorted(m["spec"]["vmiName"] for m in cluster.migrations())
    if aimed:
        assert moved == [] and played.apart() == []  # 8 evacuations, no migration of ours
    else:  # the VMs the drain left apart, as many at once as the keeper's bounds let it (2 off a node)
        assert moved and set(moved) <= set(played.apart())
