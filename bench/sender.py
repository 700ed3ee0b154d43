"""The storm's sender: reviews sent to `serve` over HTTP/1.1 as kube-apiserver sends them.

The apiserver's webhook client holds one connection per review in flight (HTTP/1.1, one request
at a time on each) and keeps some of them idle between calls (25 to `serve`, counted in
`/proc/net/tcp` beside a real kube-apiserver between bursts: docs/performance.md). So in a burst
the first reviews go out at once on connections already open, and every review beyond those opens
a new TLS connection: a drain's burst of 130 is 25 reviews on open connections and 105 TLS
handshakes. `Connections` does the same: a review takes the idle connection used last (as Go's
transport does) or opens one, and gives it back when answered, kept while fewer than
`idle` are idle, closed otherwise. `idle=0` sends every review on a new connection of its own.

`in_flight` puts a client's pool in front: at most that many reviews sent at once, the others
queued in the order sent (and timed from then), as a client with a pool of so many connections
queues its requests (aiohttp's default pool holds 100). The apiserver has no such bound; a
benchmark whose pods are all created through one such client has, and its last creates then wait
for its first ones.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from urllib.parse import urlsplit

IDLE = 25  # the idle connections kube-apiserver was seen to keep to the webhook between bursts
Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Connections:
    """The HTTPS connections to one server, opened per review in flight, `idle` kept between reviews."""

    def __init__(self, url: str, context: ssl.SSLContext, idle: int = IDLE, in_flight: int = 0) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.context, self.idle = parts.hostname or "", parts.port or 443, context, idle
        self.pool = asyncio.Semaphore(in_flight) if in_flight else None  # a client's pool in front (0: none)
        self.free: list[Stream] = []
        self.opened = 0  # TLS connections opened, for the report

    async def take(self) -> Stream:
        if self.free:
            return self.free.pop()
        self.opened += 1
        return await asyncio.open_connection(self.host, self.port, ssl=self.context)

    def give_back(self, stream: Stream) -> None:
        if len(self.free) < self.idle and not stream[0].at_eof():
            self.free.append(stream)
        else:
            stream[1].close()

    async def post(self, path: str, body: bytes) -> bytes:
        """POST `body` on a connection of its own, once the pool in front (if any) lets it; the
        answer's body (200 only)."""
        if self.pool is None:
            return await self._post(path, body)
        async with self.pool:
            return await self._post(path, body)

    async def _post(self, path: str, body: bytes) -> bytes:
        reader, writer = stream = await self.take()
        try:
            writer.write(f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = dict(line.split(":", 1) for line in head[1:] if ":" in line)
            length = int(next(v for k, v in headers.items() if k.strip().lower() == "content-length"))
            answer = await reader.readexactly(length)
        except BaseException:
            writer.close()
            raise
        if head[0].split()[1] != "200":
            writer.close()
            raise RuntimeError(f"{path} answered {head[0]!r}: {answer[:200]!r}")
        self.give_back(stream)
        return answer

    async def close(self) -> None:
        for _, writer in self.free:
            writer.close()
        self.free.clear()


async def timed(connections: Connections, path: str, body: bytes) -> tuple[float, bytes]:
    """(seconds, answer) of one review as its sender sees it: a new connection's handshake and
    any wait in the server included."""
    started = time.monotonic()
    answer = await connections.post(path, body)
    return time.monotonic() - started, answer
