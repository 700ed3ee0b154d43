"""Logs as one JSON object per line, so admins can grep and ship them as they are."""
from __future__ import annotations

import datetime
import logging
import math
import sys
import time

import orjson

UTC = datetime.timezone.utc


def timestamp(created: float) -> str:
    """`created` (Unix time) as `datetime.fromtimestamp(created, utc).isoformat(timespec="milliseconds")`
    writes it, e.g. 2026-01-01T00:00:00.123+00:00, with the date and time of day worked out
    once per second: the admission log line asks on every VM start."""
    fraction, whole = math.modf(created)
    micros = round(fraction * 1e6)  # datetime rounds to the microsecond, half to even, as round() does
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    elif micros < 0:
        whole, micros = whole - 1, micros + 1_000_000
    global _last_second
    second, text = _last_second  # one read: another thread may replace it meanwhile
    if second != int(whole):
        second = int(whole)
        text = datetime.datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _last_second = (second, text)
    return f"{text}.{micros // 1000:03d}+00:00"


_last_second: tuple[int | None, str] = (None, "")  # the last whole second formatted, and its text


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


def line(msg: str, fields: dict, logger: logging.Logger, created: float | None = None) -> None:
    """One info line straight to the handlers' streams: the per-admission log, without the
    cost of a LogRecord (it runs on every VM start). The same line JsonFormatter writes for
    a record of these fields (tests/test_logs.py)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    handlers = logging.getLogger().handlers
    if not handlers:
        return
    created = time.time() if created is None else created
    entry = {"time": timestamp(created), "level": "info", "logger": logger.name, "msg": msg}
    entry.update(fields)
    text = None
    for handler in handlers:
        stream = getattr(handler, "stream", None)
        if stream is None or type(handler.formatter) is not JsonFormatter:
            record = logger.makeRecord(logger.name, logging.INFO, "", 0, msg, (), None, extra={"fields": fields})
            record.created = created
            handler.handle(record)
        else:
            if text is None:
                text = orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE).decode()
            stream.write(text)


def setup(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
