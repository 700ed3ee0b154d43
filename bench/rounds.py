"""What both drain storms share (`storm`, through the emulator; `realstorm`, through a real
kube-apiserver): the control's volumes, the decision each kind of review wants, a round's batches
and its figures."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import yaml

CONFIGURATION = Path(__file__).resolve().parent.parent / "manifests" / "base" / "mutatingwebhookconfiguration.yaml"
SERVICE = CONFIGURATION.parent / "service.yaml"
# The install's webhooks, by the kind of review each sends (the control's share-managers go where a drain's do).
HOOKS = {"vm": "vm.colocate.kubevirt-scheduler.io", "share-manager": "share-manager.colocate.kubevirt-scheduler.io",
         "control": "share-manager.colocate.kubevirt-scheduler.io"}


def calls(configuration: Path = CONFIGURATION, service: Path = SERVICE) -> dict[str, tuple[str, str]]:
    """Where the apiserver calls for each kind of review with the install's MutatingWebhookConfiguration:
    the port of serve its webhook's Service port leads to (the Service's `targetPort`: "webhook",
    serve's --port), and its `clientConfig.service.path`
    with `?timeout=` its `timeoutSeconds` (10 s, the apiserver's default, without one)."""
    hooks = {hook["name"]: hook for hook in yaml.safe_load(configuration.read_text())["webhooks"]}
    targets = {port["port"]: port["targetPort"] for port in yaml.safe_load(service.read_text())["spec"]["ports"]}
    found = {}
    for kind, name in HOOKS.items():
        hook, called = hooks[name], hooks[name]["clientConfig"]["service"]
        found[kind] = (targets[called.get("port", 443)],
                       f"{called.get('path') or '/'}?timeout={hook.get('timeoutSeconds', 10)}s")
    return found


def serve_urls(url: str) -> dict[str, str]:
    """serve's ports by the Service's target port each webhook leads to (`calls`): its --port."""
    return {"webhook": url}


def unused(i: int) -> str:
    """The volume of the control's i-th share-manager: no VM uses it, so the rule answers at once."""
    return f"pvc-unused-{i:03d}"


# The decision each kind's answer records: the control's share-managers none (no VM uses their volume).
WANTED = {"vm": "pinned", "share-manager": "pinned-among", "control": None}


def round_figures(quiet: list[tuple[str, float, bool]], control: list[tuple[str, float, bool]],
                  storm: list[tuple[str, float, bool]]) -> dict[str, Any]:
    """One round: the VM starts alone; beside the control's share-managers; in the storm, with its share-managers."""
    return {"quiet_vm": figures(quiet, "vm"), "control_vm": figures(control, "vm"),
            "control_share_manager": figures(control, "control"), "storm_vm": figures(storm, "vm"),
            "storm_share_manager": figures(storm, "share-manager")}


def batches(found: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]], list[tuple[str, Any]]]:
    """A round's three batches, in the order sent: the VM starts alone (a quiet cluster); the
    control, the same starts beside as many share-managers that the rule answers at once (what
    the storm's creates cost without the rule's work); the storm."""
    vms = [item for item in found if item[0] == "vm"]
    return (vms, [item for item in found if item[0] == "control"] + vms,
            [item for item in found if item[0] == "share-manager"] + vms)


def figures(results: list[tuple[str, float, bool]], kind: str) -> dict[str, float]:
    times = sorted(seconds * 1000 for k, seconds, _ in results if k == kind)
    if not times:
        return {}
    p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
    return {"p50_ms": statistics.median(times), "p99_ms": p99, "max_ms": times[-1],
            "undecided": sum(1 for k, _, decided in results if k == kind and not decided)}
