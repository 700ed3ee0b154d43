"""The benchmark command works end to end (tiny and quick here; its numbers come from `make bench`)."""
import ast
import os
import re
import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from tests.support.kube import nodes, review, rwx_disk, vm_pod
from tests.support import processes

from bench.load import parse_wrk
from webhook.admission import server
from webhook.stores.snapshot import SnapshotStore
from webhook.config import Settings

ROOT = Path(__file__).resolve().parent.parent

WRK_OUTPUT = """\
Running 5s test @ https://127.0.0.1:40000/mutate?timeout=10s
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   612.40us  201.10us   9.10ms   93.12%
    Req/Sec     6.54k   310.22     6.90k    80.00%
  Latency Distribution
     50%  571.00us
     75%  640.00us
     90%  710.00us
     99%    1.21ms
  32541 requests in 5.00s, 48.12MB read
  Socket errors: connect 0, read 1, write 0, timeout 0
  Non-2xx or 3xx responses: 2
Requests/sec:   6508.20
"""


def test_wrk_output_is_read_with_its_units():
    result = parse_wrk(WRK_OUTPUT)
    assert (result.requests, result.seconds, result.errors) == (32541, 5.0, 3)
    assert (result.p50_ms, result.p99_ms) == (pytest.approx(0.571), pytest.approx(1.21))
    assert round(result.rps) == 6508


def bench(*args, path=None):
    env = dict(os.environ, PATH=path) if path else None
    return processes.run([sys.executable, "-m", "bench", *args], cwd=ROOT, timeout=120, env=env)


def test_without_wrk_the_bench_says_so():
    no_wrk = str(Path(sys.executable).parent)
    done = bench("--load", "wrk", path=no_wrk)
    assert done.returncode != 0 and "wrk is not installed" in done.stderr


def test_a_tiny_run_reports_every_figure():
    done = bench("--load", "asyncio", "--duration", "0.3", "--rounds", "1", "--connections", "2",
                 "--memory", "100,10,20", "--inprocess-rounds", "1", "--migrated-vms", "100")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in ("full admission path (cache)", "bare aiohttp, stdlib json", "ratio full / bare",
                 "API requests during the full-path runs: 0", "API-fallback path", "RSS ", "targets: ",
                 "in-process admission", "kube-scheduler's checks add", "where all 100 VMs have migrated",
                 "serve, parse and allow only"):
        assert line in out, out
    for row in ("full admission path (cache)", "bare aiohttp, stdlib json", "serve, parse and allow only"):
        answered = next(line for line in out.splitlines() if line.startswith(row))
        assert answered.split()[-1] == "0" and float(answered.split()[-5]) > 0, answered  # no errors, some req/s
    cached = next(line for line in out.splitlines() if line.startswith("cached: "))
    for held in ("100 persistentvolumeclaims", "100 persistentvolumes", "10 sharemanagers in longhorn-system"):
        assert held in cached, cached
    assert "errors" in out and " 0   (4.0 GETs" in out  # the fallback path really reads the API


def test_the_memory_figure_at_a_tiny_size():
    """`--size NODES,VMS`: serve's RSS against the chart's limit and its probes' slowest answers while it syncs."""
    done = bench("--memory-only", "--size", "5,40")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(r"RSS [\d.]+ MiB \(peak [\d.]+ MiB; the chart's limit 864 MiB\), synced in", out), out
    assert re.search(r"slowest probes while syncing: /healthz \d+ ms \(at \d+ s\), /readyz \d+ ms", out), out
    cached = next(line for line in out.splitlines() if line.startswith("cached: "))
    assert "5 nodes" in cached and "80 pods" in cached and "40 virtualmachineinstances" in cached, cached
    assert "targets: RSS ≤ 70% of the limit met, probes ≤ 1 s met" in out, out


