"""What every check shares: its answer passed on, and "cannot tell" (which counts as not fitting)
in place of an exception, saying which node, for whom and why."""
import pytest
from tests.support.fitting import NS, sized, view_of, vm

from webhook.rules.fit import checks
from webhook.rules.fit.demand import Demand
from webhook.rules.fit.framework import CannotTell
from webhook.rules.fit.resources import node_resources_fit
from webhook.rules.fit.volumes import volumes


def judged(check, pod, subject="the VM"):
    """`check` alone, as `why_not_fit` runs every check."""
    view = view_of(nodes=[sized("node-b", cpu="2")])
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(checks, "CHECKS", (check,))
        return checks.why_not_fit(pod, NS, view.node("node-b"), view, subject, demand=Demand.of(pod, NS, view.memo))


def test_a_checks_answer_is_passed_on():
    assert judged(node_resources_fit, vm()) is None
    assert judged(node_resources_fit, vm(requests={"cpu": "3"})) == \
        "node node-b is too small: the VM asks cpu 3, the node has 2 in all"


def test_a_check_the_objects_do_not_let_decide_cannot_tell():
    """The VM's disk is a claim the view does not hold."""
    assert judged(volumes, vm(claims=("vm1-rootdisk", "missing")), "the share-manager") == \
        "cannot tell whether node node-b fits the share-manager: claim missing is not known"


def raising(error):
    def node_ports(demand, node, view, subject):
        raise error
    return node_ports


@pytest.mark.parametrize("error, detail", [
    (CannotTell("a namespaceSelector needs the Namespace objects"), "a namespaceSelector needs the Namespace objects"),
    (KeyError("hostPort"), "the node ports check could not read the objects (KeyError)"),
    (TypeError("'int' object is not iterable"), "the node ports check could not read the objects (TypeError)"),
], ids=["cannot-tell", "unforeseen-key", "unforeseen-type"])
def test_a_check_that_raises_still_answers_cannot_tell(error, detail):
    assert judged(raising(error), vm()) == f"cannot tell whether node node-b fits the VM: {detail}"
