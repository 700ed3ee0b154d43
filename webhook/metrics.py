"""Prometheus metrics: what admins alert on (latency, outcomes, API errors, certificate expiry).
`serve` shows REGISTRY, `keep` KEEPER_REGISTRY; what both do (API reads, watches, Events, the
store's figures) is registered with both; each has its own readiness gauge."""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)  # serve's
KEEPER_REGISTRY = CollectorRegistry(auto_describe=True)  # keep's

# The apiserver's own webhook latency histogram starts at 5 ms; we want to see well below it.
ADMISSION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


ADMISSION_DURATION = Histogram("colocate_admission_duration_seconds",
                               "Time to answer one admission review, from request to response.", ["rule"],
                               buckets=ADMISSION_BUCKETS, registry=REGISTRY)
ADMISSION_LATENCY = Histogram("colocate_admission_latency_seconds",
                              "Time to answer one admission review as its caller waits for it: from the accept of its "
                              "connection (a kept connection: its request's first byte) to the answer, the TLS "
                              "handshake, reading the request and any wait for the event loop included; by kind of "
                              "pod (vm, share-manager, other; migration: a drain's evacuation).", ["kind"], buckets=ADMISSION_BUCKETS, registry=REGISTRY)
ADMISSIONS = Counter("colocate_admissions_total",
                     "Admission reviews answered, by rule (vm, share-manager, evacuation, none) and outcome (pinned, pinned-among, "
                     "preferred, not-pinned, aimed, skipped, error), a skipped one by why.",
                     ["rule", "outcome", "reason"], registry=REGISTRY)
# Each label set's child looked up once and kept, as Prometheus' client guidelines intend (every
# admission counts itself under one of a few label sets; none is ever removed).
ADMISSION_DURATIONS, ADMISSION_OUTCOMES = functools.cache(ADMISSION_DURATION.labels), functools.cache(ADMISSIONS.labels)
ADMISSION_LATENCIES = functools.cache(ADMISSION_LATENCY.labels)
LOOP_LAG = Histogram("colocate_event_loop_lag_seconds",
                     "How late the event loop ran a timer (sampled every 0.1 s): how long a request arriving then "
                     "could wait before its handler ran.", buckets=ADMISSION_BUCKETS, registry=REGISTRY)
LOOP_LAG_MAX = Gauge("colocate_event_loop_lag_max_seconds", "The largest event loop lag of the last minute.",
                     registry=REGISTRY)
CONNECTIONS_REFUSED = Counter("colocate_connections_closed_total",
                              "Connections to the admission port closed by its bounds: a request's headers not sent "
                              "in time.", ["why"], registry=REGISTRY)
BODY_BYTES_HELD = Gauge("colocate_admission_body_bytes_held",
                        "Bytes of admission request bodies read or being read and not yet answered (within "
                        "--body-budget).", registry=REGISTRY)
REQUESTS_WAITING = Gauge("colocate_admission_requests_waiting",
                         "Admission requests (one connection each) waiting, unread, for room in --body-budget.",
                         registry=REGISTRY)
BODIES_TURNED_AWAY = Counter("colocate_admission_bodies_turned_away_total",
                             "Admission requests answered 503 because no room in --body-budget freed before their "
                             "deadline.", registry=REGISTRY)
BAD_REVIEWS = Counter("colocate_bad_reviews_total", "Requests answered 400 (not a valid AdmissionReview).",
                      registry=REGISTRY)
# Both processes' (registered with both registries below).
API_ERRORS = Counter("colocate_api_errors_total", "Kubernetes API reads that failed or timed out.", ["resource"],
                     registry=None)
WATCH_ERRORS = Counter("colocate_watch_errors_total", "Failed lists or watches of a cache, by cache.", ["cache"],
                       registry=None)
CACHE_HEALTHY = Gauge("colocate_cache_healthy", "1 while a cache's list/watch works, 0 while it is failing.",
                      ["cache"], registry=None)
EVENTS = Counter("colocate_events_total", "Kubernetes Events about decisions, by result (sent, failed, dropped).",
                 ["result"], registry=None)
READY = Gauge("colocate_ready", "1 when the webhook reports ready (stores synced, certificate loaded).",
              registry=REGISTRY)
KEEPER_READY = Gauge("colocate_keeper_ready", "1 when the keeper's process reports ready (it campaigns for the Lease, "
                     "or runs idle with the keeper off).", registry=KEEPER_REGISTRY)
