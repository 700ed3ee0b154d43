"""A cluster of a size (`--size NODES,VMS`) for `python -m bench` and `python -m bench.keeper`: the
objects of VMS VMs with one RWX disk each (VMS PVCs, PVs, ShareManagers, share-manager pods and VMIs,
VMS virt-launcher pods: 2 × VMS pods) on NODES nodes; what the chart lets each process hold; and the
slowest answer of each probe, asked from a thread of its own as the kubelet asks, while a process syncs
its caches and works."""
from __future__ import annotations

import dataclasses
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

VALUES = Path(__file__).resolve().parent.parent / "charts" / "kubevirt-colocate" / "values.yaml"
PROBES = ("/healthz", "/readyz")
PROBE_PERIOD = 0.2  # seconds between two rounds of asking
PROBE_TIMEOUT = 30.0  # as long as an answer may take: the figure is how long it took
SHARE_OF_LIMIT = 0.7  # what either process may hold of its memory limit (the headroom for what comes)
KUBERNETES_LIMIT = "5000,75000"  # 5,000 nodes, 150,000 pods: half of them VMs' launchers


@dataclasses.dataclass(frozen=True)
class Size:
    nodes: int
    vms: int

    @classmethod
    def parse(cls, text: str) -> Size:
        nodes, vms = (int(n) for n in text.split(","))
        return cls(nodes, vms)

    @property
    def pods(self) -> int:
        return 2 * self.vms  # a launcher and a share-manager pod per VM

    def __str__(self) -> str:
        return f"{self.nodes} nodes, {self.vms} VMs ({self.vms} PVCs, PVs and ShareManagers, {self.pods} pods)"


def mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for unit, factor in units.items():
        if quantity.endswith(unit):
            return float(quantity[:-2]) * factor
    return float(quantity) / 2**20


def memory_limit_mib(role: str) -> float:
    """The chart's memory limit of `role` (serve or keeper), in MiB."""
    values = yaml.safe_load(VALUES.read_text())
    resources = values["resources"] if role == "serve" else values["keeper"]["resources"]
    return mebibytes(str(resources["limits"]["memory"]))


class Sampling:
    """`step()` every `period` seconds from a thread of its own while the block runs."""

    period = PROBE_PERIOD

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Any:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            self.step()

    def step(self) -> None:
        raise NotImplementedError


class SlowestProbes(Sampling):
    """Asks each probe of `ops` every PROBE_PERIOD from a thread while the block runs; `slowest`: the
    longest answer of each (seconds) and when it came (seconds after the start)."""

    def __init__(self, ops: str) -> None:
        super().__init__()
        self.ops, self.began = ops, time.monotonic()
        self.slowest: dict[str, tuple[float, float]] = {path: (0.0, 0.0) for path in PROBES}
        self.asked = 0

    def step(self) -> None:
        for path in PROBES:
            started = time.monotonic()
            try:
                with urllib.request.urlopen(f"{self.ops}{path}", timeout=PROBE_TIMEOUT) as answer:
                    answer.read()
            except urllib.error.HTTPError:  # 503 while syncing: an answer all the same
                pass
            except OSError:  # not listening yet
                continue
            took = time.monotonic() - started
            self.asked += 1
            if took > self.slowest[path][0]:
                self.slowest[path] = (took, started - self.began)

    def worst(self) -> float:
        return max(took for took, _ in self.slowest.values())

    def said(self) -> str:
        return ", ".join(f"{path} {took * 1000:.0f} ms (at {at:.0f} s)" for path, (took, at) in self.slowest.items()) \
            + f"; {self.asked} answers"
