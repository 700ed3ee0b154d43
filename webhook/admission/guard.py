"""The admission port's connections, bounded in how long a client may take, never in number.

Any pod in the cluster can reach the port (the NetworkPolicy admits every pod; mutual TLS is
optional), and aiohttp does not bound the time a client takes to send a request's headers: held
connections used file descriptors and, with unfinished bodies, memory. Here, the port's
listening sockets are ours (`Port`: aiohttp's runner serves, drains and stops the connections),
and every connection goes through `Guard`: its TLS handshake must end within HANDSHAKE_SECONDS of
its accept, and one that has not sent a whole request's headers within HEADER_SECONDS of its
handshake is closed. None is closed for being one too many: kube-apiserver gives each review in
flight a connection of its own and does not retry a call that fails, so a closed connection is a pod created without our
decision. Memory is bounded by the bodies held instead (budget.py: beyond the budget a body
waits, unread); a body must arrive within the request's deadline (server.py: 408), and an idle
keep-alive connection closes after aiohttp's keepalive timeout.

Handshakes begin a few per turn of the event loop (`Listener`). A server-side handshake is about
half a millisecond of CPU, and the loop runs every connection that became readable in one turn: a
drain's burst of a hundred new connections, each handshake begun at accept, held the loop for tens
of milliseconds at a stretch, and a review on a connection already open (the apiserver keeps idle
ones) waited behind all of them. Paced, a turn begins at most HANDSHAKES_PER_TURN of those whose
ClientHello has arrived; the others wait in the order they came, their ClientHello unread in the
socket. With 0 per turn, each handshake begins at its accept (asyncio's own TLS server).
"""
from __future__ import annotations

import asyncio
import collections
import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .. import metrics

log = logging.getLogger("webhook.server")

HEADER_SECONDS = 10.0  # the apiserver sends a review's headers at once; its own timeout is at most 30 s
HANDSHAKE_SECONDS = 10.0  # from accept to the end of the handshake, the wait for its turn included
HANDSHAKES_PER_TURN = 1  # half a millisecond of the loop, a quarter of a slice of a share-manager's rule (lane.py)
END_OF_HEADERS = b"\r\n\r\n"
# Out of file descriptors or memory: accepting again at once would spin; asyncio's server waits a second.
ACCEPT_PAUSE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
ACCEPT_PAUSE = 1.0
BACKLOG = 128  # aiohttp's sites' default


