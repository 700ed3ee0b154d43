"""Logs as one JSON object per line, so admins can grep and ship them as they are."""
from __future__ import annotations

import datetime
import logging
import sys

import orjson


class JsonFormatter(logging.Formatter):
    """time, level, logger, msg, then the record's `fields` (extra={"fields": {...}}), then any error."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc).isoformat(timespec="milliseconds"),
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


def setup(level: str = "info") -> None:
    # No line says which thread or process wrote it: the records need not look them up (the
    # Logging HOWTO's "Optimization"; each admission writes a line).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
