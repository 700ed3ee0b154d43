"""Quantities read as the apiserver and the scheduler read them."""
import pytest

from webhook.rules.shared.quantity import nanos, show, units

KVM = "devices.kubevirt.io/kvm"
GI, MI = 2**30, 2**20


@pytest.mark.parametrize("resource, value, expected", [
    ("cpu", "500m", 500),
    ("cpu", "1500m", 1500),
    ("cpu", "1.5", 1500),
    ("cpu", 2, 2000),  # a JSON number
    ("cpu", "0.5m", 1),  # MilliValue rounds up
    ("cpu", "1e-12", 1),  # finer than 1n rounds up to 1n, then to 1m
    ("memory", "2Gi", 2 * GI),
    ("memory", "0.5Gi", GI // 2),
    ("memory", "100Ki", 102400),
    ("memory", "1e3", 1000),
    ("memory", "1E3", 1000),
    ("memory", "1k", 1000),
    ("memory", "1M", 10**6),
    ("memory", "1.5", 2),  # Value rounds up
    ("memory", "+1", 1),
    ("memory", " 2Mi ", 2 * MI),  # Quantity.UnmarshalJSON trims spaces
    ("memory", "1.Gi", GI),  # apimachinery accepts a bare point
    ("memory", 1.5, 2),
    ("hugepages-2Mi", "1Gi", GI),
    (KVM, "1", 1),
    ("nvidia.com/gpu", 2, 2),
    ("memory", "16Ei", 2**63 - 1),  # binary quantities are capped at 2^63-1
], ids=lambda v: str(v))
def test_quantity(resource, value, expected):
    assert units(resource, nanos(value)) == expected


@pytest.mark.parametrize("value", ["", "1K", "1e", "abc", "1.5.5", "1 Gi", "1m3", "--1", "1e-", "١", "1e999",
                                   True, None, [], float("inf")],
                         ids=lambda v: repr(v))
def test_bad_quantity(value):
    with pytest.raises(ValueError):
        nanos(value)


@pytest.mark.parametrize("resource, amount, shown", [
    ("cpu", 1800, "1800m"), ("cpu", 2000, "2"), ("memory", 2294 * MI, "2.24Gi"), ("memory", 512 * MI, "512Mi"),
    ("memory", 16 * GI, "16Gi"), ("hugepages-2Mi", 4 * MI, "4Mi"), (KVM, 110, "110"),
], ids=lambda v: str(v))
def test_show(resource, amount, shown):
    assert show(resource, amount) == shown


@pytest.mark.parametrize("text", ["1" * 30_000 + "x", "1" * 30_000, "1." + "5" * 50_000 + "Q", "9" * 65])
def test_a_hostile_quantity_is_refused_at_once(text):
    """A client that talks to the webhook directly can send any string (the apiserver normalises
    what it stores): one that no quantity is, however long, is refused in one pass."""
    import time

    started = time.process_time()
    with pytest.raises(ValueError):
        nanos(text)
    assert time.process_time() - started < 0.05


def test_the_longest_quantities_the_apiserver_writes_still_parse():
    assert nanos("9223372036854775807") == 9223372036854775807 * 10**9
    assert nanos("0.000000001") == 1 and nanos("1" + "0" * 40 + "m") == 10**40 * 10**6
