"""A port of either process: its connections bounded in how long a client may take, never in number.

The port accepts its connections itself: a handshake must end within HANDSHAKE_SECONDS and the headers within
HEADER_SECONDS of it (`Guard`); none is closed for being one too many (the apiserver never retries a review).
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .. import metrics

log = logging.getLogger("webhook.listening")

HEADER_SECONDS = 10.0  # the apiserver sends a review's headers at once; its own timeout is at most 30 s
HANDSHAKE_SECONDS = 10.0  # from accept to the end of the handshake (asyncio's ssl_handshake_timeout)
END_OF_HEADERS = b"\r\n\r\n"
BACKLOG = 128  # connections accepted at a turn of the loop at most (asyncio's own bound)
# Connections the kernel holds until accepted (capped by net.core.somaxconn): a drain's burst of a few
# hundred new connections beyond 128 had SYNs dropped and sent again a second later (`TcpExtListenOverflows`).
QUEUE = 4096
ACCEPT_PAUSE = 1.0  # asyncio's own pause when accepting fails for want of descriptors or memory

# A connection whose first request follows its handshake by more than this was opened ahead and left
# idle (Go's transport pools a connection it dialed for a request that took another one freed
# meanwhile, and uses it seconds later): that request's wait begins at its first byte, not the accept.
PROMPT_SECONDS = 0.1


class Arrivals:
    """When the request each open connection carries arrived: its accept (asyncio calls the protocol
    factory there, before the handshake) when it follows the handshake at once, else (a connection
    kept or opened ahead) the request's first byte."""

    __slots__ = ("_since", "_last")

    def __init__(self) -> None:
        self._since: dict[asyncio.BaseTransport, float] = {}
        self._last = float("-inf")  # when a request was last answered

    def connected(self, transport: asyncio.BaseTransport, accepted: float) -> None:
        self._since[transport] = accepted

    def received(self, transport: asyncio.BaseTransport) -> None:
        self._since.setdefault(transport, time.monotonic())

    def arrived(self, transport: asyncio.BaseTransport | None) -> float | None:
        """The monotonic time the connection's current request arrived; None for no connection of this port."""
        return self._since.get(transport) if transport is not None else None

    def answered(self, transport: asyncio.BaseTransport | None) -> None:
        if transport is not None and self._since.pop(transport, None) is not None:
            self._last = time.monotonic()

    def busy_within(self, seconds: float) -> bool:
        """Whether a request is in flight, or one was answered less than `seconds` ago (the Events wait)."""
        return bool(self._since) or time.monotonic() - self._last < seconds


