"""The keeper's writes as a whole (webhook/keeper/writes.py): the bucket over them, and when a run of
failures means the API is lost rather than one VM's object, one namespace's or one tenant's webhook."""
from __future__ import annotations

import pytest

from webhook.keeper.writes import BURST, LOST, RATE, Result, SHARED, Writes
from webhook.rules.keeping.record import Action


class Time:
    """A monotonic clock that moves when the bucket sleeps, or when a test says so."""

    def __init__(self):
        self.now, self.slept = 0.0, []

    def __call__(self):
        return self.now

    async def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def writes():
    time = Time()
    return Writes(clock=time, sleep=time.sleep), time


def failed(vm, status=500, namespace="default", words=""):
    return Result(key=(namespace, vm), action=Action.MIGRATE, words=words or f"API answered {status}", holds=True,
                  status=status)


def webhook_down(name):
    return f"API answered 500: Internal error occurred: failed calling webhook \"{name}\": failed to call webhook"


async def test_a_burst_goes_at_once_then_one_write_a_second():
    made, time = writes()
    for _ in range(BURST):
        assert await made.take()
    assert time.slept == []  # a pass's handful of writes (a frozen VM's unpause among them) never waits
    assert await made.take() and time.slept == [pytest.approx(1 / RATE)]
    time.now += 3.5 / RATE  # tokens come back as time passes, up to the burst
    for _ in range(3):
        assert await made.take()
    assert len(time.slept) == 1
    time.now += 1000
    for _ in range(BURST):
        assert await made.take()
    assert len(time.slept) == 1


@pytest.mark.parametrize("status", [0, 500, 503, 429])
async def test_namespaces_failing_in_a_row_without_an_answer_about_them_mean_the_api_is_lost(status):
    made, _ = writes()
    for i in range(1, LOST):
        made.came(failed(f"vm{i}", status, namespace=f"ns-{i}"))
        assert not made.lost and await made.take()
    made.came(failed(f"vm{LOST}", status, namespace=f"ns-{LOST}"))
    assert made.lost.startswith(f"the API failed in {LOST} namespaces in a row (ns-1, ns-2, ns-3), the pass stopped: "
                                f"API answered {status}")
    assert not await made.take()  # the pass writes nothing more
    made.begin()  # the next pass gives the API a fresh chance
    assert not made.lost and await made.take()


@pytest.mark.parametrize("words", ["", webhook_down("migrations.tenant.example.com")])
async def test_one_namespace_failing_is_never_the_api_lost_and_its_other_vms_wait_for_the_next_pass(words):
    made, _ = writes()
    made.came(failed("vm1", namespace="tenant", words=words))
    assert made.deferred == {}  # one VM's failure holds that VM alone
    for i in range(2, LOST + 3):
        made.came(failed(f"vm{i}", namespace="tenant", words=words))
    assert not made.lost and list(made.deferred) == ["tenant"] and SHARED == 2
    assert made.deferred["tenant"].startswith("not tried in this pass: the keeper's requests for vm1, vm2, vm3, vm4, "
                                              "vm5 of namespace tenant failed (API answered 500")
    made.came(failed("vm9", namespace="other"))
    assert list(made.deferred) == ["tenant"]
    made.begin()
    assert made.deferred == {}


async def test_one_tenants_webhook_failing_in_many_namespaces_is_never_the_api_lost_but_kubevirts_own_is():
    made, _ = writes()
    for i in range(1, LOST + 3):
        made.came(failed(f"vm{i}", namespace=f"ns-{i}", words=webhook_down("migrations.tenant.example.com")))
    assert not made.lost
    for i in range(1, LOST):
        made.came(failed(f"vm{i}", namespace=f"ns-{i}", words=webhook_down("migration-create-validator.kubevirt.io")))
    assert not made.lost
    made.came(failed("vm9", namespace="ns-9", words=webhook_down("migration-create-validator.kubevirt.io")))
    assert made.lost  # virt-api: no namespace can migrate


