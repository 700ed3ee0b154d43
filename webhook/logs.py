"""Logs as one JSON object per line, so admins can grep and ship them as they are."""
from __future__ import annotations

import logging
import sys
import time

import orjson


class JsonFormatter(logging.Formatter):
    """time, level, logger, msg, then the record's `fields` (extra={"fields": {...}}), then any error."""

    # The time in UTC to the millisecond, 2026-01-01T00:00:00.123+00:00, as logging writes it.
    converter = time.gmtime
    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03d+00:00"

    def __init__(self, fields: dict[str, str] | None = None):
        super().__init__()
        self.fields = dict(fields or {})  # on every line, after msg (the keeper's process says so)

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **self.fields,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


def setup(level: str = "info", **fields: str) -> None:
    # No line says which thread, process or source line wrote it: the records need not look them
    # up (the Logging HOWTO's "Optimization", its own names; each admission writes a line).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(fields))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
