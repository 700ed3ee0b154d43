"""manifests/monitoring: the ServiceMonitor, the alerts and the dashboard an admin imports.

The alerts are checked and unit-tested by promtool (`promtool check rules`, `promtool test
rules` with tests/monitoring/alerts.test.yaml) on the very rules the PrometheusRule ships:
the `spec` of the rendered object is written out as the rules file, there is no second copy.
Every metric the alerts and the dashboard read must be one that `serve` exports.
"""
import copy
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from tests.support.docs import slug
from tests.support.helm import render as helm_render
from tests.support.kube import VALIDATE_VERSIONS, kubectl
from prometheus_client import CollectorRegistry, generate_latest

from webhook import metrics
from webhook.__main__ import build_parser

ROOT = Path(__file__).parent.parent
NS = "kubevirt-colocate"
MONITORING = "manifests/monitoring"
INSTALLS = ("manifests", "manifests/cert-manager")
UNIT_TESTS = Path(__file__).parent / "monitoring" / "alerts.test.yaml"
RULES_FILE = "kubevirt-colocate.rules.yaml"  # the name alerts.test.yaml loads
DOC = ROOT / "docs" / "monitoring.md"  # the alerts, the dashboard and the runbooks
MONITORING_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
SEVERITIES = {"warning", "critical"}
# Series from outside the webhook that the rules or the dashboard read, with their labels: kube-apiserver's
# own of its admission webhooks (k8s.io/apiserver pkg/admission/metrics/metrics.go), what it never sent us.
# No kube-state-metrics nor `up`: "no replica ready" is `absent(colocate_ready == 1)`, see the rule.
APISERVER_SERIES = {
    "apiserver_admission_webhook_fail_open_count": {"name", "type"},
    "apiserver_admission_webhook_rejection_count": {"name", "type", "operation", "error_type", "rejection_code"},
    "apiserver_admission_webhook_admission_duration_seconds_bucket": {"name", "type", "operation", "rejected", "le"},
    "apiserver_admission_match_condition_evaluation_errors_total": {"name", "kind", "type", "operation"},
}
EXTERNAL_SERIES = frozenset(APISERVER_SERIES)
# The names of our webhooks, as the configuration of each install gives them (the apiserver's `name` label).
WEBHOOK_NAME = re.compile(r".+[.]colocate[.]kubevirt-scheduler[.]io")
# What the dashboard must show (docs/monitoring.md).
DASHBOARD_PANELS = {"Admissions by outcome", "Admission latency", "Co-location state", "Keeper migrations",
                    "Cache health", "Certificate expiry", "Certificate expires in", "What holds VMs apart"}


# --------------------------------------------------------------------------- tools


def promtool() -> str:
    """$PROMTOOL or promtool on PATH (Debian's `prometheus` package). CI installs it: fail there."""
    tool = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if tool:
        return tool
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail("promtool is not installed; .ci/run installs it (apt-get install prometheus)")
    pytest.skip("promtool is not installed (apt-get install prometheus, or set PROMTOOL)")


def run_promtool(*args, cwd):
    done = subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@functools.cache
