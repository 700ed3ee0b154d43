"""The install's ValidatingAdmissionPolicy (manifests/base/validatingadmissionpolicy.yaml), applied
to AdmissionRequests as the apiserver applies it, its CEL evaluated by cel-python.

What the apiserver does (k8s.io/apiserver `pkg/admission/plugin/policy/validating`): a request
outside `matchConstraints` is not looked at; then every `matchConditions` expression must be true
(one false: the policy does not apply; an error: `failurePolicy`); then every validation must be
true, each one false refusing the request with its message, each error refusing it too under
`failurePolicy: Fail`. `object` is null on DELETE and `oldObject` on CREATE.

The expressions keep to what both CEL implementations evaluate alike: `has()`, `in` on maps,
comparisons, `&&` and `||`. One difference is known and kept out of the policy's way: cel-python
answers `has()` of a field of null with false where Kubernetes' cel-go raises an error; each rule
looks at `object` (or `oldObject`) only once its operation guard made sure it is there.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import re
import secrets
import uuid
from pathlib import Path
from typing import Any

import celpy
import yaml

ROOT = Path(__file__).resolve().parents[2]
POLICY_FILE = ROOT / "manifests" / "base" / "validatingadmissionpolicy.yaml"
VMIM_GROUP, VMIM_VERSION, VMIM_KIND, VMIM_PLURAL = "kubevirt.io", "v1", "VirtualMachineInstanceMigration", \
    "virtualmachineinstancemigrations"
# What virt-api's mutating webhook adds to every migration created (kubevirt/kubevirt
# `pkg/virt-api/webhooks/mutating-webhook/mutators/migration-create-mutator.go`): validating
# admission, this policy included, sees the migration after it.
VMI_NAME_LABEL = "kubevirt.io/vmi-name"
MIGRATION_FINALIZER = "kubevirt.io/migrationJobFinalize"
RULE = re.compile(r"\brule ([a-z-]+):")


def install_objects(name: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all((ROOT / "manifests" / "base" / name).read_text()) if o]


def policy() -> dict[str, Any]:
    """The ValidatingAdmissionPolicy as shipped (a fresh copy)."""
    [found] = [o for o in install_objects(POLICY_FILE.name) if o["kind"] == "ValidatingAdmissionPolicy"]
    return found


def service_account_user() -> dict[str, Any]:
    """The userInfo of the keeper's requests: its Deployment's ServiceAccount in the namespace
    base/ installs into, as the apiserver authenticates its pod's bound token."""
    namespace = yaml.safe_load((ROOT / "manifests" / "base" / "kustomization.yaml").read_text())["namespace"]
    [deployment] = [o for o in install_objects("keeper.yaml") if o["kind"] == "Deployment"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    return service_account(namespace, account, pod=f"{deployment['metadata']['name']}-7d9c6b5f4-x2x9q")


def service_account(namespace: str, name: str, *, pod: str) -> dict[str, Any]:
    return {"username": f"system:serviceaccount:{namespace}:{name}", "uid": str(uuid.uuid4()),
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            "extra": {"authentication.kubernetes.io/pod-name": [pod],
                      "authentication.kubernetes.io/pod-uid": [str(uuid.uuid4())],
                      "authentication.kubernetes.io/node-name": ["node-c"],
                      "authentication.kubernetes.io/credential-id": [f"JTI={uuid.uuid4()}"]}}


# virt-controller, which creates a drain's migrations and deletes finished ones.
VIRT_CONTROLLER = service_account("kubevirt", "kubevirt-controller", pod="virt-controller-6b8f9c7d5-kq2zr")
# A cluster admin with kubeadm's credentials (kubectl, virtctl).
ADMIN = {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]}


# --------------------------------------------------------------------------- requests


def admitted(body: dict[str, Any]) -> dict[str, Any]:
    """A migration as validating admission sees it after the apiserver and virt-api's mutating
    webhook had it: a name from generateName, uid, creationTimestamp, KubeVirt's label and finalizer."""
    obj = copy.deepcopy(body)
    meta = obj.setdefault("metadata", {})
    if not meta.get("name"):
        meta["name"] = meta.get("generateName", "") + secrets.token_hex(3)[:5]
    meta.setdefault("uid", str(uuid.uuid4()))
    meta.setdefault("creationTimestamp", "2026-11-23T00:50:02Z")
    meta.setdefault("labels", {})[VMI_NAME_LABEL] = obj["spec"]["vmiName"]
    meta["finalizers"] = [*meta.get("finalizers", []), MIGRATION_FINALIZER]
    return obj


def gvk() -> dict[str, str]:
    return {"group": VMIM_GROUP, "version": VMIM_VERSION, "kind": VMIM_KIND}


def gvr() -> dict[str, str]:
    return {"group": VMIM_GROUP, "version": VMIM_VERSION, "resource": VMIM_PLURAL}


def create_request(body: dict[str, Any], user: dict[str, Any], *, dry_run: bool = False,
                   field_validation: str | None = None) -> dict[str, Any]:
    """The AdmissionRequest of a POST of `body` (admission.k8s.io/v1)."""
    obj = admitted(body)
    options = {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"} | (
        {"dryRun": ["All"]} if dry_run else {}) | ({"fieldValidation": field_validation} if field_validation else {})
    return _request("CREATE", obj, None, user, options, dry_run)