class Guard:
    """A protocol factory around aiohttp's, noting when each connection's request arrived (`arrivals`)."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], header_seconds: float = HEADER_SECONDS,
                 arrivals: Arrivals | None = None) -> None:
        self.factory, self.header_seconds = factory, header_seconds
        self.arrivals = arrivals if arrivals is not None else Arrivals()

    def __call__(self) -> asyncio.Protocol:
        return Guarded(self, self.factory())


class Guarded:
    """aiohttp's protocol for one connection, closed when the guard says so; what it does not note goes to aiohttp's."""

    def __init__(self, guard: Guard, inner: Any) -> None:
        self.accepted = time.monotonic()  # made by the factory, which the loop calls at the accept
        self.guard, self.inner = guard, inner
        self.transport: asyncio.BaseTransport | None = None
        self.made: float | None = None  # the handshake's end, until the first bytes arrive
        self.timer: asyncio.TimerHandle | None = None
        self.tail = b""  # the last bytes seen, for headers split across reads

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.made = time.monotonic()
        self.guard.arrivals.connected(transport, self.accepted)
        self.timer = asyncio.get_running_loop().call_later(self.guard.header_seconds, self._too_slow)
        self.inner.connection_made(transport)

    def _too_slow(self) -> None:
        metrics.CONNECTIONS_REFUSED.labels("headers too slow").inc()
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.made is not None:  # the connection's first bytes: idle since its handshake?
            if time.monotonic() - self.made > PROMPT_SECONDS:
                self.guard.arrivals.answered(self.transport)  # its wait begins now, not at the accept
            self.made = None
        self.guard.arrivals.received(self.transport)  # type: ignore[arg-type]
        if self.timer is not None:
            seen = self.tail + data
            if END_OF_HEADERS in seen:
                self.timer.cancel()
                self.timer = None
            else:
                self.tail = seen[-3:]
        self.inner.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.guard.arrivals.answered(self.transport)
        self.inner.connection_lost(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Port:
    """Listening sockets accepting through a `Guard` into aiohttp's runner (its public `server`): each
    time a socket is readable, its whole backlog is accepted (`Accepting`), as asyncio's selector loop
    does; uvloop's server accepts one a turn of the loop, a drain's burst late while the loop is sliced."""

    def __init__(self, runner: web.BaseRunner, accepting: list[Accepting]) -> None:
        self.runner, self.accepting = runner, accepting

    @property
    def addresses(self) -> list[Any]:
        """The bound addresses, as `web.BaseRunner.addresses` gives them."""
        return [accepting.socket.getsockname() for accepting in self.accepting]

    async def cleanup(self) -> None:
        """Stop accepting (handshakes under way dropped), then aiohttp's shutdown: requests in flight
        finish, idle connections close."""
        for accepting in self.accepting:
            accepting.close()
        for accepting in self.accepting:
            await accepting.closed()
        await self.runner.cleanup()


class Accepting:
    """One listening socket: its whole backlog accepted when it is readable, each connection handed
    to the loop (`connect_accepted_socket`, its TLS handshake bounded by `handshake_seconds`)."""

    def __init__(self, listening: socket.socket, guard: Guard, context: ssl.SSLContext | None,
                 handshake_seconds: float) -> None:
        self.socket, self.guard, self.context = listening, guard, context
        self.handshake_seconds = handshake_seconds if context else None
        self.loop = asyncio.get_running_loop()
        self.handshakes: set[asyncio.Task[Any]] = set()  # connections not handed to aiohttp yet
        self.loop.add_reader(listening.fileno(), self.accept)

    def accept(self) -> None:
        for _ in range(BACKLOG):  # bounded, as asyncio's own: other work gets the loop between two backlogs
            try:
                connection, _ = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionAbortedError:  # reset by its client before the accept: the next one
                continue
            except OSError as exc:  # out of descriptors or memory: accepting pauses, as asyncio's does
                log.error("accepting a connection failed (%s): paused for %g s", exc, ACCEPT_PAUSE)
                self.loop.remove_reader(self.socket.fileno())
                self.loop.call_later(ACCEPT_PAUSE, self._resume)
                break
            connection.setblocking(False)
            protocol = self.guard()  # made now: its accept is when the review's wait began
            handshake = self.loop.create_task(self.loop.connect_accepted_socket(
                lambda protocol=protocol: protocol, connection, ssl=self.context,
                ssl_handshake_timeout=self.handshake_seconds))
            self.handshakes.add(handshake)
            handshake.add_done_callback(self._handed)

    def _resume(self) -> None:
        if self.socket.fileno() >= 0:
            self.loop.add_reader(self.socket.fileno(), self.accept)

    def _handed(self, handshake: asyncio.Task[Any]) -> None:
        """A connection whose handshake failed, timed out or was dropped is closed by the loop; as with
        asyncio's own server, that is the client's business, logged at debug only."""
        self.handshakes.discard(handshake)
        if not handshake.cancelled() and handshake.exception() is not None:
            log.debug("a connection ended before its handshake did: %r", handshake.exception())

    def close(self) -> None:
        if self.socket.fileno() >= 0:
            self.loop.remove_reader(self.socket.fileno())
            self.socket.close()
        for handshake in self.handshakes:
            handshake.cancel()

    async def closed(self) -> None:
        if self.handshakes:
            await asyncio.gather(*self.handshakes, return_exceptions=True)


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address `host` names, as asyncio's `create_server` makes them:
    the address reusable, IPv6 sockets IPv6 only, non-blocking."""
    sockets: list[socket.socket] = []
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(found):
            listening = socket.socket(family, kind, proto)
            sockets.append(listening)
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listening.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listening.bind(address)
            listening.listen(QUEUE)
            listening.setblocking(False)
    except OSError as exc:  # in use, no such address: said with the address, not errno's numbers alone
        for listening in sockets:
            listening.close()
        reason = (exc.strerror or str(exc)).rsplit(": ", 1)[-1]
        raise OSError(f"cannot listen on {host}:{port}: {reason[:1].lower()}{reason[1:]}") from None
    return sockets


async def listen(runner: web.BaseRunner, host: str, port: int, context: ssl.SSLContext | None, *,
                 guard: Guard | None = None, handshake_seconds: float = HANDSHAKE_SECONDS) -> Port:
    """Serve `runner` (set up) on host:port through a Guard."""
    if runner.server is None:
        raise RuntimeError("the runner is not set up")
    guard = guard or Guard(runner.server)
    return Port(runner, [Accepting(listening, guard, context, handshake_seconds) for listening in bind(host, port)])


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


def bound_port(listening: Port | Any) -> int:
    """The port listened on (the first one)."""
    for address in listening.addresses:
        if isinstance(address, tuple):
            return int(address[1])
    raise RuntimeError("the server is not listening")
