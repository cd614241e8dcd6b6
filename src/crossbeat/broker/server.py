"""The asyncio TCP server: framing, per-connection request pipelines, and `run_broker`.

Per connection, requests are read and decoded one after another and each is handed to its
handler as a task, so that pipelined requests (librdkafka keeps up to 5 produce requests in
flight) share group commits; responses are written strictly in request order. Handlers
start in arrival order and make their state changes before their first await, so the order
of effects is the order of requests (a produce's appends are queued in that order).

Memory per connection is bounded: at most `max_in_flight_per_connection` requests and
`max_in_flight_bytes_per_connection` bytes of them are read ahead of their responses (a
request is always read when nothing else is in flight, so a frame up to `max_frame_bytes`
still goes through). Without the byte bound, 64 pipelined frames of 100 MiB, 6.4 GiB, could
sit decoded on one connection; Kafka reads one request per connection at a time.

A connection is closed once it has been idle `connections_max_idle_ms` (Kafka's
connections.max.idle.ms, 10 minutes): no request of it in flight (a long-polling Fetch
is in flight until answered) and nothing received or sent for that long. This includes a
client that sent part of a frame and then nothing more, which would otherwise hold its
socket and buffers forever; a frame arriving slowly is not idle while its bytes come.

Bad input never raises out of here: a frame whose size prefix is not positive or exceeds
`max_frame_bytes`, a frame that does not decode, or an unknown API key or version is logged
and the connection is closed after the responses to the requests before it (nothing of the
bad request is applied). An ApiVersions request newer than ours is answered in the v0
format with UNSUPPORTED_VERSION, as KIP-511 prescribes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import Any

from crossbeat.broker.broker import Broker
from crossbeat.broker.codec import (
    API_VERSIONS_KEY,
    Request,
    UnsupportedVersion,
    decode_request,
    encode_response,
    frame_size,
    unsupported_api_versions,
)
from crossbeat.broker.errors import ProtocolError
from crossbeat.broker.handlers import HANDLERS
from crossbeat.broker.handlers.context import Context
from crossbeat.broker.settings import BrokerSettings, parse_hostport

log = logging.getLogger(__name__)

# Requests whose handler must run to the end even if the client goes away: they write
# durable state, and interrupting them half way would leave bookkeeping inconsistent.
_RUN_TO_COMPLETION = frozenset({0, 8, 19, 20, 22, 42})


class _Close:
    """Sentinel result: close the connection after the responses before this one."""


CLOSE = _Close()
Result = bytes | bytearray | None | _Close


class Connection:
    """One client connection: a reader loop, handler tasks, and an in-order writer."""

    def __init__(self, broker: Broker, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self._broker = broker
        self._reader = reader
        self._writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._host = peer[0] if isinstance(peer, tuple) else ""
        # (response, size of its request) in request order; None ends the writer
        self._queue: asyncio.Queue[tuple[asyncio.Future[Result], int] | None] = asyncio.Queue()
        self._slots = asyncio.Semaphore(broker.settings.max_in_flight_per_connection)
        self._bytes_in_flight = 0
        self._bytes_freed = asyncio.Event()
        self._tasks: dict[asyncio.Future[Result], int] = {}
        self._loop = asyncio.get_running_loop()
        # loop time of the last bytes received or response written
        self._last_activity = self._loop.time()
        # what is being received, for the log: (what, bytes of it received, its size)
        self._receiving: tuple[str, int, int] | None = None
        idle_ms = broker.settings.connections_max_idle_ms
        self._max_idle = idle_ms / 1000
        self._idle_timer: asyncio.TimerHandle | None = None
        if idle_ms >= 0:
            self._idle_timer = self._loop.call_at(self._last_activity + self._max_idle,
                                                  self._check_idle)

    async def serve(self) -> None:
        """Serve until the client closes, sends something unanswerable, or we are cancelled."""
        read_task = asyncio.create_task(self._read_side(), name=f"kafka-reader-{self.peer}")
        try:
            await self._write_loop()
        except ConnectionError:
            pass
        except Exception:  # a bug must cost one connection, never the server
            log.exception("connection %s: unexpected error; closing", self.peer)
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            read_task.cancel()
            self._abandon()
            self._writer.close()
            with contextlib.suppress(BaseException):
                await read_task
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()

    async def _read_side(self) -> None:
        try:
            await self._read_loop()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.exception("connection %s: unexpected error reading; closing", self.peer)
        finally:
            self._queue.put_nowait(None)

    def _check_idle(self) -> None:
        """The idle timer: close the connection if it has been idle `connections_max_idle_ms`
        (no request in flight, nothing received or sent), else look again when it could be.

        One timer per connection, moved only when it fires: activity itself just stamps
        `_last_activity`, which keeps the cost per request to a float assignment."""
        now = self._loop.time()
        if self._bytes_in_flight:  # a request being answered (a long poll, say): not idle
            deadline = now + self._max_idle
        else:
            deadline = self._last_activity + self._max_idle
            if now >= deadline:
                self._idle_timer = None
                idle_ms = (now - self._last_activity) * 1000
                what, got, size = self._receiving or ("", 0, 0)
                if what == "frame" or got:
                    log.warning("connection %s: idle %d ms inside a %s (%d of %d bytes); "
                                "closing", self.peer, idle_ms, what, got, size)
                else:
                    log.debug("connection %s: idle %d ms; closing", self.peer, idle_ms)
                # the reader sees the end of the stream; nothing is in flight to answer
                self._writer.close()
                return
        self._idle_timer = self._loop.call_at(deadline, self._check_idle)

    async def _receive(self, n: int, what: str) -> bytes:
        """Exactly `n` bytes (of `what`, for the log); raises IncompleteReadError at the end
        of the stream.

        Read as they come rather than with readexactly(), so that every piece of a frame
        that arrives slowly counts as activity (`_check_idle`)."""
        reader = self._reader
        self._receiving = (what, 0, n)
        chunk = await reader.read(n)
        self._last_activity = self._loop.time()
        parts = [chunk]
        got = len(chunk)
        while chunk and got < n:
            self._receiving = (what, got, n)
            chunk = await reader.read(n - got)
            self._last_activity = self._loop.time()
            parts.append(chunk)
            got += len(chunk)
        self._receiving = None
        data = chunk if len(parts) == 1 else b"".join(parts)
        if got < n:
            raise asyncio.IncompleteReadError(data, n)
        return data

    async def _read_loop(self) -> None:
        max_frame = self._broker.settings.max_frame_bytes
        while True:
            try:
                prefix = await self._receive(4, "frame size prefix")
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    log.warning("connection %s: closed inside a frame size prefix", self.peer)
                return
            size = frame_size(prefix)
            if size <= 0 or size > max_frame:
                log.warning("connection %s: frame size %d outside 1..%d; closing",
                            self.peer, size, max_frame)
                return
            budget = self._broker.settings.max_in_flight_bytes_per_connection
            while self._bytes_in_flight and self._bytes_in_flight + size > budget:
                self._bytes_freed.clear()
                await self._bytes_freed.wait()
            frame = await self._receive(size, "frame")
            self._bytes_in_flight += size
            try:
                request = decode_request(frame)
            except UnsupportedVersion as exc:
                if exc.api_key == API_VERSIONS_KEY:
                    await self._enqueue_ready(unsupported_api_versions(exc.correlation_id), size)
                    continue
                log.warning("connection %s: %s; closing", self.peer, exc)
                return
            except ProtocolError as exc:
                log.warning("connection %s: %s; closing", self.peer, exc)
                return
            await self._slots.acquire()
            task = asyncio.ensure_future(self._handle(request))
            self._tasks[task] = request.spec.key
            task.add_done_callback(self._tasks.pop)
            self._queue.put_nowait((task, size))

    async def _enqueue_ready(self, data: bytes, size: int) -> None:
        await self._slots.acquire()
        fut: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        fut.set_result(data)
        self._queue.put_nowait((fut, size))

    async def _handle(self, request: Request) -> Result:
        ctx = Context(self._broker, request.version, request.client_id, self._host)
        handler = HANDLERS[request.spec.key]
        try:
            response: Any = await handler(ctx, request.body)
            if response is None:
                return None
            return encode_response(request, response)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("connection %s: %s v%d (correlation id %d) failed; closing",
                          self.peer, request.spec.name, request.version, request.correlation_id)
            return CLOSE

    async def _write_loop(self) -> None:
        writer = self._writer
        queue = self._queue
        loop = asyncio.get_running_loop()
        while True:
            item = await queue.get()
            if item is None:
                return
            pending, size = item
            result = await pending
            self._slots.release()
            self._bytes_in_flight -= size
            self._last_activity = loop.time()  # (`_check_idle` sees nothing in flight)
            self._bytes_freed.set()
            if isinstance(result, _Close):
                return
            if writer.transport.is_closing():
                # the peer went (a reset): the answers still queued are nobody's, and asyncio
                # logs a warning for every write to a lost connection (64 in flight: 64 lines)
                continue
            if result is not None:
                writer.write(result)
            if queue.empty():
                await writer.drain()
                self._last_activity = loop.time()  # a slow reader of a big response is busy

    def _abandon(self) -> None:
        """Cancel long polls nobody will read; let durable writes finish on their own."""
        for task, key in list(self._tasks.items()):
            if key not in _RUN_TO_COMPLETION and not task.done():
                task.cancel()


class BrokerServer:
    """Accepts connections for one `Broker`."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> tuple[str, int]:
        """Bind `settings.listen`; set and return the advertised (host, port)."""
        settings = self.broker.settings
        host, port = parse_hostport(settings.listen)
        self._server = await asyncio.start_server(self._accept, host, port, reuse_address=True,
                                                  limit=1 << 20)
        bound_port = self._server.sockets[0].getsockname()[1]
        if settings.advertise is not None:
            adv_host, adv_port = parse_hostport(settings.advertise, bound_port)
            if adv_port == 0:
                adv_port = bound_port
        else:
            adv_host = host if host not in ("0.0.0.0", "::", "") else socket.getfqdn()
            adv_port = bound_port
        self.broker.host, self.broker.port = adv_host, adv_port
        log.info("listening on %s:%d, advertising %s:%d", host, bound_port, adv_host, adv_port)
        return adv_host, adv_port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await Connection(self.broker, reader, writer).serve()
        except asyncio.CancelledError:
            # closing the server: end quietly (asyncio's stream callback would report a
            # cancelled handler as an error)
            pass
        finally:
            self._connections.discard(task)

    async def close(self) -> None:
        """Stop accepting, then drop every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(BaseException):
                await task
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None


async def run_broker(settings: BrokerSettings,
                     ready: Callable[[str, int], None] | None = None,
                     stop: asyncio.Event | None = None) -> None:
    """Open the broker's state, serve until `stop` is set (or the task is cancelled), close.

    `ready(host, port)` is called with the advertised address once the socket is bound.
    This is what `crossbeat broker` runs, and what `crossbeat up` can run in-process.
    """
    broker = await Broker.open(settings)
    server = BrokerServer(broker)
    try:
        host, port = await server.start()
        if ready is not None:
            ready(host, port)
        await (stop if stop is not None else asyncio.Event()).wait()
    finally:
        await server.close()
        await broker.close()
