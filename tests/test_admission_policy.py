"""The ValidatingAdmissionPolicy that holds the install's ServiceAccount to its own migrations,
its CEL evaluated against realistic AdmissionRequests: the keeper's own (built by the keeper's
own code), someone using the ServiceAccount's token for anything else, KubeVirt's drains, an
admin. Each case is decided by a clause of the policy, and stops being so when that clause is
dropped; every clause decides some case."""
import copy
import re

import pytest
from tests.support.admission_policy import (
    ADMIN,
    PASSED,
    UNTOUCHED,
    VIRT_CONTROLLER,
    admit,
    admitted,
    clauses,
    create_request,
    delete_request,
    guard_and_check,
    policy,
    refused,
    rule_of,
    service_account,
    service_account_user,
    without,
)
from tests.support.kube import load, node, vmi

from webhook.keeper.kubevirt_api import delete_options
from webhook.config import Settings
from webhook.kinds import MANAGED_BY_LABEL
from webhook.rules.keeping.migrations import MIGRATION_PRIORITY, migration_manifest
from webhook.rules.keeping.running import read_vmi

KEEPER = service_account_user()
# Another namespace's ServiceAccount of the same name: not the install's.
NAMESAKE = service_account("tenant-a", KEEPER["username"].rsplit(":", 1)[1], pod="builder-5d8f7-abcde")
REASON = "migrating from node-a to node-b: disks served from node-b, the VM runs on node-a; apart for 612s"


def keeper_body(priority=MIGRATION_PRIORITY):
    """The migration the keeper POSTs to move vm1 next to its storage on node-b (whose hostname
    label differs from its name)."""
    view = read_vmi(vmi("vm1", "node-a", "vm1-disk"), Settings())
    body = migration_manifest(view, node("node-b", **{"kubernetes.io/hostname": "kv-node-b"}), REASON, priority)
    assert body["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "kv-node-b"}
    return body


def ours_stored():
    """A migration of ours as KubeVirt 1.8 stored it (tests/fixtures/kubevirt-1.8/vmim.yaml)."""
    return copy.deepcopy(load("kubevirt-1.8/vmim.yaml"))


def evacuation_body(vmi_name="web-0", node_name="node-a"):
    """What virt-controller creates to drain a node (pkg/virt-controller/watch/drain/evacuation)."""
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"generateName": "kubevirt-evacuation-", "namespace": "vms",
                         "annotations": {"kubevirt.io/evacuationMigration": node_name}},
            "spec": {"vmiName": vmi_name, "priority": "system-critical"}}


def stored(body, phase="Running"):
    obj = admitted(body)
    obj["status"] = {"phase": phase}
    return obj


def virtctl_body(vmi_name="db-1"):
    """`virtctl migrate db-1`."""
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"generateName": "kubevirt-migrate-vm-", "namespace": "vms"}, "spec": {"vmiName": vmi_name}}


def with_label(obj, value):
    obj = copy.deepcopy(obj)
    labels = obj["metadata"].setdefault("labels", {})
    if value is None:
        labels.pop(MANAGED_BY_LABEL, None)
    else:
        labels[MANAGED_BY_LABEL] = value
    return obj


def with_selector(body, selector):
    body = copy.deepcopy(body)
    if selector is None:
        del body["spec"]["addedNodeSelector"]
    else:
        body["spec"]["addedNodeSelector"] = selector
    return body


def cancel(obj, user):
    """A DELETE of `obj` with the DeleteOptions the keeper sends (its uid as precondition)."""
    return delete_request(obj, user, delete_options(obj["metadata"]["uid"]))