class Guard:
    """A protocol factory around aiohttp's, counting the connections open."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], header_seconds: float = HEADER_SECONDS) -> None:
        self.factory, self.header_seconds = factory, header_seconds
        self.open = 0

    def __call__(self) -> asyncio.Protocol:
        return Guarded(self, self.factory())


class Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, closed when the guard says so."""

    def __init__(self, guard: Guard, inner: Any) -> None:
        self.guard, self.inner = guard, inner
        self.transport: asyncio.BaseTransport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.tail = b""  # the last bytes seen, for headers split across reads

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.guard.open += 1
        self.timer = asyncio.get_running_loop().call_later(self.guard.header_seconds, self._too_slow)
        self.inner.connection_made(transport)

    def _too_slow(self) -> None:
        metrics.CONNECTIONS_REFUSED.labels("headers too slow").inc()
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
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
        self.guard.open -= 1
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class Listener:
    """The listening sockets of a TLS port, in the place of an `asyncio.Server` (`close`, `sockets`).

    A connection is accepted as it comes and waits, unread, until its ClientHello has arrived; of
    those, at most `per_turn` per turn of the loop are handed to it (`connect_accepted_socket`,
    which makes the handshake), first come first served. Pacing the ClientHellos, not the accepts:
    a burst of clients sends them together some milliseconds after connecting, and handshakes
    begun at accept would all meet their data in one turn."""

    def __init__(self, sockets: list[socket.socket], factory: Callable[[], asyncio.Protocol],
                 context: ssl.SSLContext, *, per_turn: int = HANDSHAKES_PER_TURN,
                 seconds: float = HANDSHAKE_SECONDS) -> None:
        self._sockets, self.factory, self.context = sockets, factory, context
        self.per_turn, self.seconds = per_turn, seconds
        self.unready: dict[socket.socket, tuple[float, asyncio.TimerHandle]] = {}  # accepted, no ClientHello yet
        self.ready: collections.deque[tuple[socket.socket, float]] = collections.deque()  # (socket, accepted at)
        self.turn: asyncio.Handle | None = None
        self.handshaking: set[asyncio.Task[Any]] = set()  # referenced until done (asyncio keeps weak references)
        self.loop = asyncio.get_running_loop()
        self.closed = False
        for listening in sockets:
            self.loop.add_reader(listening.fileno(), self._accept, listening)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    @property
    def waiting(self) -> int:
        """Connections accepted whose handshake has not begun."""
        return len(self.unready) + len(self.ready)

    def _accept(self, listening: socket.socket) -> None:
        while True:
            try:
                accepted, _ = listening.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # none left (or one that went before it was accepted)
            except OSError as exc:
                if exc.errno not in ACCEPT_PAUSE_ERRNOS:
                    raise
                log.error("cannot accept a connection, pausing %.0f s", ACCEPT_PAUSE,
                          extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}})
                self.loop.remove_reader(listening.fileno())
                self.loop.call_later(ACCEPT_PAUSE, self._resume, listening)
                return
            accepted.setblocking(False)
            self.unready[accepted] = (time.monotonic(), self.loop.call_later(self.seconds, self._expire, accepted))
            self.loop.add_reader(accepted.fileno(), self._readable, accepted)
            metrics.HANDSHAKES_WAITING.inc()

    def _resume(self, listening: socket.socket) -> None:
        if not self.closed:
            self.loop.add_reader(listening.fileno(), self._accept, listening)

    def _readable(self, accepted: socket.socket) -> None:
        """Its ClientHello (or its end) has arrived: in line for a turn."""
        self.loop.remove_reader(accepted.fileno())
        since, timer = self.unready.pop(accepted)
        timer.cancel()
        self.ready.append((accepted, since))
        if self.turn is None:
            self.turn = self.loop.call_soon(self._begin)

    def _expire(self, accepted: socket.socket) -> None:
        """No ClientHello within the handshake's time, as asyncio's own handshake timeout closes it."""
        if self.unready.pop(accepted, None) is not None:
            self.loop.remove_reader(accepted.fileno())
            metrics.HANDSHAKES_WAITING.dec()
            metrics.CONNECTIONS_REFUSED.labels("handshake too slow").inc()
            accepted.close()

    def _begin(self) -> None:
        """This turn's handshakes; the rest wait for the next turn."""
        self.turn = None
        for _ in range(min(self.per_turn, len(self.ready))):
            accepted, since = self.ready.popleft()
            metrics.HANDSHAKES_WAITING.dec()
            left = self.seconds - (time.monotonic() - since)
            if left <= 0:
                metrics.CONNECTIONS_REFUSED.labels("handshake too slow").inc()
                accepted.close()
                continue
            task = self.loop.create_task(self._handshake(accepted, left))
            self.handshaking.add(task)
            task.add_done_callback(self.handshaking.discard)
        if self.ready:
            self.turn = self.loop.call_soon(self._begin)

    async def _handshake(self, accepted: socket.socket, seconds: float) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, accepted, ssl=self.context,
                                                    ssl_handshake_timeout=seconds)
        except (OSError, ssl.SSLError, EOFError):
            accepted.close()  # failed or too slow: said in asyncio's debug log only, as the loop's own server does

    def close(self) -> None:
        """Stop listening; the connections waiting for their handshake are closed (open ones carry on)."""
        if self.closed:
            return
        self.closed = True
        if self.turn is not None:
            self.turn.cancel()
            self.turn = None
        for listening in self._sockets:
            self.loop.remove_reader(listening.fileno())
            listening.close()
        for accepted, (_, timer) in self.unready.items():
            timer.cancel()
            self.loop.remove_reader(accepted.fileno())
            accepted.close()
        metrics.HANDSHAKES_WAITING.dec(self.waiting)
        self.unready.clear()
        while self.ready:
            self.ready.popleft()[0].close()


def listening_sockets(host: str, port: int, backlog: int) -> list[socket.socket]:
    """One listening socket per address of `host`, as `loop.create_server` binds them (IPv6 ones
    IPv6 only; with port 0 each picks its own)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    made: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):  # the same address once
            listening = socket.socket(family, kind, proto)
            made.append(listening)
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listening.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listening.bind(address)
            listening.listen(backlog)
            listening.setblocking(False)
    except OSError:
        for listening in made:
            listening.close()
        raise
    return made


class Port:
    """A port being served: its listening sockets (an `asyncio.Server`, or a `Listener` with TLS
    handshakes paced), accepting through a `Guard` into the protocol of aiohttp's runner (its public
    `server`), which serves the connections and, on `cleanup`, finishes the requests in flight."""

    def __init__(self, runner: web.BaseRunner, listening: asyncio.AbstractServer | Listener) -> None:
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
                 guard: Guard | None = None, per_turn: int = HANDSHAKES_PER_TURN,
                 handshake_seconds: float = HANDSHAKE_SECONDS, backlog: int = BACKLOG) -> Port:
    """Serve `runner` (set up) on host:port through a Guard. With TLS, `per_turn` handshakes begin
    a turn (`Listener`); 0 begins each at its accept, as asyncio's own server does."""
    if runner.server is None:
        raise RuntimeError("the runner is not set up")
    guard = guard or Guard(runner.server)
    loop = asyncio.get_running_loop()
    listening: asyncio.AbstractServer | Listener
    if context is None or per_turn <= 0:
        listening = await loop.create_server(guard, host, port, ssl=context, backlog=backlog, reuse_address=True,
                                             ssl_handshake_timeout=handshake_seconds if context else None)
    else:
        listening = Listener(listening_sockets(host, port, backlog), guard, context, per_turn=per_turn,
                             seconds=handshake_seconds)
    return Port(runner, listening)
