"""What the keeper keeps of a pod to place: every row of the checks' table is judged the same."""
from __future__ import annotations

import pytest
from fitting import CASES, NS, on, view_of

from webhook.cluster.kept import pod_to_place
from webhook.rules.fit.checks import why_not_fit


@pytest.mark.parametrize("pod, node_name, objects, nodes, check, fragment", CASES)
def test_a_pod_to_place_gets_the_same_answer(pod, node_name, objects, nodes, check, fragment):
    view = view_of(*objects, nodes=nodes)
    node = on(view, node_name)
    assert why_not_fit(pod_to_place(pod), NS, node, view) == why_not_fit(pod, NS, node, view)


def test_a_pod_to_place_drops_what_no_check_reads():
    pod = {"metadata": {"name": "p", "namespace": NS, "labels": {"a": "b"}, "annotations": {"big": "x" * 1000}},
           "spec": {"nodeSelector": {"n": "1"}, "containers": [{"name": "c", "env": [{"name": "E", "value": "v"}],
                                                               "resources": {"requests": {"cpu": "1"}}}],
                    "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}, "other": 1}]}}
    assert pod_to_place(pod) == {
        "metadata": {"name": "p", "namespace": NS, "labels": {"a": "b"}},
        "spec": {"nodeSelector": {"n": "1"}, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}}
