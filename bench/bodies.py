"""AdmissionReviews of a pod create as kube-apiserver sends them to a mutating webhook, at their size.

Before the webhooks, the apiserver has decoded the pod with its defaults applied (the pod's, each
container's and probe's, each volume's), its admission plugins have mutated it (ServiceAccount: the
projected token volume and its mount in every container; DefaultTolerationSeconds: the not-ready
and unreachable tolerations; Priority: the priority of its class), and its field manager has
recorded `managedFields` for the creating client (FieldsV1: every field it set, lists of named
items keyed by name). The review carries the creating user (a ServiceAccount, with its bound
token's extra) and the create's options. No `uid`, `creationTimestamp` or `status` yet: those are
set after admission. A share-manager pod's review comes to about 5 KiB, a VM's (bench's) to about 6 KiB;
`pad_kib` makes one larger still (an annotation of padding), as a pod with many volumes, env or
annotations would be.
"""
from __future__ import annotations

import copy
import json
from typing import Any

CONTAINER_DEFAULTS = {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                      "imagePullPolicy": "IfNotPresent"}
POD_DEFAULTS = {"restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                "securityContext": {}, "schedulerName": "default-scheduler", "enableServiceLinks": True,
                "preemptionPolicy": "PreemptLowerPriority"}
PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
TOLERATIONS = [{"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 300} for taint in ("not-ready", "unreachable")]
PRIORITIES = {"longhorn-critical": 1000000000, "": 0}
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


def token_volume(name: str) -> dict[str, Any]:
    """The ServiceAccount admission plugin's projected volume: the bound token, the CA, the namespace."""
    return {"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                      "fieldPath": "metadata.namespace"}}]}}]}}


def defaulted(pod: dict[str, Any], suffix: str) -> dict[str, Any]:
    """The pod as the webhook receives it: defaults and the built-in admission plugins' additions."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    for key, value in POD_DEFAULTS.items():
        spec.setdefault(key, copy.deepcopy(value))
    spec.setdefault("serviceAccountName", "default")
    spec["serviceAccount"] = spec["serviceAccountName"]
    spec["priority"] = PRIORITIES.get(spec.get("priorityClassName", ""), 0)
    spec["tolerations"] = [*(spec.get("tolerations") or []), *TOLERATIONS]
    mount_token = spec.get("automountServiceAccountToken", True)
    token = f"kube-api-access-{suffix}"
    if mount_token:
        spec.setdefault("volumes", []).append(token_volume(token))
    for volume in spec.get("volumes", []):
        if "hostPath" in volume:
            volume["hostPath"].setdefault("type", "")
        if "emptyDir" in volume:
            volume["emptyDir"] = volume["emptyDir"] or {}
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        for key, value in CONTAINER_DEFAULTS.items():
            container.setdefault(key, value)
        container.setdefault("resources", {})
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if probe in container:
                container[probe] = {**PROBE_DEFAULTS, **container[probe]}
        if mount_token:
            container.setdefault("volumeMounts", []).append({"name": token, "readOnly": True, "mountPath": TOKEN_PATH})
    return pod


def fields_v1(value: Any) -> Any:
    """The FieldsV1 of what a client set: `f:<field>` for each field, `k:{...}` for each item of a
    list of named items (by name), `.` for a list item itself; {} for a leaf."""
    if isinstance(value, dict):
        return {f"f:{key}": fields_v1(item) for key, item in value.items()}
    if isinstance(value, list) and value and all(isinstance(item, dict) and "name" in item for item in value):
        return {f'k:{{"name":"{item["name"]}"}}': {".": {}, **fields_v1(item)} for item in value}
    return {}


def managed(pod: dict[str, Any], manager: str) -> list[dict[str, Any]]:
    """`metadata.managedFields` after the create: the creating manager owns what it sent."""
    sent = {key: value for key, value in pod.items() if key in ("metadata", "spec")}
    sent["metadata"] = {k: v for k, v in sent["metadata"].items() if k not in ("name", "namespace", "generateName")}
    return [{"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-11-26T09:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": fields_v1(sent)}]


def user(namespace: str, account: str, node: str) -> dict[str, Any]:
    """The creating client's userInfo: a ServiceAccount in a pod, with its bound token's extra."""
    return {"username": f"system:serviceaccount:{namespace}:{account}", "uid": "6f1c9e0a-3c1b-4d55-9a4e-0c5f1b2e7d11",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/credential-id": ["JTI=2c9f0d7e-41a4-4c6e-8e0b-5d1f3a9b7c21"],
                      "authentication.kubernetes.io/node-name": [node],
                      "authentication.kubernetes.io/node-uid": ["b8e1f2a4-5c6d-4e7f-8a9b-0c1d2e3f4a5b"],
                      "authentication.kubernetes.io/pod-name": [f"{account}-7d9c5b8f6-x2k4q"],
                      "authentication.kubernetes.io/pod-uid": ["0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"]}}


def review(pod: dict[str, Any], namespace: str, uid: str, *, manager: str, account: str,
           pad_kib: int = 0) -> bytes:
    """The AdmissionReview's bytes for the create of `pod` in `namespace` by `manager` (running as
    ServiceAccount `account` of that namespace), padded to at least `pad_kib` KiB."""
    pod = defaulted(pod, uid[-5:].rjust(5, "x"))
    pod["metadata"]["namespace"] = namespace
    pod["metadata"]["managedFields"] = managed(pod, manager)
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": pod["metadata"].get("name", ""), "namespace": namespace, "operation": "CREATE",
        "userInfo": user(namespace, account, "node-001"), "object": pod, "oldObject": None, "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": manager}}}
    raw = json.dumps(body, separators=(",", ":")).encode()
    short = pad_kib * 1024 - len(raw)
    if short > 0:
        pod["metadata"].setdefault("annotations", {})["bench.colocate/padding"] = "x" * short
        raw = json.dumps(body, separators=(",", ":")).encode()
    return raw