@pytest.mark.parametrize("between", [
    Result(key=("default", "vm9"), action=Action.UNPAUSE, done=True),  # one went through
    failed("vm9", 403),  # the API answered about that object: it is there
    failed("vm9", 422),
])
async def test_an_answer_about_an_object_in_between_starts_the_count_again(between):
    made, _ = writes()
    for i in range(1, LOST):
        made.came(failed(f"vm{i}", namespace=f"ns-{i}"))
    made.came(between)
    for i in range(1, LOST):
        made.came(failed(f"vm{i + LOST}", namespace=f"ns-{i + LOST}"))
    assert not made.lost


async def test_one_vm_failing_again_and_refusals_never_mean_the_api_is_lost():
    made, _ = writes()
    for _ in range(LOST + 2):
        made.came(failed("vm1"))  # its dry run, its cancel, …: one VM's
    for i in range(LOST + 2):
        made.came(failed(f"vm{i + 2}", 403))
    assert not made.lost


async def test_a_namespace_whose_webhook_hangs_costs_one_wait_a_backoff_and_never_the_api():
    """A tenant's policy engine accepts and never answers (`timeoutSeconds: 10`): the apiserver answers after 10 s,
    naming it. Its namespace's other VMs are not tried in this pass nor, doubling from a minute, in the next;
    five such namespaces are never the API lost, and are no readiness note of the keeper's."""
    made, time = writes()
    for i in range(5):
        assert await made.take()
        time.now += 10  # the apiserver waited for the webhook
        made.came(failed(f"vm{i}", namespace=f"tenant-{i}", words=webhook_down("validate.kyverno.svc-fail")))
    assert not made.lost and set(made.deferred) == made.tenants and len(made.tenants) == 5
    assert made.deferred["tenant-0"].startswith("not tried in this pass: the keeper's requests for vm0 of namespace")
    made.begin()  # the next pass: none of them tried, none waited for
    assert sorted(made.deferred) == sorted(made.tenants) == [f"tenant-{i}" for i in range(5)]
    assert made.deferred["tenant-0"].startswith("not tried until 60s after its last request, which waited 10s")
    time.now += 61
    made.begin()  # past the backoff: tried once more; hanging again, a backoff twice as long
    assert made.deferred == {}
    assert await made.take()
    time.now += 10
    made.came(failed("vm0", namespace="tenant-0", words=webhook_down("validate.kyverno.svc-fail")))
    assert made.hanging["tenant-0"][0] == 120
    assert await made.take()
    made.came(Result(key=("tenant-0", "vm7"), action=Action.MIGRATE, done=True))  # it answers again
    assert "tenant-0" not in made.hanging


async def test_a_wait_that_names_no_webhook_defers_its_namespace_and_is_said():
    made, time = writes()
    assert await made.take()
    time.now += 32
    made.came(failed("vm1", 0, namespace="tenant", words="no answer within 32s"))
    assert list(made.deferred) == ["tenant"] and made.tenants == set()  # maybe the API: a readiness note


async def test_a_tenants_failure_gives_its_token_back_and_a_success_or_the_apis_failure_does_not():
    """100 namespaces whose webhook answers 500 at once cost the bucket nothing: a pass never waits for them. A
    write that went through, or one the API itself failed, keeps its token spent."""
    made, time = writes()
    for i in range(100):
        assert await made.take()
        made.came(failed(f"vm{i}", namespace=f"tenant-{i}", words=webhook_down("validate.kyverno.svc-fail")))
    assert time.slept == [] and not made.lost
    for i in range(BURST):
        assert await made.take()
        made.came(Result(key=("default", f"vm{i}"), action=Action.MIGRATE, done=True) if i % 2 else
                  failed(f"vm{i}", 403))
    assert await made.take() and time.slept == [pytest.approx(1 / RATE)]
