"""Each log line is one JSON object: time, level, logger, message, then the record's fields."""
import io
import logging

import orjson
import pytest
from tests.support.kube import review, vm_pod

from webhook import kinds, logs
from webhook.admission import server
from webhook.admission.outcome import Outcome, Rule
from webhook.admission.review import parse_review
from webhook.rules.placement.decide import PINNED, Decision
from webhook.rules.shared.facts import Fact


@pytest.fixture
def lines(monkeypatch):
    """What `serve`'s log setup writes to stderr, as parsed lines."""
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    logs.setup("info")
    yield lambda: [orjson.loads(line) for line in stream.getvalue().splitlines()]
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])


FIELDS = {
    "uid": "u-1", "namespace": "vms", "pod": "virt-launcher-vm1-", "vm": "vm1", "rule": "vm",
    "disks": {"disk-0": "node-a", "disk-1": None}, "decision": "pinned", "node": "node-a", "nodes": ["node-a"],
    "reason": "pinned to node-a, where the share-manager of disk-0 runs — ünïcode", "detail": None, "dry_run": False,
}


def test_an_admission_is_one_line_that_says_why_the_vm_is_where_it_is(lines):
    request = parse_review(review(vm_pod(), uid="u-1"))
    decision = Decision(PINNED, node="node-a", preferences=(("node-a", 100),),
                        reason="pinned to node-a, where the share-manager of disk-0 runs — ünïcode")
    outcome = Outcome(Rule.VM, decision=decision, facts=(Fact("disk-0", "node-a", "on node-a"), Fact("disk-1", None, "?")))
    server.log_admission(request, outcome, 0.0001234)
    [line] = lines()
    time = line.pop("time")
    assert line == {"level": "info", "logger": "webhook.server", "msg": "admission", **FIELDS,
                    "namespace": request.namespace, "pod": kinds.pod_name(request.object), "duration_ms": 0.123}
    assert line["pod"] != "?"
    assert len(time) == len("2026-01-01T00:00:00.123+00:00") and time.endswith("+00:00")


def test_the_time_is_utc_to_the_millisecond():
    record = logging.LogRecord("webhook.server", logging.INFO, "", 0, "admission", (), None)
    record.created, record.msecs = 1767225600.1236, 123.0  # as a record made at that moment has them
    assert orjson.loads(logs.JsonFormatter().format(record))["time"] == "2026-01-01T00:00:00.123+00:00"


def test_a_key_that_is_no_string_is_written_as_a_string(lines):
    logging.getLogger("webhook.server").info("admission", extra={"fields": {**FIELDS, "disks": {1: "node-a"}}})
    assert lines()[0]["disks"] == {"1": "node-a"}


def test_an_error_carries_its_traceback(lines):
    try:
        raise KeyError("spec")
    except KeyError:
        logging.getLogger("webhook.mutate").exception("rule failed for %s/%s", "vms", "p")
    [line] = lines()
    assert line["level"] == "error" and line["msg"] == "rule failed for vms/p" and "KeyError: 'spec'" in line["error"]


def test_the_admission_line_is_a_record_any_handler_gets_and_a_level_above_info_silences(lines, caplog):
    """It goes through `logging`: a handler of the admin's (here pytest's capture) gets the record
    with its fields, and the level set on the logger holds for it."""
    request = parse_review(review(vm_pod(), uid="u-1"))
    outcome = Outcome(Rule.VM, decision=Decision(PINNED, node="node-a", preferences=(("node-a", 100),), reason="r"))
    log = logging.getLogger("webhook.server")
    with caplog.at_level(logging.INFO, logger="webhook.server"):
        server.log_admission(request, outcome, 0.001)
    [record] = [r for r in caplog.records if r.name == "webhook.server"]
    assert (record.getMessage(), record.fields["uid"], record.fields["decision"]) == ("admission", "u-1", "pinned")
    log.setLevel(logging.WARNING)
    try:
        server.log_admission(request, outcome, 0.001)
    finally:
        log.setLevel(logging.NOTSET)
    assert [line["uid"] for line in lines()] == ["u-1"]


def test_the_time_of_each_line_is_its_own_second_to_the_millisecond():
    """Each second's text is worked out once: lines in one second share it, the next second's
    line gets the next, and an earlier one (another thread's) its own."""
    formatter = logs.JsonFormatter()
    times = [(1767225600.0, "00:00:00.000"), (1767225600.9996, "00:00:00.999"), (1767225659.5, "00:00:59.500"),
             (1767225660.0015, "00:01:00.001"), (1767225600.1236, "00:00:00.123")]
    assert [formatter.utc(created) for created, _ in times] == [f"2026-01-01T{text}+00:00" for _, text in times]
