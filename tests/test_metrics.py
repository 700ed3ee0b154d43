"""The admission figures are exposed exactly as prometheus_client's own Histogram and Counter would expose them."""
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from webhook import metrics
from webhook.admission.outcome import Rule
from webhook.rules.classify import Skip
from webhook.rules.decide import PINNED, PREFERRED

OBSERVED = [(Rule.VM, 0.0003), (Rule.VM, 0.0005), (Rule.VM, 0.0031), (Rule.SHARE_MANAGER, 2.0), (Rule.VM, 12.0),
            (Rule.NONE, 0.0)]
COUNTED = [(Rule.VM, PINNED, ""), (Rule.VM, PINNED, ""), (Rule.VM, PREFERRED, ""), (Rule.VM, "error", Skip.INTERNAL_ERROR),
           (Rule.NONE, "skipped", Skip.NOT_POD_CREATION), (Rule.SHARE_MANAGER, "skipped", "")]


def prometheus_client_own(observed, counted):
    registry = CollectorRegistry()
    durations = Histogram(metrics.AdmissionFigures.DURATION, metrics.AdmissionFigures.DURATION_HELP, ["rule"],
                          buckets=metrics.ADMISSION_BUCKETS, registry=registry)
    outcomes = Counter(metrics.AdmissionFigures.OUTCOMES + "_total", metrics.AdmissionFigures.OUTCOMES_HELP,
                       ["rule", "outcome", "reason"], registry=registry)
    for rule, seconds in observed:
        durations.labels(rule).observe(seconds)
    for labels in counted:
        outcomes.labels(*labels).inc()
    return registry


def ours(observed, counted):
    registry = CollectorRegistry()
    figures = metrics.AdmissionFigures()
    registry.register(figures)
    for rule, seconds in observed:
        figures.observe(rule, seconds)
    for labels in counted:
        figures.count(*labels)
    return registry


@pytest.mark.parametrize("observed, counted", [([], []), (OBSERVED[:1], COUNTED[:1]), (OBSERVED, COUNTED)],
                         ids=["none", "one", "several"])
@pytest.mark.parametrize("created", [True, False], ids=["created", "no-created"])
def test_the_admission_figures_are_exposed_as_prometheus_client_exposes_them(monkeypatch, observed, counted, created):
    import prometheus_client.metrics

    monkeypatch.setattr(time, "time", lambda: 1767225600.25)  # the _created series
    monkeypatch.setattr(prometheus_client.metrics, "_use_created", created)
    monkeypatch.setenv("PROMETHEUS_DISABLE_CREATED_SERIES", "false" if created else "true")
    theirs, mine = prometheus_client_own(observed, counted), ours(observed, counted)
    assert generate_latest(mine) == generate_latest(theirs)
    assert generate_openmetrics(mine) == generate_openmetrics(theirs)