def _render(path):
    tool = kubectl()
    if tool is None:
        return None
    done = subprocess.run([tool, "kustomize", path], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


def render(path=MONITORING):
    objects = _render(path)
    if objects is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    return copy.deepcopy(objects)


def one(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def rule_groups():
    """The rule groups exactly as the rendered PrometheusRule ships them."""
    return one(render(), "PrometheusRule")["spec"]["groups"]


def alert_rules():
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def dashboard():
    [text] = one(render(), "ConfigMap")["data"].values()
    return json.loads(text)


def dashboard_queries():
    return [target["expr"] for panel in dashboard()["panels"] for target in panel.get("targets", [])]


@pytest.fixture
def rules_dir(tmp_path):
    """The PrometheusRule's spec as a rules file, next to a copy of the alert unit tests."""
    (tmp_path / RULES_FILE).write_text(yaml.safe_dump({"groups": rule_groups()}, sort_keys=False))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return tmp_path


# --------------------------------------------------------------------------- the objects


def test_the_component_renders_a_service_monitor_a_rule_and_a_dashboard():
    objects = render()
    assert sorted((o["apiVersion"], o["kind"]) for o in objects) == sorted(
        MONITORING_KINDS | {("v1", "ConfigMap")})
    for obj in objects:
        assert obj["metadata"]["namespace"] == NS
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == NS
    for version in VALIDATE_VERSIONS:
        kubernetes_validate.validate(one(objects, "ConfigMap"), version, strict=True)


def test_the_service_monitor_scrapes_the_metrics_ports_of_the_webhook_and_the_keeper():
    monitor = one(render(), "ServiceMonitor")
    install = render("manifests")
    services = [o for o in install if o["kind"] == "Service"]
    spec = monitor["spec"]
    selected = [s for s in services
                if all(s["metadata"].get("labels", {}).get(k) == v for k, v in spec["selector"]["matchLabels"].items())]
    assert sorted(s["metadata"]["name"] for s in selected) == [NS, f"{NS}-keeper"]  # a job each, named after it
    assert set(spec) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    assert spec.get("namespaceSelector", {"matchNames": [NS]}) == {"matchNames": [NS]}  # its own namespace
    [endpoint] = spec["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint.get("scheme", "http") == "http"
    for service, verb in zip(sorted(selected, key=lambda s: s["metadata"]["name"]), ("serve", "keep")):
        # The Service port of that name leads to the container port the process serves metrics on.
        port = next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
        deployment = one(install, "Deployment", service["metadata"]["name"])
        assert all(deployment["spec"]["template"]["metadata"]["labels"].get(k) == v
                   for k, v in service["spec"]["selector"].items())
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        container_port = next(p for p in container["ports"] if p["name"] == port["targetPort"])
        assert container_port["containerPort"] == build_parser().parse_args([verb, *container["args"]]).metrics_port
        # Its NetworkPolicy admits the scraper.
        policy = one(install, "NetworkPolicy", service["metadata"]["name"])
        assert container_port["containerPort"] in [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]


@pytest.mark.parametrize("install", INSTALLS)
def test_the_install_without_monitoring_is_unchanged(install):
    objects = render(install)
    assert not [o for o in objects if (o["apiVersion"], o["kind"]) in MONITORING_KINDS]
    assert not [o for o in objects if "grafana_dashboard" in (o["metadata"].get("labels") or {})]
    for kustomization in (ROOT / "manifests").glob("*/kustomization.yaml"):
        if kustomization.parent.name != "monitoring":
            assert "monitoring" not in yaml.safe_load(kustomization.read_text()).get("resources", [])


def test_the_dashboard_is_a_config_map_for_the_grafana_sidecar():
    config_map = one(render(), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    [(key, text)] = config_map["data"].items()
    assert key.endswith(".json")
    board = json.loads(text)
    assert board == json.loads((ROOT / MONITORING / "dashboard.json").read_text())
    assert board["uid"] == NS and board["title"] == NS and "id" not in board
    [variable] = board["templating"]["list"]
    assert (variable["type"], variable["query"], variable["name"]) == ("datasource", "prometheus", "datasource")
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"] and panel["description"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"].strip()
    assert DASHBOARD_PANELS <= {panel["title"] for panel in board["panels"]}


# --------------------------------------------------------------------------- alerts


def test_the_rules_pass_promtool_check(rules_dir):
    out = run_promtool("check", "rules", RULES_FILE, cwd=rules_dir)
    assert f"SUCCESS: {sum(len(g['rules']) for g in rule_groups())} rules found" in out


def test_the_alert_unit_tests_pass(rules_dir):
    out = run_promtool("test", "rules", UNIT_TESTS.name, cwd=rules_dir)
    assert "SUCCESS" in out


def test_every_alert_has_a_case_that_fires_and_one_that_stays_silent():
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    assert tests["rule_files"] == [RULES_FILE]
    fired, silent = set(), set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            if check.get("exp_alerts"):
                fired.update((check["alertname"], a["exp_labels"]["severity"]) for a in check["exp_alerts"])
            else:
                silent.add(check["alertname"])
    alerts = {(rule["alert"], rule["labels"]["severity"]) for rule in alert_rules()}
    assert fired == alerts
    assert silent == {name for name, _ in alerts}


def test_every_alert_has_a_severity_summary_description_and_runbook():
    doc = DOC.read_text()
    anchors = {slug(heading) for heading in re.findall(r"(?m)^#{2,6} (.+)$", doc)}
    names = [rule["alert"] for rule in alert_rules()]
    assert all(re.fullmatch(r"KubevirtColocate[A-Za-z]+", name) for name in names)
    for rule in alert_rules():
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}, rule["alert"]
        url, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert url.endswith("/docs/monitoring.md") and anchor == rule["alert"].lower() and anchor in anchors
        assert f"| `{rule['alert']}` | {rule['labels']['severity']} |" in doc  # in the alerts table
    # Two severities for the certificate and the event loop's lag, everything else once.
    twice = ("KubevirtColocateCertificateExpiring", "KubevirtColocateEventLoopLag")
    assert [names.count(name) for name in twice] == [2, 2]
    assert len(set(names)) == len(names) - len(twice)


def runbooks():
    """The runbook sections of docs/monitoring.md: the headings under "## Runbooks"."""
    section = DOC.read_text().split("\n## Runbooks\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"(?m)^### (.+)$", section)


def test_every_alert_links_to_its_own_runbook_section_in_the_docs():
    """An admin paged by an alert follows its runbook_url: the page is docs/monitoring.md, the
    anchor a runbook section of its own, one per alert (the two severities share one)."""
    names = sorted({rule["alert"] for rule in alert_rules()})
    assert sorted(runbooks()) == names  # one section per alert, none for an alert that is gone
    sections = {slug(heading) for heading in runbooks()}
    for rule in alert_rules():
        url, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert url == "https://github.com/kubevirt-colocate/kubevirt-colocate/blob/main/docs/monitoring.md", rule["alert"]
        assert anchor in sections, (rule["alert"], anchor)


def test_the_docs_list_the_dashboard_panels():
    doc = DOC.read_text()
    for panel in dashboard()["panels"]:
        assert f"| {panel['title']} |" in doc, panel["title"]


# --------------------------------------------------------------------------- metric names

# PromQL words that are not metric names.
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
            "inf", "nan", "atan2"}


def metric_names(expr):
    """The metric names a PromQL expression reads (functions, keywords, labels and durations left out)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges, subqueries, $__rate_interval
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)  # label lists
    names = set()
    for match in re.finditer(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?", expr):
        word, call = match.groups()
        if not call and word.lower() not in KEYWORDS:
            names.add(word)
    return names


def label_matchers(expr):
    """(metric, label) for every label a selector of the expression matches on."""
    for name, body in re.findall(r"([A-Za-z_:][\w:]*)\{([^}]*)\}", expr):
        for label in re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", body):
            yield name, label


@pytest.mark.parametrize("expr, names", [
    ('sum by (rule, le) (rate(a_bucket{outcome="x", y=~"a|b"}[$__rate_interval]))', {"a_bucket"}),
    ("(b unless b offset 10m) or increase(b[5m]) > 0", {"b"}),
    ("max by (namespace) (c and on (instance) (d == 1)) - time() < 14 * 86400", {"c", "d"}),
    ('absent(e == 1) or vector(0) and ignoring(pod) group_left(node) f:g', {"e", "f:g"}),
])
def test_metric_names_are_read_from_promql(expr, names):
    assert metric_names(expr) == names


def exported():
    """Every series name `serve` exports on /metrics (the text it renders), with a metric type's suffixes."""
    suffixes = {"counter": ("", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("", "_sum", "_count", "_created")}
    names = set()
    # With the keeper on, as the install runs it: its metrics are exported too.
    keeper = CollectorRegistry()
    for metric in metrics.SHOWN_LATER:
        keeper.register(metric)
    text = "".join(generate_latest(r).decode() for r in (metrics.REGISTRY, metrics.KEEPER_REGISTRY, keeper))
    for name, kind in re.findall(r"(?m)^# TYPE (\S+) (\S+)$", text):
        base = name.removesuffix("_total") if kind == "counter" else name
        names.update(name if s == "" else base + s for s in suffixes[kind])
    return names


def labels_of_metrics():
    """The label names of each metric the webhook defines, by the name of its series."""
    labels = {}
    for collector in vars(metrics).values():
        if hasattr(collector, "_labelnames") and hasattr(collector, "_type"):
            name = collector._name + ("_total" if collector._type == "counter" else "")
            labels[name] = set(collector._labelnames)
            if collector._type == "histogram":
                labels[collector._name + "_bucket"] = set(collector._labelnames) | {"le"}
    return labels


def test_the_keeper_metrics_are_absent_until_the_keeper_runs():
    """Where the keeper is off there is no leader series: the no-leader alert tells that apart from 0."""
    script = ("from prometheus_client import generate_latest; from webhook import metrics; r = metrics.KEEPER_REGISTRY; "
              "before = generate_latest(r).decode(); "
              "metrics.show(metrics.KEEPER_LEADER).set(0); after = generate_latest(r).decode(); "
              "print('colocate_keeper_leader' in before, 'colocate_keeper_leader 0.0' in after)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "True"], done.stderr
    assert {metrics.KEEPER_LEADER, metrics.KEEPER_TARGETED, metrics.VMS, metrics.KEEPER_MIGRATIONS} <= set(metrics.SHOWN_LATER)


def used_queries():
    return [rule["expr"] for rule in alert_rules()] + dashboard_queries()


def test_every_metric_the_alerts_and_the_dashboard_read_is_exported():
    available = exported() | EXTERNAL_SERIES
    used = {name: expr for expr in used_queries() for name in metric_names(expr)}
    assert "colocate_ready" in used and "colocate_admission_duration_seconds_bucket" in used
    missing = {name: expr for name, expr in used.items() if name not in available}
    assert not missing
    # Each keeper metric is watched by an alert or shown on the dashboard.
    keeper = {"colocate_vms", "colocate_vms_apart_longest_seconds", "colocate_vms_apart_over_hour",
              "colocate_vms_held", "colocate_keeper_migrations_total", "colocate_keeper_leader", "colocate_keeper_targeted_migration",
              "colocate_stranded_pods", "colocate_longhorn_restarts_vms"}
    assert keeper <= set(used) and keeper <= available


def test_every_label_matched_on_exists_on_its_metric():
    labels = labels_of_metrics() | APISERVER_SERIES
    for expr in used_queries():
        for name, label in label_matchers(expr):
            assert label in labels[name], (name, label, expr)


def test_the_dashboard_queries_parse(tmp_path):
    """promtool parses each dashboard query as a recording rule (Grafana's variables filled in)."""
    rules = [{"record": f"dashboard:query_{i}", "expr": expr.replace("$__rate_interval", "5m")}
             for i, expr in enumerate(dashboard_queries())]
    (tmp_path / "dashboard.rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run_promtool("check", "rules", "dashboard.rules.yaml", cwd=tmp_path)


# --------------------------------------------------------------------------- without the operator


def test_the_documented_scrape_config_keeps_the_metrics_ports_of_our_services():
    """The scrape configuration docs/monitoring.md gives for a Prometheus without the operator.

    (Debian's promtool is built without Kubernetes service discovery: `promtool check
    config` cannot read it, so its meaning is checked here.)
    """
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    [config] = [yaml.safe_load(b) for b in blocks if b.startswith("# prometheus.yml")]
    assert config["rule_files"] == [RULES_FILE]
    [job] = config["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "endpoints", "namespaces": {"names": [NS]}}]
    [keep] = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert keep["source_labels"] == ["__meta_kubernetes_service_name", "__meta_kubernetes_endpoint_port_name"]
    monitor_port = one(render(), "ServiceMonitor")["spec"]["endpoints"][0]["port"]
    for name in (NS, f"{NS}-keeper"):  # the webhook's Service and the keeper's
        service = one(render("manifests"), "Service", name)
        assert re.fullmatch(keep["regex"], f"{service['metadata']['name']};{monitor_port}")
        assert not re.fullmatch(keep["regex"], f"{service['metadata']['name']};webhook")
    assert not re.fullmatch(keep["regex"], f"{NS}-certs;{monitor_port}")
    assert {r["target_label"] for r in job["relabel_configs"] if "target_label" in r} >= {"namespace", "pod"}


def webhook_names(objects):
    return {hook["name"] for o in objects if o["kind"] == "MutatingWebhookConfiguration" for hook in o["webhooks"]}


def test_the_apiserver_alerts_read_every_webhook_of_the_install_and_no_other():
    """The apiserver counts by webhook name: each alert on its series selects every entry the
    install (with any component) names, and nobody else's."""
    installed = webhook_names(render("manifests")) | webhook_names(helm_render({"aimEvacuations": True}))
    assert {"vm.colocate.kubevirt-scheduler.io", "share-manager.colocate.kubevirt-scheduler.io",
            "evacuation.colocate.kubevirt-scheduler.io"} <= installed
    read = [rule for rule in alert_rules() if metric_names(rule["expr"]) & EXTERNAL_SERIES]
    assert {rule["alert"] for rule in read} == {"KubevirtColocateAdmissionFailOpen", "KubevirtColocateAdmissionRejected",
                                               "KubevirtColocateAdmissionSlow"}
    for rule in read:
        selectors = re.findall(r'name=~"([^"]+)"', rule["expr"])
        assert selectors and set(selectors) == {WEBHOOK_NAME.pattern}, rule["alert"]
        assert all(WEBHOOK_NAME.fullmatch(name) for name in installed)
        assert not WEBHOOK_NAME.fullmatch("inject.example.com") and not WEBHOOK_NAME.fullmatch("colocate.kubevirt-scheduler.io")
