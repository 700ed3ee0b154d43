"""The time an admission may take: the apiserver's ?timeout= less a safety margin."""
from __future__ import annotations

import dataclasses
import time


@dataclasses.dataclass(frozen=True)
class Deadline:
    at: float  # time.monotonic() value

    @classmethod
    def after(cls, timeout: float, margin: float) -> Deadline:
        """Leave `margin` seconds (at most a quarter of the timeout) to answer in."""
        margin = min(margin, timeout / 4)
        return cls(time.monotonic() + max(timeout - margin, 0.0))

    def remaining(self) -> float:
        return max(self.at - time.monotonic(), 0.0)
