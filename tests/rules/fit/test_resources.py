"""NodeResourcesFit: a pod slot and every request against what the node has left."""
from tests.support.fitting import NS, row_tests, sized, vm

from webhook.rules.fit.checks import why_not_fit
from webhook.rules.fit.view import StaticView
from webhook.rules.fit.memo import Memo

test_why_not_fit, test_only_the_named_check_fails, test_one_demand_for_every_node = row_tests("node_resources_fit")


def test_a_node_read_afresh_is_judged_as_it_is_now_and_not_piled_up():
    """Before the caches sync, every admission reads nodes afresh (new objects, no resourceVersion
    in a trimmed copy): each is judged as it is now, and the store's memo keeps one answer for it."""
    memo = Memo()
    pod = vm(requests={"cpu": "6"}, volumes=[])

    def judged_on(cpu):
        the_node = sized("node-fresh", cpu=cpu)
        return why_not_fit(pod, NS, the_node, StaticView([the_node], memo=memo))

    assert "is too small: the VM asks cpu 6" in judged_on("4")
    held = len(memo)
    assert judged_on("8") is None  # the same node, grown: read again
    for _ in range(50):
        assert judged_on("8") is None
    assert len(memo) == held
