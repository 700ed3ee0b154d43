"""The admission log line is the line JsonFormatter writes, byte for byte, at a fraction of the cost."""
import datetime
import io
import logging

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook import logs


@settings(max_examples=2000)
@given(created=st.floats(0, 4_102_444_800, allow_nan=False) | st.integers(0, 4_102_444_800).map(lambda s: s + 0.9995))
def test_the_time_is_written_as_datetime_writes_it(created):
    expected = datetime.datetime.fromtimestamp(created, datetime.timezone.utc).isoformat(timespec="milliseconds")
    assert logs.timestamp(created) == expected


@pytest.fixture(autouse=True)
def info_enabled():
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)  # setLevel, not the attribute: loggers cache what is enabled
    yield
    root.setLevel(level)


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


def test_serve_writes_the_admission_line_as_the_formatter_would(monkeypatch):
    stream = io.StringIO()
    handler = logs.JsonLines(stream)
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    logger = logging.getLogger("webhook.server")
    logs.line("admission", FIELDS, logger, created=1767225600.1236)  # no event loop: written at once
    record = logger.makeRecord(logger.name, logging.INFO, "", 0, "admission", (), None, extra={"fields": FIELDS})
    record.created = 1767225600.1236
    assert stream.getvalue() == handler.format(record) + "\n"


class Writes(io.StringIO):
    def __init__(self):
        super().__init__()
        self.writes = []

    def write(self, text):
        self.writes.append(text)
        return super().write(text)


async def test_admission_lines_go_out_together_soon_and_in_order(monkeypatch):
    import asyncio

    stream = Writes()
    handler = logs.JsonLines(stream)
    handler.FLUSH_AFTER = 0.3  # room for a slow machine between the two lines
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    logger = logging.getLogger("webhook.server")
    logs.line("admission", {**FIELDS, "uid": "a"}, logger)
    await asyncio.sleep(0)
    logs.line("admission", {**FIELDS, "uid": "b"}, logger)  # answered in a later turn
    assert stream.writes == []  # not yet: within FLUSH_AFTER of the first
    await asyncio.sleep(handler.FLUSH_AFTER * 2)
    assert len(stream.writes) == 1 and [orjson.loads(x)["uid"] for x in stream.getvalue().splitlines()] == ["a", "b"]
    logs.line("admission", {**FIELDS, "uid": "c"}, logger)
    logger.warning("something else")  # any other line: the queued ones go first
    assert [orjson.loads(x).get("uid", x) for x in stream.getvalue().splitlines()][2:][0] == "c"
    assert orjson.loads(stream.getvalue().splitlines()[-1])["msg"] == "something else"
    logs.line("admission", {**FIELDS, "uid": "d"}, logger)
    handler.flush()  # and at exit (logging.shutdown flushes every handler)
    assert orjson.loads(stream.getvalue().splitlines()[-1])["uid"] == "d"


async def test_a_burst_of_admissions_is_written_without_waiting(monkeypatch):
    stream = Writes()
    handler = logs.JsonLines(stream)
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    logger = logging.getLogger("webhook.server")
    for i in range(handler.FLUSH_LINES + 1):
        logs.line("admission", {**FIELDS, "uid": str(i)}, logger)
    assert len(stream.writes) == 1  # FLUSH_LINES lines: written at once, in one write
    assert [orjson.loads(x)["uid"] for x in stream.getvalue().splitlines()] == [str(i) for i in range(handler.FLUSH_LINES)]


def test_a_key_that_is_no_string_is_written_as_the_formatter_writes_it(monkeypatch):
    stream = io.StringIO()
    handler = logs.JsonLines(stream)
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    logger = logging.getLogger("webhook.server")
    fields = {**FIELDS, "disks": {1: "node-a"}}
    logs.line("admission", fields, logger, created=1767225600.1236)
    record = logger.makeRecord(logger.name, logging.INFO, "", 0, "admission", (), None, extra={"fields": fields})
    record.created = 1767225600.1236
    assert stream.getvalue() == handler.format(record) + "\n" and '"disks":{"1":"node-a"}' in stream.getvalue()


async def test_flush_writes_the_queued_lines_now(monkeypatch):
    """`serve` calls it on its way out, so queued admission lines precede any error it prints."""
    stream = Writes()
    handler = logs.JsonLines(stream)
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    logs.line("admission", {**FIELDS, "uid": "last"}, logging.getLogger("webhook.server"))
    assert stream.writes == []
    logs.flush()
    assert orjson.loads(stream.getvalue())["uid"] == "last"
