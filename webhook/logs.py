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

    def __init__(self, fields: dict[str, str] | None = None):
        super().__init__()
        self.fields = dict(fields or {})  # on every line, after msg (the keeper's process says so)
        self._second: tuple[int, str] = (-1, "")  # the last second written, and its text

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": self.utc(record.created), "level": record.levelname.lower(), "logger": record.name,
                 "msg": record.getMessage(), **self.fields}
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        try:
            return orjson.dumps(entry, default=str).decode()
        except orjson.JSONEncodeError:  # a key that is no string: orjson's slower way, only then
            return orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS).decode()

    def utc(self, created: float) -> str:
        """`created` as formatTime writes a record made then. The date and time of day are worked
        out once a second: `strftime` on every line was a few per cent of a review's CPU in `serve`."""
        whole = int(created)
        second, text = self._second  # one read: another thread may replace it meanwhile
        if whole != second:
            text = time.strftime(self.default_time_format, self.converter(whole))
            self._second = (whole, text)
        return f"{text}.{int((created - whole) * 1000):03d}+00:00"


def setup(level: str = "info", **fields: str) -> None:
    """JSON lines on stderr from every logger. No line says which thread or process wrote it: the
    records need not look them up (the Logging HOWTO's "Optimization"; each admission writes a line)."""
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(fields))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