def delete_request(stored: dict[str, Any], user: dict[str, Any], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The AdmissionRequest of a DELETE of the stored migration, sent with `options` (DeleteOptions)."""
    sent = {"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"} | {
        k: v for k, v in (options or {}).items() if k not in ("apiVersion", "kind")}
    return _request("DELETE", None, copy.deepcopy(stored), user, sent, False)


def _request(operation: str, obj: Any, old: Any, user: dict[str, Any], options: dict[str, Any],
             dry_run: bool) -> dict[str, Any]:
    meta = (obj or old)["metadata"]
    return {"uid": str(uuid.uuid4()), "kind": gvk(), "resource": gvr(), "requestKind": gvk(), "requestResource": gvr(),
            "name": meta["name"], "namespace": meta["namespace"], "operation": operation, "userInfo": user,
            "object": obj, "oldObject": old, "dryRun": dry_run, "options": options}


# --------------------------------------------------------------------------- the policy applied


@dataclasses.dataclass(frozen=True)
class Outcome:
    applies: bool  # within matchConstraints and every matchCondition true (or in error)
    allowed: bool
    refused_by: tuple[str, ...] = ()  # the rules (from their messages) or errors that refuse it

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(m.group(1) if (m := RULE.search(why)) else why for why in self.refused_by)


UNTOUCHED = Outcome(applies=False, allowed=True)
PASSED = Outcome(applies=True, allowed=True)


def refused(*rules: str) -> Outcome:
    return Outcome(applies=True, allowed=False, refused_by=rules)


class EvalError(Exception):
    pass


@functools.cache
def _program(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression))


def evaluate(expression: str, request: dict[str, Any]) -> bool:
    """The expression's value for `request` (bool); EvalError when it has none or is not a bool."""
    activation = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(request.get("object")),
                  "oldObject": celpy.json_to_cel(request.get("oldObject"))}
    try:
        value = _program(expression).evaluate(activation)
    except celpy.CELEvalError as exc:
        raise EvalError(str(exc.args[0] if exc.args else exc)) from None
    if not isinstance(value, celpy.celtypes.BoolType):
        raise EvalError(f"expression returned {type(value).__name__}, not bool")
    return bool(value)


def within_constraints(vap: dict[str, Any], request: dict[str, Any]) -> bool:
    """matchConstraints.resourceRules (no selectors in this policy): group, version, resource,
    operation and scope of the request."""
    constraints = vap["spec"]["matchConstraints"]
    assert set(constraints) == {"resourceRules"}, "selectors are not modelled here"
    resource = request["resource"]
    for rule in constraints["resourceRules"]:
        if (resource["group"] in rule["apiGroups"] or "*" in rule["apiGroups"]) \
                and (resource["version"] in rule["apiVersions"] or "*" in rule["apiVersions"]) \
                and (resource["resource"] in rule["resources"] or "*" in rule["resources"]) \
                and (request["operation"] in rule["operations"] or "*" in rule["operations"]) \
                and rule.get("scope", "*") in ("*", "Namespaced" if request.get("namespace") else "Cluster"):
            return True
    return False


def admit(vap: dict[str, Any], request: dict[str, Any]) -> Outcome:
    spec = vap["spec"]
    fail = spec.get("failurePolicy", "Fail") == "Fail"
    if not within_constraints(vap, request):
        return UNTOUCHED
    errors = []
    for condition in spec.get("matchConditions") or []:
        try:
            if not evaluate(condition["expression"], request):
                return UNTOUCHED
        except EvalError as exc:
            errors.append(f"matchCondition {condition['name']}: {exc}")
    if errors:
        return refused(*errors) if fail else UNTOUCHED
    why = []
    for validation in spec["validations"]:
        try:
            if not evaluate(validation["expression"], request):
                why.append(validation["message"])
        except EvalError as exc:
            if fail:
                why.append(f"expression {validation['expression']!r}: {exc}")
    return refused(*why) if why else PASSED


# --------------------------------------------------------------------------- clauses, dropped one at a time


def rule_of(validation: dict[str, Any]) -> str:
    found = RULE.search(validation["message"])
    assert found, f"the message names no rule: {validation['message']!r}"
    return found.group(1)


def clauses(vap: dict[str, Any]) -> list[str]:
    """Every clause of the policy, by name: `match:<matchCondition>`, `rule:<rule>` (a validation)
    and `guard:<rule>` (the operation a validation is for)."""
    spec = vap["spec"]
    return ([f"match:{c['name']}" for c in spec.get("matchConditions") or []]
            + [f"{kind}:{rule_of(v)}" for v in spec["validations"] for kind in ("rule", "guard")])


def guard_and_check(expression: str) -> tuple[str, str]:
    """`request.operation != 'X' || (check)` split into its two halves."""
    guard, _, check = expression.partition("||")
    assert guard.strip().startswith("request.operation != "), expression
    return guard.strip(), check.strip()


def without(vap: dict[str, Any], clause: str) -> dict[str, Any]:
    """The policy with one clause dropped: a matchCondition or a validation removed, or a
    validation's operation guard removed (the check then applies to every operation)."""
    assert clause in clauses(vap), clause
    dropped = copy.deepcopy(vap)
    spec = dropped["spec"]
    kind, _, name = clause.partition(":")
    if kind == "match":
        spec["matchConditions"] = [c for c in spec["matchConditions"] if c["name"] != name]
    elif kind == "rule":
        spec["validations"] = [v for v in spec["validations"] if rule_of(v) != name]
    else:
        [validation] = [v for v in spec["validations"] if rule_of(v) == name]
        validation["expression"] = guard_and_check(validation["expression"])[1]
    return dropped
