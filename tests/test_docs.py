"""Every command the documentation gives works as written, and every YAML snippet renders.

Each command of README.md and docs/ that runs kubectl, helm, kubevirt-colocate or make (in a code
block, or as a code span of the text) is run here, as far as it runs without a cluster:
- `kubectl`: the command itself, against an API address where nothing listens, in a directory
  holding `manifests/` and the README's overlay `my-cluster/`. kubectl refuses bad flags,
  resource/name forms and kustomizations before it connects: such a refusal fails the test,
  "connection refused" passes it. Where KUBEBUILDER_ASSETS names a control plane, each also runs
  against the real apiserver (writes as server-side dry runs), which refuses kinds it does not serve.
- `helm install|upgrade`: the chart rendered with the command's values (Helm's engine, the values
  schema included); the README's install, upgrade and uninstall also run on the real apiserver
  (tests/test_chart.py::test_the_readme_install_upgrade_and_uninstall).
- `kubevirt-colocate` and `kubectl colocate`: read by the command line's own parser; `status`,
  `explain` and `spare-vms` also run against the emulator (kmock), their placeholders filled in.
- `kubectl krew install --manifest=FILE`: the manifest is there.
- `make`: `make -n`, the target and its recipe.
A block that needs what the tests do not have says so in the source, before it:
`<!-- live cluster: WHY -->`. A command that is neither run here nor so marked fails the test,
as does a code span naming a command that is not one unless it is listed in FRAGMENTS.

The Python a reader is told to write (docs/adding-a-rule.md) is written: each block goes where its
marker says (`<!-- code: PATH, before: LINE -->`) in a copy of the tree, and the tests the doc names
run there (tests/support/walkthrough.py). Every `--flag` the docs name is one of the command line's,
the benchmark's, or another tool's listed with the tool.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import docs, walkthrough
from tests.support.docs import ROOT, Command
from tests.support.helm import CHART, RELEASE, Command as HelmCommand, objects, render
from tests.support.kube import kubectl
from webhook.cli import build_parser

# Code spans that name a command in passing, not one to run as written.
FRAGMENTS = {
    "kubectl describe", "kubectl describe pod", "kubectl drain", "kubectl apply -k", "kubectl kustomize",
    "kubectl get -o yaml", "helm install --dry-run=client", "helm upgrade … --reset-then-reuse-values",
    "kubevirt-colocate VERB --help",
}
NOWHERE = """apiVersion: v1
kind: Config
clusters: [{name: docs, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: docs, user: {token: docs}}]
contexts: [{name: docs, context: {cluster: docs, user: docs, namespace: default}}]
current-context: docs
"""
NO_SERVER = ("connect: connection refused", "Unable to connect to the server", "server 127.0.0.1:1 was refused")


def all_commands() -> list[Command]:
    found = []
    for path in docs.documents():
        found += [command for block in docs.blocks(path) for command in docs.commands_of(block)]
        found += docs.inline_commands(path)
    return found


def readme_overlay() -> str:
    """The README's kustomize overlay (Install): `my-cluster/kustomization.yaml`."""
    [block] = [b for b in docs.blocks(ROOT / "README.md") if b.lang == "yaml" and "images:" in b.text]
    return block.text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Where a reader runs the commands: a checkout's manifests/ and charts/, the README's overlay
    as my-cluster/, and a kubeconfig naming an address where nothing listens."""
    where = tmp_path_factory.mktemp("reader")
    shutil.copytree(ROOT / "manifests", where / "manifests")
    (where / "my-cluster").mkdir()
    (where / "my-cluster" / "kustomization.yaml").write_text(readme_overlay())
    (where / "kubeconfig").write_text(NOWHERE)
    return where


def check_kubectl(command: Command, workdir: Path) -> str | None:
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    env = {**os.environ, "KUBECONFIG": str(workdir / "kubeconfig"), "HOME": str(workdir)}
    done = subprocess.run([tool, *command.words[1:]], cwd=workdir, env=env, input=command.stdin or "",
                          capture_output=True, text=True, timeout=60)
    if done.returncode == 0 or any(words in done.stderr for words in NO_SERVER):
        return None
    return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"


def check_cli(words: tuple[str, ...], prog: str) -> str | None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser(prog).parse_args(list(words))
    except SystemExit as exc:
        return None if exc.code == 0 else err.getvalue().strip()
    return None


def check_helm(command: Command) -> str | None:
    verb = command.words[1]
    if verb in ("show", "get"):
        target = command.words[3] if len(command.words) > 3 else ""
        known = (ROOT / target / "values.yaml").is_file() if verb == "show" else target == RELEASE
        return None if known else f"{target}: no such chart or release"
    try:
        parsed = HelmCommand(command.line)
    except (ValueError, IndexError) as exc:
        return f"not read here: {exc}"
    if parsed.release != RELEASE:
        return f"release {parsed.release}, not {RELEASE}"
    if parsed.verb in ("install", "upgrade"):
        if (ROOT / parsed.chart).resolve() != CHART:
            return f"chart {parsed.chart}: not ./charts/kubevirt-colocate"
        render(parsed.values, namespace=parsed.namespace)  # the schema refuses a bad value (raises)
    return None


def check_make(command: Command) -> str | None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    done = subprocess.run([make, "-n", "--no-print-directory", *command.words[1:]], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    return None if done.returncode == 0 else done.stderr.strip()


def check(command: Command, workdir: Path) -> str | None:
    """Why the command fails as written, or None."""
    program, rest = command.words[0], command.words[1:]
    if program == "kubectl" and rest[:1] == ("colocate",):
        return check_cli(rest[1:], "kubectl colocate")
    if program == "kubectl" and rest[:2] == ("krew", "install"):  # krew's own: the manifest it installs
        manifest = next((word.removeprefix("--manifest=") for word in rest if word.startswith("--manifest=")), "")
        return None if (ROOT / manifest).is_file() and manifest else f"no krew manifest {manifest!r}"
    if program == "kubectl":
        return check_kubectl(command, workdir)
    if program == "kubevirt-colocate":
        return check_cli(rest, "kubevirt-colocate")
    return check_helm(command) if program == "helm" else check_make(command)


COMMANDS = all_commands()


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.where} {c.line[:60]}" for c in COMMANDS])
def test_every_command_of_the_docs_works_as_written(command, workdir):
    if command.live is not None:
        assert command.live, f"{command.where}: a live-cluster marker must say why"
        pytest.skip(f"needs a live cluster: {command.live}")
    if command.inline and command.line in FRAGMENTS:
        return
    assert check(command, workdir) is None, f"{command.where}: {command.line}: {check(command, workdir)}"


WRITES = {"apply", "create", "delete", "label", "patch", "annotate"}
# Kinds the docs name that the tests' control plane does not serve (kubefake/envtest.py installs the CRDs of
# what the install creates), and why.
NOT_IN_THE_TESTS = {"certificaterequests": "cert-manager's own kind; the tests install only the CRDs the install creates"}
# What only a cluster can refuse and kubectl asks it: a kind or resource it does not serve.
REFUSED_BY_THE_SERVER = ("doesn't have a resource type", "unknown flag", "unknown command", "no need to specify")


KUBECTL = [c for c in COMMANDS if c.words[0] == "kubectl" and c.words[1:2] not in (("colocate",), ("krew",))
           and c.live is None and not (c.inline and c.line in FRAGMENTS)]


@pytest.mark.real
@pytest.mark.parametrize("command", KUBECTL, ids=lambda c: f"{c.where} {c.line[:60]}")
def test_every_kubectl_command_of_the_docs_is_one_the_apiserver_reads(command, workdir, control_plane):
    """On the real apiserver (KUBEBUILDER_ASSETS), with no workload running: kubectl resolves every
    kind and flag; writes are dry runs on the server (`--dry-run=server`), nothing stays."""
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    words = list(command.words[1:]) + ["--request-timeout=10s"]
    if WRITES & set(words):
        words.append("--dry-run=server")
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig), "HOME": str(workdir)}
    try:
        done = subprocess.run([tool, *words], cwd=workdir, env=env, input=command.stdin or "", capture_output=True,
                              text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return  # a wait, a port-forward or a log stream: kubectl read it and waited on the cluster
    unserved = re.search(r'doesn\'t have a resource type "([^"]+)"', done.stderr)
    if unserved and unserved[1] in NOT_IN_THE_TESTS:
        pytest.skip(f"{unserved[1]}: {NOT_IN_THE_TESTS[unserved[1]]}")
    assert not any(words in done.stderr for words in REFUSED_BY_THE_SERVER), f"{command.where}: {done.stderr}"


def test_a_command_the_docs_get_wrong_fails_the_test(tmp_path, workdir):
    """What this test finds: a command kubectl refuses, a flag our parser does not know, a make
    target that does not exist, a helm command it cannot read; a marker without a reason."""
    planted = tmp_path / "planted.md"
    planted.write_text("Try:\n\n    kubectl -n kubevirt-colocate get deploy/kubevirt-colocate pods\n"
                       "    kubectl colocate status --watch\n    make no-such-target\n    helm repo add x y\n\n"
                       "<!-- live cluster: -->\n\n    kubectl get nodes\n")
    found = [c for b in docs.blocks(planted) for c in docs.commands_of(b)]
    assert [c.live for c in found] == [None] * 4 + [""]
    for command in found[:4]:
        assert check(command, workdir) is not None, command.line


def test_every_fragment_is_still_in_the_docs():
    spans = {command.line for command in COMMANDS if command.inline}
    assert FRAGMENTS <= spans, FRAGMENTS - spans


# --------------------------------------------------------------------------- the YAML snippets

KUSTOMIZATION = {"resources", "components", "patches", "images", "configMapGenerator", "labels", "namespace"}
NAMESPACED = {"Deployment", "Job", "Service", "ServiceAccount", "ConfigMap", "Secret", "Role", "RoleBinding",
              "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor", "PrometheusRule", "Certificate", "Issuer"}
SNIPPETS = [b for path in docs.documents() for b in docs.blocks(path) if b.lang in ("yaml", "yml")]


def kustomize(overlay: Path) -> list[dict]:
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    done = subprocess.run([tool, "kustomize", str(overlay)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return objects(done.stdout)


def write_overlay(overlay: Path, kustomization: dict) -> Path:
    overlay.mkdir(parents=True)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return overlay


def config_maps_named(workload: dict) -> set[str]:
    """The ConfigMaps a Deployment's or Job's pods need to start (optional ones left out)."""
    pod = workload["spec"]["template"]["spec"]
    names = {v["configMap"]["name"] for v in pod.get("volumes") or [] if "configMap" in v
             and not v["configMap"].get("optional")}
    for container in pod["containers"]:
        names |= {e["valueFrom"]["configMapKeyRef"]["name"] for e in container.get("env") or []
                  if "configMapKeyRef" in (e.get("valueFrom") or {}) and not e["valueFrom"]["configMapKeyRef"].get("optional")}
    return names


def assert_the_install_starts(rendered: list[dict], where: str) -> None:
    """Every namespaced object has its namespace, every ConfigMap a pod needs is there, beside it."""
    for obj in rendered:
        if obj["kind"] in NAMESPACED:
            assert obj["metadata"].get("namespace"), f"{where}: {obj['kind']} {obj['metadata']['name']} has no namespace"
    maps = {(o["metadata"].get("namespace"), o["metadata"]["name"]) for o in rendered if o["kind"] == "ConfigMap"}
    for workload in (o for o in rendered if o["kind"] in ("Deployment", "Job")):
        for name in config_maps_named(workload):
            assert (workload["metadata"]["namespace"], name) in maps, \
                f"{where}: {workload['kind']} {workload['metadata']['name']} needs ConfigMap {name}, not rendered"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[b.where for b in SNIPPETS])
def test_every_yaml_snippet_renders_with_the_manifests_it_names(snippet, workdir):
    """A kustomization renders next to manifests/ (a patch alone: in an overlay of ../manifests),
    each patch's target is there, and the install it makes can start; any other snippet is YAML."""
    found = list(yaml.safe_load_all(snippet.text))
    if not (len(found) == 1 and isinstance(found[0], dict) and set(found[0]) <= KUSTOMIZATION):
        return
    kustomization = found[0]
    if not {"resources", "components"} & set(kustomization):  # a patch for your overlay: the whole install's
        kustomization = {"resources": ["../manifests", "../manifests/monitoring"], **kustomization}
    overlay = workdir / f"snippet-{snippet.path.stem}-{snippet.line}"
    if any("../../manifests" in r for r in kustomization.get("resources", [])):
        overlay = overlay / "monitoring"
    rendered = kustomize(write_overlay(overlay, kustomization))
    base = kustomize(write_overlay(overlay.with_name(overlay.name + "-base"),
                                   {k: v for k, v in kustomization.items() if k != "patches"}))
    for patch in kustomization.get("patches", []):
        target = patch.get("target")
        if target:
            assert any(o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"] for o in base), \
                f"{snippet.where}: the patch's target {target} is not in the install"
    if any(o["kind"] == "Deployment" for o in rendered):
        assert_the_install_starts(rendered, snippet.where)


# --------------------------------------------------------------------------- the README's tables and switches


def section(title: str, path: Path = ROOT / "README.md") -> str:
    """The text of one section (`## title`, `### title`), up to the next heading of its level or above."""
    text = path.read_text()
    heading = re.search(rf"^(#+) {re.escape(title)}\n", text, re.M)
    assert heading, f"{docs.shown(path)} has no section {title!r}"
    end = re.compile(rf"^#{{1,{len(heading[1])}}} ", re.M).search(text, heading.end())
    return text[heading.start():end.start() if end else len(text)]


def readme_section(title: str) -> str:
    return section(title)


def first_cells(table_text: str) -> set[str]:
    """The code spans of each table row's first cell."""
    return {span for row in table_text.splitlines() if row.startswith("| `")
            for span in re.findall(r"`([^`]+)`", row.split("|")[1])}


OPERATIONS = ROOT / "docs" / "operations.md"


def test_the_docs_name_every_value_of_the_chart():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    nested = ("image", "keeper", "longhorn", "certManager", "monitoring")
    expected = {f"{top}.{key}" if top in nested else top for top, inner in values.items()
                for key in (inner if top in nested else [None])}
    assert first_cells(section("The chart's values", OPERATIONS)) == expected
    assert "docs/operations.md#the-charts-values" in readme_section("Install")


def test_the_docs_name_every_verb():
    from webhook.cli.parser import VERBS

    named = {cell.split()[0] for cell in first_cells(section("The verbs", OPERATIONS))}
    assert named == {verb for verb, _, _ in VERBS}
    assert "docs/operations.md#the-verbs" in readme_section("The command line")


def deployed(objects_: list[dict], name: str, verb: str):
    """The settings a Deployment's container runs `verb` with (its flags)."""
    from webhook.cli import settings_from

    [deployment] = [o for o in objects_ if o["kind"] == "Deployment" and o["metadata"]["name"] == name]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return settings_from(build_parser().parse_args([verb, *container["args"]]))


def test_the_switch_that_stops_pinning_reaches_both_deployments(workdir):
    """README, Stop pinning without uninstalling: with Helm and with kustomize, the webhook runs with
    --pin off and the keeper with --keep off."""
    section = readme_section("Stop pinning without uninstalling")
    [helm] = [c for b in docs.blocks(ROOT / "README.md") for c in docs.commands_of(b)
              if c.words[:2] == ("helm", "upgrade") and "pin=off" in c.line]
    assert helm.line in section
    [snippet] = [b for b in SNIPPETS if b.path.name == "README.md" and "--pin=off" in b.text]
    overlay = write_overlay(workdir / "stop-pinning", {"resources": ["../manifests"], **yaml.safe_load(snippet.text)})
    for rendered in (render(HelmCommand(helm.line).values), kustomize(overlay)):
        assert deployed(rendered, "kubevirt-colocate", "serve").pin == "off"
        assert deployed(rendered, "kubevirt-colocate-keeper", "keep").keep == "off"


# --------------------------------------------------------------------------- the command line, against the emulator

PLACEHOLDERS = {"NS/VM": "default/vm1", "NODE": "node-a", "NS": "default", "VM": "vm1"}
CLUSTER_VERBS = ("status", "explain", "spare-vms")
CLI = [c for c in COMMANDS if (c.words[0] == "kubevirt-colocate" and c.words[1:2] != ("keep",)
                               or c.words[:2] == ("kubectl", "colocate")) and set(CLUSTER_VERBS) & set(c.words[1:3])]


@pytest.fixture
def kmock_options(kmock_options):
    """KubeVirt's writes as a real apiserver makes them: `dryRun=All` stores nothing."""
    from tests.support.kubevirt_api import KubeVirtApi

    return {**kmock_options, "cls": KubeVirtApi}


@pytest.mark.parametrize("command", CLI, ids=[f"{c.where} {c.line[:60]}" for c in CLI])
async def test_every_command_line_of_the_docs_runs_against_the_emulator(command, kmock, tmp_path):
    """The docs' `status`, `explain` and `spare-vms`, as written (placeholders such as NS/VM filled in),
    against the emulator holding opted-in VMs; the kubeconfig's contexts include the docs' `prod`."""
    import asyncio
    import sys

    from tests.tools.test_status import cluster, seed_cluster

    seed_cluster(kmock, *cluster())
    config = tmp_path / "config"
    server = str(kmock.url).rstrip("/")
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": server}}],
        "users": [{"name": "anonymous", "user": {}}],
        "contexts": [{"name": name, "context": {"cluster": "emulator", "user": "anonymous"}} for name in ("emulator", "prod")],
    }))
    words = [PLACEHOLDERS.get(word, word) for word in command.words]
    args = words[2:] if words[0] == "kubectl" else words[1:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")} | {"KUBECONFIG": str(config)}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "webhook", *args, env=env, cwd=tmp_path,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, f"{command.where}: {command.line}: {err.decode()}"
    assert out.strip()


# --------------------------------------------------------------------------- the Python a reader is told to write

ADDING_A_RULE = ROOT / "docs" / "adding-a-rule.md"
# Its example is a hold the tree has: added again as a hold of its own, under names of its own.
AS_A_HOLD_OF_ITS_OWN = {"NO_EVICTION": "COPIED_NO_EVICTION", "prefer no eviction": "prefer no eviction, copied",
                        "descheduler.alpha.kubernetes.io/prefer-no-eviction": "example.com/prefer-no-eviction"}


def test_every_python_block_of_the_docs_says_which_file_it_goes_into():
    found = {path.name: walkthrough.edits(path) for path in docs.documents()}
    assert all((ROOT / edit.path).is_file() for edits in found.values() for edit in edits)
    assert {edit.path for edit in found["adding-a-rule.md"]} == {
        "webhook/rules/shared/alone.py", "webhook/rules/shared/declared.py", "webhook/rules/keeping/keep.py",
        "tests/rules/keeping/test_keep.py"}


def test_the_code_adding_a_rule_gives_passes_the_tests_it_names(tmp_path):
    """docs/adding-a-rule.md's blocks, each put where it says in a copy of the tree, make a hold
    that the tests the doc names pass with: a row of its own in HOLDS, checked by keyword."""
    runs = walkthrough.follow(ADDING_A_RULE, tmp_path, AS_A_HOLD_OF_ITS_OWN)
    assert [done.returncode for done in runs] == [0], "\n".join(done.stdout[-3000:] for done in runs)
    keep = (tmp_path / "tree" / "webhook" / "rules" / "keeping" / "keep.py").read_text()
    assert "Check(hold=Alone.COPIED_NO_EVICTION," in keep and "Check(hold=Alone.NO_EVICTION," in keep


def positional(doc: str) -> str:
    """The doc with its check built by position, as the doc once had it."""
    return doc.replace("Check(hold=Alone.NO_EVICTION,", "Check(Alone.NO_EVICTION,").replace(
        "          holds=lambda vm, p: NO_EVICTION", "          lambda vm, p: NO_EVICTION").replace(
        '          words=lambda vm, p: f"annotated', '          lambda vm, p: f"annotated').replace(
        '          needs=("vmi",), own=True),\n```', '          ("vmi",), own=True),\n```')


def test_a_drift_planted_in_adding_a_rule_fails_it(tmp_path):
    """The check written with its arguments by position: the copy's tests fail, naming it."""
    planted = tmp_path / "adding-a-rule.md"
    planted.write_text(positional(ADDING_A_RULE.read_text()))
    assert planted.read_text() != ADDING_A_RULE.read_text()
    runs = walkthrough.follow(planted, tmp_path, AS_A_HOLD_OF_ITS_OWN)
    assert [done.returncode for done in runs] == [1]
    assert "Check: 4 arguments by position" in runs[0].stdout


# --------------------------------------------------------------------------- every flag the docs name

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# Flags of the other tools the docs use, and the tool: a flag of ours misspelt is none of these.
OTHER_TOOLS = {
    "--admission-control-config-file": "kube-apiserver", "--as": "kubectl", "--field-selector": "kubectl",
    "--for": "kubectl wait", "--ignore-not-found": "kubectl", "--prune": "kubectl apply", "--raw": "kubectl get",
    "--timeout": "kubectl wait", "--type": "kubectl patch", "--dry-run": "helm, kubectl",
    "--create-namespace": "helm", "--reset-then-reuse-values": "helm upgrade", "--reuse-values": "helm upgrade",
    "--set": "helm", "--manifest": "kubectl krew", "--bin-dir": "setup-envtest", "--build-arg": "docker build",
    "--platform": "docker build", "--generate-hashes": "uv pip compile", "--python-version": "uv pip compile",
    "--ignore-requires-python": "pip", "--no-deps": "pip", "--require-hashes": "pip",
    "--overwrite": "kubectl annotate", "--replicas": "kubectl scale",
}
# Flags the docs name as gone: `serve` refuses them (docs/operations.md says how to upgrade from them).
REMOVED = {"--migration-targets"}


def command_line_flags() -> set[str]:
    """Every flag of `kubevirt-colocate` and its verbs, as their usage lines show them."""
    from webhook.cli.parser import VERBS

    found = {"--help"}  # the usage shows it as -h
    for words in (["--help"], *([verb, "--help"] for verb, _, _ in VERBS)):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
            build_parser().parse_args(words)
        found |= set(FLAG.findall(out.getvalue().split("\n\n")[0]))  # the usage, before the descriptions
    return found


def bench_flags() -> set[str]:
    """The benchmark's flags (docs/performance.md), as its modules add them."""
    return {flag for path in (ROOT / "bench").glob("*.py")
            for flag in re.findall(r'add_argument\(\s*"(--[a-z][a-z0-9-]*)"', path.read_text())}


def unknown_flags(text: str, known: set[str]) -> set[str]:
    return set(FLAG.findall(text)) - known - set(OTHER_TOOLS) - REMOVED


def test_every_flag_the_docs_name_exists():
    """A flag named in README.md or docs/, in a command or in the text, is one of the command
    line's (every verb's), the benchmark's, or another tool's listed above with the tool."""
    known = command_line_flags() | bench_flags()
    assert {"--keep-max-outbound-per-node", "--request-timeout", "--context", "--version"} <= known
    found = {path.name: unknown_flags(path.read_text(), known) for path in docs.documents()}
    assert {name: flags for name, flags in found.items() if flags} == {}


def test_a_flag_that_does_not_exist_is_found():
    text = "the keeper never takes one of these slots (`--max-outbound-per-node`); `--keep-after 10m`"
    assert unknown_flags(text, command_line_flags() | bench_flags()) == {"--max-outbound-per-node"}


# --------------------------------------------------------------------------- the README, a landing page

README_LINES = 350


def test_the_readme_is_a_landing_page():
    """At most 350 lines: the detail lives in docs/, where it is run and tested as the README's is."""
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines: move detail to docs/"


def broken_links(path: Path) -> list[str]:
    found = []
    for line, target in docs.links(path):
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        if not where.exists():
            found.append(f"{docs.shown(path)}:{line}: {target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in docs.anchors(where):
            found.append(f"{docs.shown(path)}:{line}: {target}: no such section")
    return found


def test_every_link_of_the_docs_leads_somewhere():
    """Every link of README.md, docs/ and CHANGELOG.md to a file of the project exists, and its
    anchor is a heading there: what moves between documents keeps its links."""
    assert [link for path in [*docs.documents(), ROOT / "CHANGELOG.md"] for link in broken_links(path)] == []


def test_a_broken_link_is_found(tmp_path):
    planted = tmp_path / "docs" / "planted.md"
    planted.parent.mkdir()
    planted.write_text("# Here\n\n[ok](#here), [gone](#there), [file](nothing.md), `[code](nowhere.md)`\n")
    assert broken_links(planted) == [f"{planted}:3: #there: no such section", f"{planted}:3: nothing.md: no such file"]
