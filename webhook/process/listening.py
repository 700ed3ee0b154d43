"""A port of either process: its connections bounded in how long a client may take, never in number.

Any pod can reach the admission port, and aiohttp does not bound the time a client takes to send its
headers. So the port is asyncio's own server (`Port`; aiohttp's runner serves, drains and stops the
connections): a TLS handshake must end within HANDSHAKE_SECONDS of the accept, and the headers within
HEADER_SECONDS of the handshake (`Guard`). None is closed for being one too many: kube-apiserver gives
each review in flight a connection of its own and does not retry, so a closed connection is a pod
created without our decision; memory is bounded by the bodies held instead (admission/budget.py).
The Guard also notes when each request arrived (`Arrivals`): what the apiserver waits for starts there.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .. import metrics

HEADER_SECONDS = 10.0  # the apiserver sends a review's headers at once; its own timeout is at most 30 s
HANDSHAKE_SECONDS = 10.0  # from accept to the end of the handshake (asyncio's ssl_handshake_timeout)
END_OF_HEADERS = b"\r\n\r\n"
BACKLOG = 128  # aiohttp's sites' default


class Arrivals:
    """When the request each open connection carries arrived: its accept (asyncio calls the protocol
    factory there, before the handshake), or on a kept connection the next request's first byte."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since: dict[asyncio.BaseTransport, float] = {}

    def connected(self, transport: asyncio.BaseTransport, accepted: float) -> None:
        self._since[transport] = accepted

    def received(self, transport: asyncio.BaseTransport) -> None:
        if transport not in self._since:
            self._since[transport] = time.monotonic()

    def arrived(self, transport: asyncio.BaseTransport | None) -> float | None:
        """The monotonic time the connection's current request arrived; None for no connection of this port."""
        return self._since.get(transport) if transport is not None else None

    def answered(self, transport: asyncio.BaseTransport | None) -> None:
        if transport is not None:
            self._since.pop(transport, None)

    def __len__(self) -> int:
        return len(self._since)


class Guard:
    """A protocol factory around aiohttp's, noting when each connection's request arrived (`arrivals`)."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], header_seconds: float = HEADER_SECONDS,
                 arrivals: Arrivals | None = None) -> None:
        self.factory, self.header_seconds = factory, header_seconds
        self.arrivals = arrivals if arrivals is not None else Arrivals()

    def __call__(self) -> asyncio.Protocol:
        return Guarded(self, self.factory())


class Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, closed when the guard says so."""

    def __init__(self, guard: Guard, inner: Any) -> None:
        self.accepted = time.monotonic()  # made by the factory, which the loop calls at the accept
        self.guard, self.inner = guard, inner
        self.transport: asyncio.BaseTransport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.tail = b""  # the last bytes seen, for headers split across reads

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.guard.arrivals.connected(transport, self.accepted)
        self.timer = asyncio.get_running_loop().call_later(self.guard.header_seconds, self._too_slow)
        self.inner.connection_made(transport)

    def _too_slow(self) -> None:
        metrics.CONNECTIONS_REFUSED.labels("headers too slow").inc()
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.guard.arrivals.received(self.transport)  # type: ignore[arg-type]
        if self.timer is not None:
            seen = self.tail + data
            if END_OF_HEADERS in seen:
                self.timer.cancel()
                self.timer = None
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.guard.arrivals.answered(self.transport)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class Port:
    """asyncio's server accepting through a `Guard` into aiohttp's runner (its public `server`)."""

    def __init__(self, runner: web.BaseRunner, listening: asyncio.AbstractServer) -> None:
        self.runner, self.listening = runner, listening

    @property
    def addresses(self) -> list[Any]:
        """The bound addresses, as `web.BaseRunner.addresses` gives them."""
        return [listening.getsockname() for listening in self.listening.sockets]

    async def cleanup(self) -> None:
        """Stop accepting, then aiohttp's shutdown: requests in flight finish, idle connections close."""
        self.listening.close()
        await self.runner.cleanup()


async def listen(runner: web.BaseRunner, host: str, port: int, context: ssl.SSLContext | None, *,
                 guard: Guard | None = None, handshake_seconds: float = HANDSHAKE_SECONDS) -> Port:
    """Serve `runner` (set up) on host:port through a Guard."""
    if runner.server is None:
        raise RuntimeError("the runner is not set up")
    try:
        listening = await asyncio.get_running_loop().create_server(
            guard or Guard(runner.server), host, port, ssl=context, backlog=BACKLOG, reuse_address=True,
            ssl_handshake_timeout=handshake_seconds if context else None)
    except OSError as exc:  # in use, no such address: said with the address, not errno's numbers alone
        raise OSError(f"cannot listen on {host}:{port}: {(exc.strerror or str(exc)).rsplit(': ', 1)[-1]}") from None
    return Port(runner, listening)


# How long a connection whose body was answered unread (413, 503) may go on sending it, read and
# dropped, before it is closed: aiohttp's 10 s would hold the connection for a client that never stops.
LINGER = 2.0


async def start(handler: web.Application | Callable[[web.BaseRequest], Any], host: str, port: int,
                context: ssl.SSLContext | None, *, shutdown_timeout: float = 30.0,
                arrivals: Arrivals | None = None) -> Port:
    """Listen with an Application (an operations port) or a low-level handler on aiohttp's `web.Server`
    (the admission port); port 0 picks a free port."""
    options = {"access_log": None, "lingering_time": LINGER}
    runner: web.BaseRunner
    if isinstance(handler, web.Application):
        runner = web.AppRunner(handler, shutdown_timeout=shutdown_timeout, **options)
    else:
        runner = web.ServerRunner(web.Server(handler, **options), shutdown_timeout=shutdown_timeout)
    await runner.setup()
    guard = Guard(runner.server, arrivals=arrivals)  # type: ignore[arg-type]
    return await listen(runner, host, port, context, guard=guard)  # bounded connections


def bound_port(listening: Port) -> int:
    for address in listening.addresses:
        if isinstance(address, tuple):
            return int(address[1])
    raise RuntimeError("the server is not listening")
