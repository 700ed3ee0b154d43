"""`kubectl colocate` takes kubectl's own flags, as virtctl and krew's plugins do: --context,
--kubeconfig, -n/--namespace, --request-timeout, -o json|yaml; run against the kmock emulator."""
import asyncio
import json
import os
import sys

import pytest
import yaml
from tests.support.kubevirt_api import KubeVirtApi
from tests.tools.test_explain import seed_vm
from tests.tools.test_status import cluster, seed_cluster

PLUGIN = "import sys; from webhook.cli import plugin; sys.exit(plugin())"  # what kubectl runs: kubectl-colocate


@pytest.fixture
def kmock_options(kmock_options):
    """KubeVirt's writes as a real apiserver makes them: `dryRun=All` stores nothing."""
    return {**kmock_options, "cls": KubeVirtApi}


def contexts(tmp_path, kmock) -> str:
    """A kubeconfig whose current context names an address where nothing listens; the context
    `emulator` (namespace `other`) names the emulator."""
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "nowhere",
        "clusters": [{"name": "nowhere", "cluster": {"server": "http://127.0.0.1:1"}},
                     {"name": "emulator", "cluster": {"server": str(kmock.url).rstrip("/")}}],
        "users": [{"name": "anonymous", "user": {}}],
        "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "anonymous"}},
                     {"name": "emulator", "context": {"cluster": "emulator", "user": "anonymous", "namespace": "other"}}],
    }))
    return str(path)


async def kubectl_colocate(kubeconfig: str, *args: str) -> tuple[int, str, str]:
    """`kubectl colocate ARGS` with KUBECONFIG set, as kubectl runs its plugin."""
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"} | {"KUBECONFIG": kubeconfig}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", PLUGIN, *args, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_status_with_a_context_and_a_namespace(tmp_path, kmock):
    seed_cluster(kmock, *cluster())
    config = contexts(tmp_path, kmock)
    code, out, err = await kubectl_colocate(config, "status", "--context", "emulator", "-n", "other",
                                            "--request-timeout", "20s", "-o", "json")
    assert code == 0, err
    report = json.loads(out)
    assert [(vm["namespace"], vm["name"]) for vm in report["vms"]] == [("other", "vm4")]
    code, out, err = await kubectl_colocate(config, "status", "--context=emulator", "--namespace=default")
    assert code == 0, err
    assert "default/vm1 " in out and "other/vm4" not in out
    # Without --context: the current context, where nothing answers.
    code, out, err = await kubectl_colocate(config, "status")
    assert code != 0 and "127.0.0.1:1" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("named", [["-n", "default", "vm1"], ["default/vm1"], ["vm1", "--namespace", "default"],
                                   ["default/vm1", "-n", "default"]])
async def test_explain_takes_the_namespace_either_way(tmp_path, kmock, named):
    seed_vm(kmock, "node-a")
    code, out, err = await kubectl_colocate(contexts(tmp_path, kmock), "explain", *named, "--context", "emulator",
                                            "-o", "yaml")
    assert code == 0, err
    report = yaml.safe_load(out)
    assert report["vm"] == "default/vm1" and report["running_on"] == "node-a"


async def test_explain_without_a_namespace_takes_the_contexts(tmp_path, kmock):
    seed_vm(kmock, "node-a")  # in default; the context `emulator` says `other`
    code, out, err = await kubectl_colocate(contexts(tmp_path, kmock), "explain", "vm1", "--context", "emulator")
    assert code == 1 and err.strip() == "error: no VirtualMachine or VirtualMachineInstance other/vm1", err


@pytest.mark.parametrize("args, said", [
    (["explain", "default/vm1", "-n", "other"], "is in default, but -n says other"),
    (["explain", "a/b/c"], "NAMESPACE/VM"),
    (["explain", "/vm1"], "NAMESPACE/VM"),
    (["status", "--request-timeout", "soon"], "--request-timeout: 'soon' is not a duration (seconds, or a number"),
    (["status", "--request-timeout", "0"], "--request-timeout: '0' is not a duration above 0"),
    (["status", "--context", "elsewhere"], 'error: context "elsewhere" does not exist in KUBECONFIG='),
])
async def test_a_bad_flag_is_one_line_and_exit_2(tmp_path, kmock, args, said):
    code, out, err = await kubectl_colocate(contexts(tmp_path, kmock), *args)
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(("error: ", "kubectl colocate ")) and out == ""