# (id, request, outcome under the shipped policy, the clauses each of which decides it alone)
CASES = [
    # The keeper's own requests pass, the bodies built by its own code.
    ("keeper-creates", lambda: create_request(keeper_body(), KEEPER), PASSED, {"guard:delete-ours"}),
    ("keeper-creates-without-priority", lambda: create_request(keeper_body(None), KEEPER), PASSED,
     {"guard:delete-ours"}),
    ("keeper-dry-runs-its-create", lambda: create_request(keeper_body(), KEEPER, dry_run=True, field_validation="Strict"),
     PASSED, {"guard:delete-ours"}),
    ("keeper-cancels-its-own", lambda: cancel(ours_stored(), KEEPER), PASSED,
     {"guard:create-labelled", "guard:create-targeted"}),
    # Its token used for anything else: refused, by the rule the message names.
    ("sa-creates-unlabelled", lambda: create_request(with_label(keeper_body(), None), KEEPER),
     refused("create-labelled"), {"rule:create-labelled"}),
    ("sa-creates-labelled-by-another-tool", lambda: create_request(with_label(keeper_body(), "Helm"), KEEPER),
     refused("create-labelled"), {"rule:create-labelled"}),
    ("sa-creates-untargeted", lambda: create_request(with_selector(keeper_body(), None), KEEPER),
     refused("create-targeted"), {"rule:create-targeted"}),
    ("sa-creates-to-any-linux-node",
     lambda: create_request(with_selector(keeper_body(), {"kubernetes.io/os": "linux"}), KEEPER),
     refused("create-targeted"), {"rule:create-targeted"}),
    ("sa-creates-to-an-empty-hostname",
     lambda: create_request(with_selector(keeper_body(), {"kubernetes.io/hostname": ""}), KEEPER),
     refused("create-targeted"), {"rule:create-targeted"}),
    ("sa-creates-what-virtctl-would", lambda: create_request(virtctl_body(), KEEPER),
     refused("create-labelled", "create-targeted"), set()),
    ("sa-cancels-a-drains-evacuation", lambda: cancel(stored(evacuation_body()), KEEPER),
     refused("delete-ours"), {"rule:delete-ours"}),
    ("sa-cancels-a-users-migration", lambda: cancel(stored(virtctl_body()), KEEPER),
     refused("delete-ours"), {"rule:delete-ours"}),
    ("sa-cancels-another-tools-migration", lambda: cancel(with_label(stored(virtctl_body()), "Helm"), KEEPER),
     refused("delete-ours"), {"rule:delete-ours"}),
    ("sa-cancels-ours-after-an-admin-unlabelled-it", lambda: cancel(with_label(ours_stored(), None), KEEPER),
     refused("delete-ours"), {"rule:delete-ours"}),
    # Everyone else is untouched, whatever they create or delete.
    ("kubevirt-drains-a-node", lambda: create_request(evacuation_body(), VIRT_CONTROLLER), UNTOUCHED,
     {"match:kubevirt-colocate-service-account"}),
    ("kubevirt-deletes-a-finished-evacuation",
     lambda: delete_request(stored(evacuation_body(), "Succeeded"), VIRT_CONTROLLER), UNTOUCHED,
     {"match:kubevirt-colocate-service-account"}),
    ("admin-runs-virtctl-migrate", lambda: create_request(virtctl_body(), ADMIN), UNTOUCHED,
     {"match:kubevirt-colocate-service-account"}),
    ("admin-cancels-an-evacuation", lambda: delete_request(stored(evacuation_body()), ADMIN), UNTOUCHED,
     {"match:kubevirt-colocate-service-account"}),
    ("admin-cancels-ours", lambda: delete_request(ours_stored(), ADMIN), UNTOUCHED, set()),
    ("a-namesake-service-account-elsewhere", lambda: create_request(virtctl_body(), NAMESAKE), UNTOUCHED,
     {"match:kubevirt-colocate-service-account"}),
]
IDS = [case[0] for case in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_policy_decides_each_request(case):
    _, request, expected, _ = case
    outcome = admit(policy(), request())
    assert (outcome.applies, outcome.allowed, outcome.rules) == (expected.applies, expected.allowed, expected.rules)


@pytest.mark.parametrize("case", [c for c in CASES if c[3]], ids=[c[0] for c in CASES if c[3]])
def test_each_case_turns_when_its_clause_is_dropped(case):
    """Dropping the clause that decides a case changes its outcome, in the way that clause is for:
    a rule that refused lets it pass, a guard that spared it refuses it, the ServiceAccount
    condition that left it alone holds it to the rules."""
    _, request, _, deciding = case
    made = request()
    for clause in sorted(deciding):
        outcome = admit(without(policy(), clause), made)
        if clause.startswith("rule:"):
            assert outcome == PASSED, clause
        else:  # a guard or the matchCondition
            assert outcome.applies and not outcome.allowed, clause


def test_every_clause_of_the_policy_decides_a_case():
    deciding = set().union(*(case[3] for case in CASES))
    assert deciding == set(clauses(policy()))
    assert len(deciding) == 7  # one matchCondition; three rules, each with its operation guard


def test_the_keepers_requests_pass_in_every_namespace_and_to_every_node():
    """The keeper's migration of a VM anywhere, and its cancel: nothing but its own label and
    node decide."""
    for namespace, name, target in [("default", "vm1", "node-b"), ("team-a", "db.primary", "worker-17")]:
        view = read_vmi(vmi(name, "node-a", f"{name}-disk", namespace=namespace), Settings())
        body = migration_manifest(view, node(target), REASON, MIGRATION_PRIORITY)
        request = create_request(body, KEEPER)
        assert admit(policy(), request) == PASSED
        assert admit(policy(), cancel(request["object"], KEEPER)) == PASSED


def test_only_the_install_service_account_on_migrations_is_looked_at():
    vap = policy()
    rules = vap["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": ["kubevirt.io"], "apiVersions": ["*"], "operations": ["CREATE", "DELETE"],
                      "resources": ["virtualmachineinstancemigrations"], "scope": "Namespaced"}]
    [condition] = vap["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{KEEPER['username']}'"
    # Our ServiceAccount on another resource, or updating a migration (RBAC grants neither): not looked at.
    request = create_request(with_label(keeper_body(), None), KEEPER)
    assert admit(vap, {**request, "operation": "UPDATE", "oldObject": request["object"]}) == UNTOUCHED
    vmi_request = {**request, "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachineinstances"}}
    assert admit(vap, vmi_request) == UNTOUCHED


