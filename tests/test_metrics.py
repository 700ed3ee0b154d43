"""Each admission is timed by rule and counted by rule, outcome and reason, under the names, labels
and buckets the alerts and the dashboard read (tests/test_monitoring.py checks they are exported)."""
import re

from prometheus_client import generate_latest

from tests.support.kube import metric_sample

from webhook import metrics
from webhook.admission import server
from webhook.admission.outcome import Outcome, Rule, skip
from webhook.rules.shared.alone import Alone
from webhook.rules.placement.decide import PINNED, Decision

BUCKETS = ["0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0",
           "10.0", "+Inf"]
PINNED_VM = Outcome(Rule.VM, decision=Decision(PINNED, node="node-a", preferences=(("node-a", 100),), reason="r"))


def sample(text, name, **labels):
    return metric_sample(text, name, 0.0, **labels)


def test_an_admission_is_timed_and_counted_with_its_outcome():
    before = generate_latest(metrics.REGISTRY).decode()
    server.count_admission(PINNED_VM, 0.0003)
    server.count_admission(skip(Rule.VM, Alone.INTERNAL_ERROR, "co-location skipped: internal error (KeyError)"), 0.003)
    server.count_admission(skip(Rule.NONE, Alone.NOT_POD_CREATION), 12.0)
    after = generate_latest(metrics.REGISTRY).decode()

    def added(name, **labels):
        return sample(after, name, **labels) - sample(before, name, **labels)

    counter = "colocate_admissions_total"
    assert added(counter, rule="vm", outcome="pinned", reason="") == 1
    assert added(counter, rule="vm", outcome="error", reason="internal error") == 1
    assert added(counter, rule="none", outcome="skipped", reason="not a pod creation") == 1
    histogram = "colocate_admission_duration_seconds"
    assert [added(f"{histogram}_bucket", rule="vm", le=le) for le in ("0.0005", "0.0025", "0.005", "+Inf")] == [1, 1, 2, 2]
    assert added(f"{histogram}_count", rule="vm") == 2 and added(f"{histogram}_count", rule="none") == 1
    assert added(f"{histogram}_bucket", rule="none", le="10.0") == 0
    assert re.findall(r'colocate_admission_duration_seconds_bucket\{le="([^"]+)",rule="vm"\}', after) == BUCKETS
