"""Logs as one JSON object per line, so admins can grep and ship them as they are."""
from __future__ import annotations

import asyncio
import datetime
import logging
import math
import sys
import time
from typing import Any

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
    if second != whole:
        text = datetime.datetime.fromtimestamp(int(whole), UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _last_second = (whole, text)
    return text + _MILLIS[micros // 1000]


_last_second: tuple[float | None, str] = (None, "")  # the last whole second formatted, and its text
_MILLIS = [f".{ms:03d}+00:00" for ms in range(1000)]  # each millisecond's end of the text


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


class JsonLines(logging.StreamHandler):
    """JSON lines to a stream (stderr). Admission lines (`queue`) go out together, at most
    FLUSH_AFTER seconds after the first of them, or at once past FLUSH_LINES: under a burst
    of VM starts that is one write for many admissions, not a system call each (the write,
    not the line, is most of what logging an admission costs inside the server). Any other
    line, a flush (logging.shutdown flushes at exit), or a line queued outside a running
    loop writes the queued ones first, so lines keep their order."""

    FLUSH_AFTER = 0.05  # seconds
    FLUSH_LINES = 256

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self.setFormatter(JsonFormatter())
        self._queued: list[str] = []

    def queue(self, text: str) -> None:
        with self.lock:
            self._queued.append(text)
            queued = len(self._queued)
        if queued == 1:
            try:
                asyncio.get_running_loop().call_later(self.FLUSH_AFTER, self.flush)
            except RuntimeError:  # no loop: nothing to wait with
                self.flush()
        elif queued >= self.FLUSH_LINES:
            self.flush()

    def flush(self) -> None:
        with self.lock:
            if self._queued:
                text = "".join(self._queued)
                self._queued.clear()
                self.stream.write(text)
            stream = self.stream
            # StreamHandler.flush, under the lock held; a line-buffered stream (stderr) has written it all.
            if stream and not getattr(stream, "line_buffering", False) and hasattr(stream, "flush"):
                stream.flush()

    def emit(self, record: logging.LogRecord) -> None:
        if self._queued:
            self.flush()
        super().emit(record)


def _dumps_line(entry: dict) -> str:
    """JsonFormatter's JSON, and a newline. Keys that are all strings (always, in the admission
    line) need no OPT_NON_STR_KEYS, which would take orjson's slower path: same bytes."""
    try:
        return orjson.dumps(entry, default=str, option=orjson.OPT_APPEND_NEWLINE).decode()
    except TypeError:  # a key that is no string
        return orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE).decode()


def line(msg: str, fields: dict, logger: logging.Logger, created: float | None = None) -> None:
    """One info line, without the cost of a LogRecord (it runs on every VM start): queued on
    JsonLines handlers, as a record to any other. The same line JsonFormatter writes for a
    record of these fields (tests/test_logs.py)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    handlers = logging.root.handlers
    if not handlers:
        return
    created = time.time() if created is None else created
    text = None
    for handler in handlers:
        if type(handler) is JsonLines and type(handler.formatter) is JsonFormatter:
            if text is None:
                entry = {"time": timestamp(created), "level": "info", "logger": logger.name, "msg": msg}
                entry.update(fields)
                text = _dumps_line(entry)
            handler.queue(text)
        else:
            record = logger.makeRecord(logger.name, logging.INFO, "", 0, msg, (), None, extra={"fields": fields})
            record.created = created
            handler.handle(record)


def flush() -> None:
    """Write what the handlers hold (queued admission lines) now."""
    for handler in logging.getLogger().handlers:
        handler.flush()


def setup(level: str = "info") -> None:
    root = logging.getLogger()
    root.handlers[:] = [JsonLines(sys.stderr)]
    root.setLevel(level.upper())