def test_the_policy_refuses_when_in_doubt_and_names_its_rules():
    vap = policy()
    assert vap["spec"]["failurePolicy"] == "Fail"
    for validation in vap["spec"]["validations"]:
        message = validation["message"]
        assert "\n" not in message and message.startswith(f"kubevirt-colocate rule {rule_of(validation)}: ")
        assert validation["reason"] == "Forbidden"
        # The keeper's dry run tells "refused for spec.priority" by that word: no rule may say it.
        assert "priority" not in message
    assert [rule_of(v) for v in vap["spec"]["validations"]] == ["create-labelled", "create-targeted", "delete-ours"]


def test_the_expressions_keep_to_what_kubernetes_offers_a_validating_admission_policy():
    """Variables request, object and oldObject; has(), `in`, comparisons, && and ||: what
    Kubernetes' cel-go and cel-python evaluate alike. Each rule reads `object` or `oldObject`
    only behind the guard that says it is not null."""
    vap = policy()
    expressions = [c["expression"] for c in vap["spec"]["matchConditions"]] + [
        v["expression"] for v in vap["spec"]["validations"]]
    for expression in expressions:
        bare = re.sub(r"'[^']*'", "''", expression)
        roots = set(re.findall(r"(?<![.\w])([A-Za-z_]\w*)", bare))
        assert roots <= {"request", "object", "oldObject", "has", "in"}, expression
        assert not re.search(r"[?\[]\s*\?|\.\?", bare), expression  # no optional syntax
    for validation in vap["spec"]["validations"]:
        guard, check = guard_and_check(validation["expression"])
        operation = re.fullmatch(r"request\.operation != '(CREATE|DELETE)'", guard).group(1)
        variable = {"CREATE": "object", "DELETE": "oldObject"}[operation]
        assert re.findall(r"\b(object|oldObject)\.", check) and set(re.findall(r"\b(object|oldObject)\.", check)) == {variable}