def test_a_tiny_drain_storm_through_a_real_apiserver_creates_every_pod_decided(control_plane):
    """`python -m bench.storm --apiserver real`: the pods created through kube-apiserver, which calls serve."""
    done = processes.run([sys.executable, "-m", "bench.storm", "--apiserver", "real", "--nodes", "6", "--vms", "30",
                          "--share-managers", "2", "--vm-starts", "2", "--rounds", "1", "--json"], cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["apiserver"] == "real" and result["refused"] == 0, result
    for name in ("quiet_vm", "control_vm", "control_share_manager", "storm_vm", "storm_share_manager"):
        assert result[name]["undecided"] == 0, (name, result[name])
        assert 0 < result[name]["p50_ms"] <= result[name]["max_ms"], (name, result[name])


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return ({alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
            | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module and not node.level})


def test_tests_and_bench_share_kubefake_and_keep_to_kmocks_public_api():
    """The tests reach into the bench only where they test it; kubefake serves both and needs
    neither; nothing imports kmock's private modules."""
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if not path.name.startswith("test_bench"):
            assert not any(m == "bench" or m.startswith("bench.") for m in imports(path)), path
    for path in sorted((ROOT / "kubefake").rglob("*.py")):
        assert not any(m.split(".")[0] in ("bench", "webhook") for m in imports(path)), path
    for path in sorted([*ROOT.glob("bench/*.py"), *ROOT.glob("kubefake/*.py"), *(ROOT / "tests").rglob("*.py")]):
        assert not any(m.startswith("kmock._") for m in imports(path)), path


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def kmock_privates(sources: dict[str, str]) -> list[str]:
    """Where the sources reach kmock's private names: `kmock._x` or `kmock.X._y`, and in a class
    derived from one of kmock's (directly or through the sources' own classes) or mixed into one,
    a private method defined, or `self._y`, `super()._y` used."""
    trees = {where: ast.parse(source) for where, source in sources.items()}
    classes = [(where, node) for where, tree in trees.items() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]

    def chain(node: ast.AST) -> list[str]:
        names = []
        while isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        return [node.id, *reversed(names)] if isinstance(node, ast.Name) else []

    derived: set[str] = set()
    while True:
        more = {c.name for _, c in classes for base in c.bases
                if chain(base)[:1] in (["kmock"], ["kmocklib"]) or chain(base)[-1:] and chain(base)[-1] in derived}
        more |= {chain(base)[-1] for _, c in classes if c.name in derived for base in c.bases if chain(base)}  # mixins
        if more <= derived:
            break
        derived |= more
    found = [f"{where}:{node.lineno} {'.'.join(chain(node))}" for where, tree in trees.items() for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and chain(node)[:1] in (["kmock"], ["kmocklib"])
             and any(private(part) for part in chain(node))]
    for where, cls in classes:
        if cls.name not in derived:
            continue
        for node in ast.walk(cls):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and private(node.name):
                found.append(f"{where}:{node.lineno} {cls.name}.{node.name} defined")
            elif isinstance(node, ast.Attribute) and private(node.attr) and (
                    (isinstance(node.value, ast.Name) and node.value.id == "self")
                    or (isinstance(node.value, ast.Call) and chain(node.value.func) == ["super"])):
                found.append(f"{where}:{node.lineno} {ast.unparse(node)}")
    return found


def test_nothing_reaches_kmocks_private_names():
    """kmock is used through its public API alone: no private attribute of it read, called or
    overridden in kubefake, the bench or the tests (the checker itself flags each kind of reach)."""
    sources = {str(path.relative_to(ROOT)): path.read_text()
               for path in sorted([*ROOT.glob("bench/*.py"), *ROOT.glob("kubefake/*.py"), *(ROOT / "tests").rglob("*.py")])}
    assert kmock_privates(sources) == []
    reaching = """
class Trimmed(kmock.KubernetesEmulator):
    async def _handle(self, request):
        del self._requests[:-8]
        return await super()._handle(request)
    async def __aenter__(self):
        return await super().__aenter__()
class Further(Trimmed):
    async def answer(self, request):
        async with self._lock:
            return await kmock.RawHandler._render_error(self, None)
class Writes:
    async def write(self, request):
        await self._buses[request.resource].put({})
class Mixed(Writes, kmock.KubernetesEmulator):
    pass
"""
    assert sorted(line.split(" ", 1)[1] for line in kmock_privates({"x.py": reaching})) == [
        "Trimmed._handle defined", "kmock.RawHandler._render_error", "self._buses", "self._lock", "self._requests",
        "super()._handle"]


async def test_the_floor_parses_and_allows_without_deciding():
    """`python -m bench.floor` (the bench's floor) answers every review allowed, no patch, where
    the same endpoint deciding pins; a body that is no review is still refused."""
    from bench.floor import Allowing

    store = SnapshotStore(nodes("node-a", "node-b") + rwx_disk("d0", "node-b"))
    raw = orjson.dumps(review(vm_pod("d0")))
    deciding, floor = server.Admissions(store, Settings()), Allowing(store, Settings())
    assert "patch" in orjson.loads(await deciding.answer(raw, deciding.deadline(10.0), 0.0))["response"]
    assert orjson.loads(await floor.answer(raw, floor.deadline(10.0), 0.0))["response"] == {"uid": "uid-1", "allowed": True}
    with pytest.raises(server.reviews.BadReview):
        await floor.answer(b"{}", floor.deadline(10.0), 0.0)


async def test_the_floor_serves_its_answers_on_serves_port(tls_files):
    """The floor's Service, started as `serve` starts its own, answers over HTTPS without a patch where
    `serve` pins: else `python -m bench` would time the rules twice and call one of them the floor."""
    import ssl

    import aiohttp
    from bench.floor import FloorService
    from webhook.admission.service import Listen, Service
    from webhook.admission.tls import ReloadingTLS
    from webhook.process import listening

    store = SnapshotStore(nodes("node-a", "node-b") + rwx_disk("d0", "node-b"))
    client = ssl.create_default_context(cafile=str(tls_files["ca"]))
    answers = []
    for kind in (Service, FloorService):
        service = kind(store, Settings(), Listen(host="127.0.0.1", port=0, metrics_host="127.0.0.1", metrics_port=0,
                                                drain_delay=0), ReloadingTLS(tls_files["cert"], tls_files["key"]))
        await service.start()
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client)) as session:
                url = f"https://localhost:{listening.bound_port(service.runner)}/mutate"
                async with session.post(url, json=review(vm_pod("d0"))) as answer:
                    answers.append((await answer.json())["response"])
        finally:
            await service.stop()
    assert "patch" in answers[0]
    assert answers[1] == {"uid": "uid-1", "allowed": True}


