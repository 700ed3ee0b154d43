"""`python -m webhook keep` in a process of its own, as deployed: its operations port picked by
the process (0) and read from its `keeping` log line; its log read all along."""
from __future__ import annotations

from typing import Any

from tests.support.kube import LoggedProcess, sample, scrape


class Keeping(LoggedProcess):
    def __init__(self, process: Any, entry: dict[str, Any], lines: list[dict[str, Any]]):
        super().__init__(process, lines)
        self.ops = f"http://127.0.0.1:{entry['metrics_port']}"

    @classmethod
    async def start(cls, *args: str, env: dict[str, str] | None = None) -> "Keeping":
        process, lines = await cls.launch(["keep", "--metrics-host", "127.0.0.1", "--metrics-port", "0", *args],
                                          "keeping", env)
        keeping = cls(process, lines[-1], lines)
        keeping.follow()
        return keeping

    async def metrics(self) -> str:
        return (await scrape(f"{self.ops}/metrics"))[1]

    async def metrics_with(self, name: str, **labels: str) -> str | None:
        """The /metrics page once it has this sample."""
        text = await self.metrics()
        return text if sample(text, name, **labels) is not None else None
