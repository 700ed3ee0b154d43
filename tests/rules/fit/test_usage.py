"""What the pods bound to a node take from it."""
from tests.support.fitting import GI, MI, workload

from webhook.rules.fit.usage import PodUsage, Usage
from webhook.rules.fit.view import StaticView


def test_usage_adds_and_removes_one_pod():
    usage = Usage()
    db = PodUsage.of(workload("db", "node-a", requests={"cpu": "1", "memory": "1Gi"},
                              ports=[{"containerPort": 5432, "hostPort": 5432}]))
    web = PodUsage.of(workload("web", "node-a", requests={"cpu": "250m", "memory": "256Mi"}))
    usage.add(db)
    usage.add(web)
    assert (usage.pods, usage.requested) == (2, {"cpu": 1250, "memory": GI + 256 * MI})
    assert usage.any_ip_ports[("TCP", 5432)] == 1
    usage.remove(db)
    assert (usage.pods, usage.requested, dict(usage.ports), dict(usage.any_ip_ports)) == \
        (1, {"cpu": 250, "memory": 256 * MI}, {}, {})


def test_usage_skips_finished_pods_and_remembers_unreadable_ones():
    broken = workload("broken", "node-a", requests={"cpu": "lots"})
    finished = [workload("done", "node-a", phase="Succeeded"), workload("failed", "node-a", phase="Failed")]
    usage = StaticView(pods=[*finished, workload("web", "node-a"), broken]).usage("node-a")
    assert (usage.pods, usage.unreadable, usage.requested) == (2, 1, {"cpu": 100, "memory": 128 * MI})
    usage.remove(PodUsage.of(broken))
    assert usage.unreadable == 0
