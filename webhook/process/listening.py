"""A port of either process: its connections bounded in how long a client may take (a handshake within
HANDSHAKE_SECONDS of its accept, the headers within HEADER_SECONDS of it: `Guarded`), never in number (the
apiserver never retries a review)."""
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
    """When the request each open connection carries arrived: its accept (before the handshake) when it follows the
    handshake at once, else (a connection kept or opened ahead) the request's first byte."""

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


class Guarded:
    """aiohttp's protocol for one connection, closed when its headers are too slow, noting its request's arrival."""

    def __init__(self, port: Port, inner: Any) -> None:
        self.accepted = time.monotonic()  # made at the accept
        self.port, self.inner = port, inner
        self.transport: asyncio.BaseTransport | None = None
        self.made: float | None = None  # the handshake's end, until the first bytes arrive
        self.timer: asyncio.TimerHandle | None = None
        self.tail = b""  # the last bytes seen, for headers split across reads

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.made = time.monotonic()
        self.port.arrivals.connected(transport, self.accepted)
        self.timer = asyncio.get_running_loop().call_later(HEADER_SECONDS, self._too_slow)
        self.inner.connection_made(transport)

    def _too_slow(self) -> None:
        metrics.CONNECTIONS_REFUSED.labels("headers too slow").inc()
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.made is not None:  # the connection's first bytes: idle since its handshake?
            if time.monotonic() - self.made > PROMPT_SECONDS:
                self.port.arrivals.answered(self.transport)  # its wait begins now, not at the accept
            self.made = None
        self.port.arrivals.received(self.transport)  # type: ignore[arg-type]
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
        self.port.arrivals.answered(self.transport)
        self.inner.connection_lost(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Port:
    """Listening sockets accepting into aiohttp's runner: each time a socket is readable, its whole backlog, as
    asyncio's selector loop does (uvloop's server accepts one a turn of the loop, a drain's burst late while the
    loop is sliced), each connection `Guarded` and handed to the loop, its TLS handshake bounded in time."""

    def __init__(self, runner: web.BaseRunner, sockets: list[socket.socket], context: ssl.SSLContext | None,
                 arrivals: Arrivals | None) -> None:
        self.runner, self.sockets, self.context = runner, sockets, context
        self.arrivals = arrivals if arrivals is not None else Arrivals()
        self.loop = asyncio.get_running_loop()
        self.handshakes: set[asyncio.Task[Any]] = set()  # connections not handed to aiohttp yet
        for listening in sockets:
            self.loop.add_reader(listening.fileno(), self.accept, listening)

    @property
    def addresses(self) -> list[Any]:
        return [listening.getsockname() for listening in self.sockets]

    def accept(self, listening: socket.socket) -> None:
        for _ in range(BACKLOG):  # bounded, as asyncio's own: other work gets the loop between two backlogs
            try:
                connection, _ = listening.accept()
            except (BlockingIOError, InterruptedError):
                break
            except ConnectionAbortedError:  # reset by its client before the accept: the next one
                continue
            except OSError as exc:  # out of descriptors or memory: accepting pauses, as asyncio's does
                log.error("accepting a connection failed (%s): paused for %g s", exc, ACCEPT_PAUSE)
                self.loop.remove_reader(listening.fileno())
                self.loop.call_later(ACCEPT_PAUSE, self._resume, listening)
                break
            connection.setblocking(False)
            protocol = Guarded(self, self.runner.server())  # type: ignore[misc]  # made now: the review's wait began
            handshake = self.loop.create_task(self.loop.connect_accepted_socket(
                lambda protocol=protocol: protocol, connection, ssl=self.context,
                ssl_handshake_timeout=HANDSHAKE_SECONDS if self.context else None))
            self.handshakes.add(handshake)
            handshake.add_done_callback(self._handed)

    def _resume(self, listening: socket.socket) -> None:
        if listening.fileno() >= 0:
            self.loop.add_reader(listening.fileno(), self.accept, listening)

    def _handed(self, handshake: asyncio.Task[Any]) -> None:
        """A connection whose handshake failed or was dropped: closed by the loop, the client's business (debug)."""
        self.handshakes.discard(handshake)
        if not handshake.cancelled() and handshake.exception() is not None:
            log.debug("a connection ended before its handshake did: %r", handshake.exception())

    async def cleanup(self) -> None:
        """Stop accepting (handshakes under way dropped), then aiohttp's shutdown (requests in flight finish)."""
        for listening in self.sockets:
            if listening.fileno() >= 0:
                self.loop.remove_reader(listening.fileno())
                listening.close()
        for handshake in self.handshakes:
            handshake.cancel()
        if self.handshakes:
            await asyncio.gather(*self.handshakes, return_exceptions=True)
        await self.runner.cleanup()


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address `host` names, made as asyncio's `create_server` makes them."""
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


# How long a connection whose body was answered unread (413, 503) may go on sending it, read and
# dropped, before it is closed: aiohttp's 10 s would hold the connection for a client that never stops.
LINGER = 2.0


async def start(handler: web.Application | Callable[[web.BaseRequest], Any], host: str, port: int,
                context: ssl.SSLContext | None, *, shutdown_timeout: float = 30.0, arrivals: Arrivals | None = None) -> Port:
    """An Application (an operations port) or a low-level handler (the admission port) listening; port 0: any."""
    options = {"access_log": None, "lingering_time": LINGER}
    runner: web.BaseRunner
    if isinstance(handler, web.Application):
        runner = web.AppRunner(handler, shutdown_timeout=shutdown_timeout, **options)
    else:
        runner = web.ServerRunner(web.Server(handler, **options), shutdown_timeout=shutdown_timeout)
    await runner.setup()
    return Port(runner, bind(host, port), context, arrivals)


def bound_port(listening: Port | Any) -> int:
    """The port listened on (the first one)."""
    return int(listening.addresses[0][1])
