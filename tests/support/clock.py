"""A clock a test moves forward: what the keeper takes for now, starting at the real now (the
emulator stamps objects with the real time)."""
from __future__ import annotations

import datetime


class Clock:
    def __init__(self, start: datetime.datetime | None = None):
        self.now = start or datetime.datetime.now(datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> datetime.datetime:
        self.now += datetime.timedelta(seconds=seconds)
        return self.now