def test_the_floor_is_no_option_of_serve():
    """The benchmark's floor is the benchmark's own server: `serve` has no switch that turns its rules off."""
    done = subprocess.run([sys.executable, "-m", "webhook", "serve", "--admission", "allow"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unrecognized arguments: --admission allow" in done.stderr


def test_a_tiny_drain_storm_reports_every_figure_and_decides_every_review():
    """`python -m bench.storm`: share-managers of a drained node re-created at once beside VM starts."""
    done = processes.run([sys.executable, "-m", "bench.storm", "--nodes", "12", "--vms", "60", "--share-managers", "3",
                           "--vm-starts", "3", "--rounds", "3", "--evicted-seconds", "1.5", "--json"], cwd=ROOT,
                         timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for name in ("quiet_vm", "control_vm", "control_share_manager", "storm_vm", "storm_share_manager"):
        figures = result[name]
        assert figures["undecided"] == 0, (name, figures)
        assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"], (name, figures)
    server = result["server"]  # serve's own figures, from its log: every storm's VM review is in it
    assert 0 < server["vm_p99_ms"] <= server["vm_max_ms"] < 5000, server  # within the reviews' 5 s timeout
    assert server["share_manager_p99_ms"] > 0 and server["loop_lag_max_ms"] >= 0, server
    assert server["burst_cpu_ms"] >= 0 and server["burst_core_share"] >= 0 and server["sender_cpu_ms"] > 0, server
    assert 20 < result["memory"]["rss_mib"] <= result["memory"]["peak_mib"], result["memory"]
    # Evicted before each storm, terminating 1.5 s: serve prepared their answers, and each was used.
    assert server["share_managers_prepared"] == 3, server
    targets = result["targets"]  # each met or not, none failed open
    assert len(targets) == 4 and targets["0 admissions failed open"], targets


def test_serves_share_of_its_core_is_its_cpu_until_the_last_answer_over_the_bursts_time():
    from bench.served import server_figures

    lines = [{"rule": "vm", "duration_ms": 1.0, "latency_ms": 90.0}, {"cpu_ms": 300.0},
             {"burst_cpu_ms": 120.0, "sender_cpu_ms": 250.0, "burst_ms": 400.0}]
    figures = server_figures(lines)
    assert figures["burst_cpu_ms"] == 120.0 and figures["burst_core_share"] == 0.3 and figures["cpu_ms"] == 300.0
    assert figures["sender_cpu_ms"] == 250.0
    assert server_figures(lines[:2])["burst_core_share"] != server_figures(lines[:2])["burst_core_share"]  # NaN: none


async def test_the_storms_sender_opens_a_connection_per_review_in_flight_and_keeps_the_idle_ones_it_may(tls_files):
    """As kube-apiserver: a burst of 5 opens 5 TLS connections; with 2 kept idle, the next burst
    opens 3 more; with none kept, 5 again. The server counts the connections it accepted."""
    import asyncio
    import ssl

    from aiohttp import web

    from bench.sender import Connections

    peers: set[tuple[str, int]] = set()

    async def answer(request: web.Request) -> web.Response:
        peers.add(request.transport.get_extra_info("peername"))
        await asyncio.sleep(0.05)  # every review of a burst in flight at once
        return web.json_response({"seen": len(await request.read())})

    app = web.Application()
    app.router.add_post("/mutate", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(tls_files["cert"], tls_files["key"])
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=served)
    await site.start()
    port = runner.addresses[0][1]
    try:
        for idle, opened in ((2, [5, 3, 3]), (0, [5, 5, 5])):
            connections = Connections(f"https://127.0.0.1:{port}", ssl.create_default_context(cafile=str(tls_files["ca"])),
                                      idle=idle)
            found = []
            for _ in range(3):
                before, accepted = connections.opened, len(peers)
                answers = await asyncio.gather(*(connections.post("/mutate?timeout=5s", b"{}") for _ in range(5)))
                assert answers == [b'{"seen": 2}'] * 5
                assert len(peers) - accepted == connections.opened - before  # as many as the server accepted
                found.append(connections.opened - before)
            await connections.close()
            assert found == opened, (idle, found)
    finally:
        await runner.cleanup()


def test_a_tiny_beside_run_reports_every_figure():
    """`python -m bench.beside`: a normal review beside a hostile one, on `serve` as deployed."""
    done = processes.run([sys.executable, "-m", "bench.beside", "--claims", "2000", "--rounds", "2", "--json"],
                         cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["claims"] == 2000 and result["rounds"] == 2
    for name in ("alone", "beside", "hostile"):
        assert 0 < result[name]["median_ms"] <= result[name]["max_ms"]


def test_a_tiny_drain_storm_beside_an_apiservers_load_stores_every_answered_pod():
    """`python -m bench.storm --apiserver-load`: each answered review's pod is stored in the emulator
    (serve's informers take it during the burst), and the storm is still decided."""
    done = processes.run([sys.executable, "-m", "bench.storm", "--nodes", "12", "--vms", "60", "--share-managers", "3",
                          "--vm-starts", "3", "--rounds", "2", "--apiserver-load", "0.5", "--json"], cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for name in ("quiet_vm", "control_vm", "control_share_manager", "storm_vm", "storm_share_manager"):
        assert result[name]["undecided"] == 0, (name, result[name])
    # 2 rounds of 3 quiet starts, 3 control share-managers and 3 starts, 3 share-managers and 3 starts.
    assert result["sender"]["pods_stored"] == 2 * (3 + 6 + 6), result["sender"]
    assert result["sender"]["apiserver_load"] == 0.5
    assert result["server"]["apiserver_cpu_ms"] > 0 and result["server_control"]["apiserver_cpu_ms"] > 0


def test_the_stored_pod_is_the_reviews_object_with_the_answers_patch_and_a_name_of_its_own():
    """What the apiserver stores for an answered review: its pod, mutated, named from generateName."""
    import base64

    from bench.apiserver_load import stored_pod

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "virt-launcher-vm-"}, "spec": {}}
    body = json.dumps({"request": {"namespace": "vms", "object": pod}}).encode()
    patch = [{"op": "add", "path": "/spec/nodeSelector", "value": {"kubernetes.io/hostname": "node-1"}}]
    answer = json.dumps({"response": {"allowed": True, "patch": base64.b64encode(json.dumps(patch).encode()).decode()}})
    stored = stored_pod(body, answer.encode(), "-000001")
    assert stored["metadata"] == {"generateName": "virt-launcher-vm-", "name": "virt-launcher-vm--000001",
                                  "namespace": "vms"}
    assert stored["spec"] == {"nodeSelector": {"kubernetes.io/hostname": "node-1"}}
    unpatched = stored_pod(body, json.dumps({"response": {"allowed": True}}).encode(), "-000002")
    assert unpatched["spec"] == {} and unpatched["metadata"]["name"] == "virt-launcher-vm--000002"


def test_the_apiservers_load_works_only_while_started():
    """`Busy`: its processes take CPU between `start` and `stop`, none while stopped."""
    import time

    from bench.apiserver_load import Busy
    from bench.served import cpu_seconds

    busy = Busy(0.5)
    try:
        (proc,) = busy.processes
        time.sleep(0.3)
        stopped = cpu_seconds(proc.pid)
        time.sleep(0.5)
        assert cpu_seconds(proc.pid) - stopped <= 0.02
        busy.start()
        time.sleep(1.0)
        busy.stop()
        assert 0.2 <= cpu_seconds(proc.pid) - stopped <= 0.8
    finally:
        busy.close()


@pytest.mark.parametrize("spec, node", [
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-7", "node-3"]}]}]}}}}, "node-7"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-2"]}]}]}}}}, "node-2"),
    ({"nodeSelector": {"kubernetes.io/hostname": "node-5"}}, "node-5"),
    ({}, None),
], ids=["among", "hostname-term", "node-selector", "no-pin"])
def test_a_stored_pod_is_bound_where_its_pin_says(spec, node):
    from bench.apiserver_load import bound_to

    assert bound_to({"spec": spec}) == node


@pytest.mark.parametrize("module", ["bench", "bench.storm", "bench.keeper", "bench.beside", "bench.bare", "bench.emulator",
                                    "bench.inprocess", "bench.kubevirt", "bench.load"])
def test_each_benchmarks_help_is_its_usage_not_a_traceback(module):
    """`--help` shows every flag's help, the targets in them included (a bare % in one ended argparse in a traceback)."""
    shown = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and shown.stdout.startswith("usage:") and not shown.stderr, shown.stderr[-300:]


def test_a_tiny_drain_of_aimed_evacuations_reports_its_cost_and_aims_them_all():
    out = subprocess.run([sys.executable, "-m", "bench.aimed", "--nodes", "20", "--vms", "60", "--drained", "6",
                          "--rounds", "2", "--json"], capture_output=True, text=True, check=True, timeout=120)
    figures = json.loads(out.stdout)
    assert figures["aimed"] == figures["evacuations"] == 6 and figures["first_burst_ms"] > 0 < figures["burst_ms"]
