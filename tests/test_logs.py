"""The admission log line is the line JsonFormatter writes, byte for byte, at a fraction of the cost."""
import datetime
import io
import logging

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook import logs


@settings(max_examples=2000)
@given(created=st.floats(0, 4_102_444_800, allow_nan=False) | st.integers(0, 4_102_444_800).map(lambda s: s + 0.9995))
def test_the_time_is_written_as_datetime_writes_it(created):
    expected = datetime.datetime.fromtimestamp(created, datetime.timezone.utc).isoformat(timespec="milliseconds")
    assert logs.timestamp(created) == expected


FIELDS = {
    "uid": "u-1", "namespace": "vms", "pod": "virt-launcher-vm1-", "vm": "vm1", "rule": "vm",
    "disks": {"disk-0": "node-a", "disk-1": None}, "decision": "pinned", "node": "node-a", "nodes": ["node-a"],
    "reason": "pinned to node-a, where the share-manager of disk-0 runs — ünïcode", "detail": None, "dry_run": False,
    "duration_ms": 0.123,
}


def test_the_admission_line_is_what_the_formatter_writes(monkeypatch):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    monkeypatch.setattr(logging.getLogger(), "level", logging.INFO)
    logger = logging.getLogger("webhook.server")
    logs.line("admission", FIELDS, logger, created=1767225600.1236)
    record = logger.makeRecord(logger.name, logging.INFO, "", 0, "admission", (), None, extra={"fields": FIELDS})
    record.created = 1767225600.1236
    assert stream.getvalue() == handler.format(record) + "\n"
    assert orjson.loads(stream.getvalue()) == {"time": "2026-01-01T00:00:00.123+00:00", "level": "info",
                                               "logger": "webhook.server", "msg": "admission", **FIELDS}


def test_other_handlers_get_a_record_with_the_fields(monkeypatch, caplog):
    with caplog.at_level(logging.INFO):
        logs.line("admission", FIELDS, logging.getLogger("webhook.server"))
    assert caplog.records[-1].fields == FIELDS and caplog.records[-1].getMessage() == "admission"