CERT_EXPIRY = Gauge("colocate_certificate_expiry_timestamp_seconds",
                    "Expiry (Unix time) of the serving certificate in use.", registry=REGISTRY)
# The keeper's (`keep`; the leader reports VMs). Exported only once shown (`show`): absent while
# the keeper is off; the targeted-migration gauge also until the first check.
VMS = Gauge("colocate_vms", "Running opted-in VMs by co-location state, as the keeper last saw them.", ["state"],
            registry=None)
VMS_APART_LONGEST = Gauge("colocate_vms_apart_longest_seconds",
                          "How long the VM apart from its storage the longest has been apart (0 when none).",
                          registry=None)
VMS_APART_OVER_HOUR = Gauge("colocate_vms_apart_over_hour", "Opted-in VMs apart from their storage for over an hour.",
                            registry=None)
VMS_HELD = Gauge("colocate_vms_held", "Opted-in VMs apart from their storage, by what holds them where they are.",
                 ["hold"], registry=None)
KEEPER_MIGRATIONS = Counter("colocate_keeper_migrations_total",
                            "Migrations of the keeper by result (created, succeeded, failed, error).", ["result"],
                            registry=None)
KEEPER_UNPAUSES = Counter("colocate_keeper_unpauses_total",
                          "Unpauses of VMs carried paused onto a fresh NFS mount, by result "
                          "(unpaused, refused, error).", ["result"], registry=None)
KEEPER_RECORD = Counter("colocate_keeper_record_problems_total",
                        "Passes that found the keeper's record lost or could not keep it, by problem (unreadable, "
                        "other version, malformed, deleted, not read, not written).", ["problem"], registry=None)
KEEPER_PASS = Gauge("colocate_keeper_pass_seconds",
                    "How long the keeper's last pass over the VMs took: on the clock (clock=wall) and of the "
                    "process's CPU (clock=cpu), the caches' handling of events meanwhile included.", ["clock"],
                    registry=None)
KEEPER_LEADER = Gauge("colocate_keeper_leader", "1 on the replica that leads the keeper, 0 on the others.",
                      registry=None)
KEEPER_TARGETED = Gauge("colocate_keeper_targeted_migration",
                        "1 when the cluster keeps spec.addedNodeSelector (targeted migration works), 0 when it prunes it.",
                        registry=None)
LONGHORN_RESTARTS_VMS = Gauge("colocate_longhorn_restarts_vms",
                              "1 on what Longhorn's Settings make of a share-manager restart: it reboots the VMs of its "
                              "volume (answer=yes), it does not (no), or they cannot tell (cannot_tell).", ["answer"],
                              registry=None)
KEEPER_METRICS = (VMS, VMS_APART_LONGEST, VMS_APART_OVER_HOUR, VMS_HELD, KEEPER_MIGRATIONS, KEEPER_UNPAUSES,
                  KEEPER_RECORD, KEEPER_PASS)
SHOWN_LATER = (*KEEPER_METRICS, KEEPER_LEADER, KEEPER_TARGETED, LONGHORN_RESTARTS_VMS)


@functools.cache  # registered once
def show(metric: Gauge | Counter) -> Gauge | Counter:
    """Export a metric of the keeper's that is absent until it means something (see SHOWN_LATER)."""
    KEEPER_REGISTRY.register(metric)
    return metric


# The never-strand safety net.
STRANDED_PODS = Gauge("colocate_stranded_pods", "Pods we pinned that are still unschedulable after 2 minutes.",
                      registry=REGISTRY)


class StoreCollector(Collector):
    """Reads the store's own figures at scrape time (objects cached, last sync) if it has any."""

    source: Callable[[], dict[str, tuple[int, float | None]]] | None = None  # set by the process that has a store

    def collect(self) -> Iterable[GaugeMetricFamily]:
        objects = GaugeMetricFamily("colocate_store_objects", "Objects held in the store, by resource.", labels=["resource"])
        synced = GaugeMetricFamily("colocate_store_last_sync_timestamp_seconds",
                                   "When each resource was last listed or watched (Unix time).", labels=["resource"])
        stats = self.source() if self.source else {}
        for resource, (count, when) in stats.items():
            objects.add_metric([resource], count)
            if when is not None:
                synced.add_metric([resource], when)
        yield objects
        yield synced


STORE = StoreCollector()
SHARED = (API_ERRORS, WATCH_ERRORS, CACHE_HEALTHY, EVENTS, STORE)  # both processes'
for registry in (REGISTRY, KEEPER_REGISTRY):
    for shared in SHARED:
        registry.register(shared)
