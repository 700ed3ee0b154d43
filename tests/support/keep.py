"""`python -m webhook keep` in a process of its own, as deployed: its operations port picked by
the process (0) and read from its `keeping` log line; its log read all along."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from tests.support.kube import sample, scrape


class Keeping:
    def __init__(self, process: Any, entry: dict[str, Any], lines: list[dict[str, Any]]):
        self.process = process
        self.ops = f"http://127.0.0.1:{entry['metrics_port']}"
        self.lines = lines
        self._reader: Any = None

    @classmethod
    async def start(cls, *args: str, env: dict[str, str] | None = None) -> "Keeping":
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "webhook", "keep", "--metrics-host", "127.0.0.1", "--metrics-port", "0", *args,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, **(env or {})})
        lines: list[dict[str, Any]] = []
        while True:
            raw = await asyncio.wait_for(process.stderr.readline(), 30)
            assert raw, f"keep exited before it ran: {lines}"
            lines.append(json.loads(raw))
            if lines[-1]["msg"] == "keeping":
                break
        keeping = cls(process, lines[-1], lines)
        keeping._reader = asyncio.create_task(keeping._read())
        return keeping

    async def _read(self) -> None:
        async for raw in self.process.stderr:
            if raw.strip():
                self.lines.append(json.loads(raw))  # every line is JSON, or this fails the test

    def said(self, msg: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["msg"] == msg]

    async def metrics(self) -> str:
        return (await scrape(f"{self.ops}/metrics"))[1]

    async def metrics_with(self, name: str, **labels: str) -> str | None:
        """The /metrics page once it has this sample."""
        text = await self.metrics()
        return text if sample(text, name, **labels) is not None else None

    async def stop(self, timeout: float = 20) -> int:
        """SIGTERM, then wait for the exit code."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(timeout):
                code = await self.process.wait()
                await self._reader
        finally:
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()
        return code
