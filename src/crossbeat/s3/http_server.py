"""A lean HTTP/1.1 server for the gateway's ASGI app: httptools parsing on the running loop.

It does what the gateway needs and no more, with less work per request than a general
server: keep-alive and pipelined requests (answered in order), request bodies by
Content-Length or chunked transfer coding, `Expect: 100-continue` (answered when the app
first reads the body), flow control both ways (reading pauses while a request's unread
body exceeds `HIGH_WATER`; `send` waits while the socket buffer is full, and a client that
reads nothing of a response for `SEND_IDLE_S` is cut off), HEAD responses
without a body, chunked responses when the app gives no Content-Length, TLS when given an
SSLContext, and a graceful stop (no new connections; idle ones closed; requests in flight
finish, up to `grace` seconds). The response head is held back until the first body piece
so that a small response leaves in one write.

ASGI subset: scope `type`, `method`, `path`, `raw_path`, `query_string`, `headers`
(lower-cased names), `http_version`, `scheme`, `server`, `client`; receive yields
`http.request` pieces then `http.disconnect`; send takes `http.response.start` and
`http.response.body`. An app error before the response started becomes a 500; after it,
the connection is closed. `send` of a body piece on a connection that is gone raises
`ClientDisconnected` (an OSError, as ASGI 2.4 asks), so that an app streaming a response
stops instead of producing the rest for nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import fcntl
import http
import logging
import socket
import ssl
import sys
import termios
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import httptools

from crossbeat.s3.http import Message, Scope

log = logging.getLogger("crossbeat.gateway")
ASGIApp = Callable[[Scope, Callable[[], Any], Callable[[Message], Any]], Any]

HIGH_WATER = 256 * 1024  # unread body bytes per request before reading pauses
KEEP_ALIVE_S = 75.0
# A request line and headers larger than this are refused (AWS allows about 8 KiB of
# headers; this leaves room for long keys and presigned query strings). Without a bound a
# client could grow a worker's memory without limit before authentication.
MAX_HEAD_BYTES = 64 * 1024
# A request body that makes no progress for this long is answered RequestTimeout and its
# connection closed, as AWS does after about 20 s: otherwise it holds its request forever.
BODY_IDLE_S = 20.0
# A response the client reads none of for this long (its socket buffer and ours stay full)
# has its connection cut, as nginx's send_timeout does: otherwise a client that stops
# reading holds its request, the object's open files and our buffered bytes forever.
SEND_IDLE_S = 60.0
_REASONS = {s.value: s.phrase.encode() for s in http.HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
# RFC 9110 15.6.6: a request line naming another HTTP version than 1.0 or 1.1 (HTTP/2.0,
# which is no HTTP/1.x framing at all, or HTTP/0.9) is refused, not served as HTTP/1.1
_VERSION_NOT_SUPPORTED = (
    b"HTTP/1.1 505 HTTP Version Not Supported\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
)


def _s3_error(code: str, message: str) -> bytes:
    """A complete 400 response with an S3 error document, closing the connection."""
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error>").encode()
    return (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/xml\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))


_HEAD_TOO_LARGE = _s3_error(
    "RequestHeaderSectionTooLarge",
    f"Your request header section exceeds the maximum allowed size ({MAX_HEAD_BYTES} bytes).",
)
_REQUEST_TIMEOUT = _s3_error(
    "RequestTimeout",
    "Your socket connection to the server was not read from or written to within the "
    "timeout period. Idle connections will be closed.",
)
_INCOMPLETE_BODY = _s3_error(
    "IncompleteBody", "You did not provide the number of bytes specified by the Content-Length HTTP header."
)
_ERROR_500 = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error"
)


class ClientDisconnected(ConnectionError):
    """`send` was called for a response whose connection is gone (closed by the client,
    or cut for reading nothing)."""


class _Exchange:
    """One request and its response on a connection."""

    __slots__ = (
        "conn", "scope", "keep_alive", "expect_100", "chunks", "buffered", "body_done",
        "waiter", "head", "started", "chunked", "head_only", "finished", "delivered",
    )  # fmt: skip

    def __init__(self, conn: _Connection, scope: Scope, keep_alive: bool, expect_100: bool) -> None:
        self.conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self.expect_100 = expect_100
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.body_done = False
        self.waiter: asyncio.Future[None] | None = None
        self.head: bytes | None = None
        self.started = False
        self.chunked = False
        self.head_only = scope["method"] == "HEAD"
        self.finished = False
        self.delivered = False  # the final http.request message was given to the app

    def wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def fail(self, response: bytes) -> None:
        """The client broke off its body: answer `response` (unless the app has begun its
        own) and close. The app's receive then gets http.disconnect and writes nothing."""
        conn = self.conn
        if conn.closed:
            return
        # only the exchange being answered may write: an earlier response still in flight
        # must not be overtaken (then the connection just closes)
        if not self.started and conn.exchanges and conn.exchanges[0] is self:
            conn.transport.write(response)
        self.finished = True  # nothing more from the app reaches the wire
        conn.closed = True
        conn.transport.close()
        self.wake()

    def _body_stalled(self) -> None:
        if not self.chunks and not self.body_done:
            self.fail(_REQUEST_TIMEOUT)

    # -- the ASGI channel ----------------------------------------------------------------

    async def receive(self) -> Message:
        conn = self.conn
        if self.expect_100 and not self.started and not conn.closed:
            self.expect_100 = False
            conn.transport.write(_CONTINUE)
        while not self.chunks and not self.body_done and not conn.closed:
            self.waiter = conn.loop.create_future()
            timer = conn.loop.call_later(BODY_IDLE_S, self._body_stalled)
            try:
                await self.waiter
            finally:
                timer.cancel()
        if self.chunks:
            body = self.chunks.popleft() if len(self.chunks) == 1 else b"".join(self.chunks)
            self.chunks.clear()
            self.buffered = 0
            conn.resume_reading()
            self.delivered = self.body_done
            return {"type": "http.request", "body": body, "more_body": not self.body_done}
        if not self.body_done:  # the client went away mid-body
            return {"type": "http.disconnect"}
        if not self.delivered:  # an empty body, or its end after the last piece
            self.delivered = True
            return {"type": "http.request", "body": b"", "more_body": False}
        if not self.finished and not conn.closed:
            # the body was read in full: the next event is the end of the exchange
            self.waiter = conn.loop.create_future()
            await self.waiter
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        conn = self.conn
        if self.finished:
            return
        if conn.closed:
            if message["type"] == "http.response.body":
                raise ClientDisconnected("the client's connection is gone")
            return
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("response already started")
            self.head = self._head(message["status"], message.get("headers") or [])
            self.started = True
            return
        if kind != "http.response.body" or not self.started:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        body: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        out: list[bytes] = []
        if self.head is not None:
            out.append(self.head)
            self.head = None
        if not self.head_only:
            if self.chunked:
                if body:
                    out += (b"%x\r\n" % len(body), body, b"\r\n")
                if not more:
                    out.append(b"0\r\n\r\n")
            elif body:
                out.append(body)
        if out:
            conn.transport.write(out[0] if len(out) == 1 else b"".join(out))
        if more:
            await conn.drained()
        else:
            self.finished = True
            self.wake()
            conn.exchange_done(self)

    def _head(self, status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        parts = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b""))]
        has_length = has_date = closing = False
        for name, value in headers:
            lname = name.lower()
            if lname == b"content-length":
                has_length = True
            elif lname == b"date":
                has_date = True
            elif lname == b"connection" and b"close" in value.lower():
                self.keep_alive = False
                closing = True  # the app's own header says so: not a second time
            parts += (name, b": ", value, b"\r\n")
        # no CR or LF inside a name or value (header injection): checked once on the block
        block = b"".join(parts)
        if block.count(b"\n") != len(headers) + 1 or block.count(b"\r") != len(headers) + 1:
            raise RuntimeError("invalid HTTP header")
        parts = [block]
        if not has_date:  # an origin server with a clock must send one (RFC 9110 6.6.1)
            parts.append(self.conn.server.date_line())
        if not has_length and not self.head_only and status not in (204, 304) and status >= 200:
            self.chunked = True
            parts.append(b"transfer-encoding: chunked\r\n")
        if self.conn.server.stopping:
            self.keep_alive = False
        if not self.keep_alive and not closing:
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        return b"".join(parts)


class _Connection(asyncio.Protocol):
    def __init__(self, server: LeanServer) -> None:
        self.server = server
        self.loop = server.loop
        self.app = server.app
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        # The parser holds this protocol and this protocol the parser: a cycle only the
        # cyclic GC frees, which the gateway runs rarely (s3/server.py). `connection_lost`
        # breaks it, so a closed connection and a partial head it held go at once.
        self.parser: Any = httptools.HttpRequestParser(self)
        self.closed = False
        self.reading_paused = False
        self.writing_paused = False
        self.drain_waiter: asyncio.Future[None] | None = None
        self.exchanges: deque[_Exchange] = deque()  # [0] is being answered, [-1] read
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.idle_timer: asyncio.TimerHandle | None = None
        self.last_active = 0.0
        self.client: tuple[str, int] | None = None
        self.scheme = "http"
        self.in_body = False  # between a request's headers and its end
        self.refused = False  # unparsable bytes follow the requests in `exchanges`
        self.refusal = _BAD_REQUEST  # what they are answered with
        self.head_bytes = 0  # bytes received since the last request's headers ended
        self.head_size = 0  # the current head's request line and header lines, as parsed
        self.head_too_large = False  # a head completed in one piece went past the limit

    # -- transport events ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self.server.connections.add(self)
        peer = transport.get_extra_info("peername")
        self.client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        self.scheme = self.server.scheme
        self._arm_idle_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.parser = None
        self.url, self.headers = b"", []
        self.server.connections.discard(self)
        self._cancel_idle_timer()
        for exchange in self.exchanges:
            exchange.wake()
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        in_head = not self.in_body
        if in_head:
            self.head_bytes += len(data)
        try:
            while True:
                try:
                    self.parser.feed_data(data)
                    break
                except httptools.HttpParserUpgrade as upgrade:
                    # An `Upgrade` (h2c: Java's HttpClient and curl --http2 ask on every
                    # http:// request) is declined by serving the request in HTTP/1.1, as
                    # RFC 9110 7.8 allows. httptools took its body for empty and stopped
                    # where the body begins: read on from there.
                    if not self._decline_upgrade():
                        self._refuse()
                        return
                    data = data[int(upgrade.args[0]):]
        except httptools.HttpParserError as exc:
            # llhttp's words for HTTP/1.2 or HTTP/3.0, and for HTTP/2's connection preface
            # (`PRI * HTTP/2.0`: curl --http2-prior-knowledge, gRPC-style h2c clients)
            if str(exc) in ("Invalid HTTP version", "Pause on PRI/Upgrade"):
                self.refusal = _VERSION_NOT_SUPPORTED
            if self.head_too_large:
                self._too_large()
            else:
                self._refuse()
            return
        # still reading a request's head after this piece, and too much of it: refuse
        # (checked after the feed, so that a head followed by its body in one piece counts
        # only while the head is unfinished)
        if not self.in_body and self.head_bytes > MAX_HEAD_BYTES and not self.closed:
            self._too_large()

    def _decline_upgrade(self) -> bool:
        """Go on after a request that asked to upgrade the protocol, as if it had not: a new
        parser reads its body (told the framing by a synthetic head that `_BodyOf` keeps
        from the callbacks) and the requests after it. False for CONNECT (a tunnel: no
        HTTP/1.1 request follows) or a request not read as an exchange."""
        if not self.exchanges or self.exchanges[-1].scope["method"] == "CONNECT":
            return False
        exchange = self.exchanges[-1]
        framing = b""
        for name, value in exchange.scope["headers"]:
            if name == b"transfer-encoding":
                framing += b"transfer-encoding: " + value + b"\r\n"
            elif name == b"content-length":
                framing += b"content-length: " + value + b"\r\n"
        self.parser = httptools.HttpRequestParser(_BodyOf(self) if framing else self)
        if framing:
            # the body is still to come: not the empty one httptools reported
            exchange.body_done = False
            exchange.delivered = False
            self.in_body = True
            self.parser.feed_data(b"PUT / HTTP/1.1\r\n" + framing + b"\r\n")
        return True

    def _too_large(self) -> None:
        if not self.exchanges or not self.exchanges[0].started:
            self.transport.write(_HEAD_TOO_LARGE)
        self.closed = True
        self.transport.close()

    def eof_received(self) -> bool | None:
        """The client half-closed. Mid-body, say why the request fails before closing
        (the app's receive gets http.disconnect); otherwise just close. A FIN is taken
        for a client gone, as uvicorn and most servers take it, even after whole requests:
        a half-close cannot be told from a close, and a long poll or download whose client
        went must end (a client that shuts down its sending side and waits for the answer
        gets none; few do)."""
        if self.in_body and self.exchanges and not self.exchanges[-1].body_done:
            self.exchanges[-1].fail(_INCOMPLETE_BODY)
        return None

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    async def drained(self) -> None:
        """Wait until the transport's buffer is below its low mark; raise
        ClientDisconnected if the connection went meanwhile or the client read nothing
        of it for `SEND_IDLE_S`."""
        if self.writing_paused and not self.closed:
            waiter = self.drain_waiter = self.loop.create_future()
            timer = self.loop.call_later(SEND_IDLE_S, self._send_stalled, waiter, self._unsent())
            try:
                await waiter
            finally:
                timer.cancel()
        if self.closed:
            raise ClientDisconnected("the client's connection is gone")

    def _unsent(self) -> int:
        """Bytes written and not yet taken by the client: ours, and the kernel's send queue
        (which drains as the client reads, long before ours moves: a client reading 16 KB/s
        emptied nothing of ours in 60 s and was cut off as idle)."""
        queued = 0
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, ValueError):
                buf = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
                queued = int.from_bytes(buf, sys.byteorder, signed=True)
        return self.transport.get_write_buffer_size() + queued

    def _send_stalled(self, waiter: asyncio.Future[None], buffered: int) -> None:
        if waiter.done() or self.closed:
            return
        now = self._unsent()
        if now < buffered:  # the client read some: a slow reader, not a gone one
            timer = self.loop.call_later(SEND_IDLE_S, self._send_stalled, waiter, now)
            waiter.add_done_callback(lambda _: timer.cancel())
            return
        log.info("closing a connection whose client read nothing for %.0f s", SEND_IDLE_S)
        self._abort()

    def _abort(self) -> None:
        """Drop the connection and the bytes buffered for it (close() would wait for a
        client that does not read to take them)."""
        self.closed = True
        self.transport.abort()
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    def resume_reading(self) -> None:
        if self.reading_paused and not self.closed and not self.refused:
            self.reading_paused = False
            self.transport.resume_reading()

    def _refuse(self) -> None:
        """Bytes that are no HTTP request: 400 and close. Requests read before them are
        answered first, in order (a PUT whose Content-Length fell short of what the client
        sent is stored: its answer must not be lost to the 400 of the leftover bytes)."""
        if self.exchanges and self.exchanges[-1].body_done:
            self.refused = True
            if not self.reading_paused:
                self.reading_paused = True
                self.transport.pause_reading()
            return
        if not self.exchanges or not self.exchanges[0].started:
            self.transport.write(self.refusal)
        self.transport.close()

    # -- parser callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.head_size = 0

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.head_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.in_body:
            # a chunked body's trailer fields: not request headers (RFC 9110 6.5.1), and
            # the scope's header list (this one) was handed to the app already
            return
        self.headers.append((name.lower(), value))
        self.head_size += len(name) + len(value) + 4  # ": " and CRLF

    def on_headers_complete(self) -> None:
        # A head that arrived whole in one read is measured here (`data_received` measures
        # only what is still unfinished after a read): stop the parser, refuse it.
        if self.head_size > MAX_HEAD_BYTES:
            self.head_too_large = True
            raise ValueError("request head over the limit")
        self.in_body = True
        self.head_bytes = 0
        parser = self.parser
        url = self.url
        if url[:1] != b"/" and url != b"*":
            # absolute-form (RFC 9112 3.2.2: a server MUST accept it): its path and query
            parsed = httptools.parse_url(url)
            url = (parsed.path or b"/") + (b"?" + parsed.query if parsed.query else b"")
        raw_path, _, query = url.partition(b"?")
        expect_100 = False
        hosts = 0
        for name, value in self.headers:
            if name == b"expect" and value.lower() == b"100-continue":
                expect_100 = True
            elif name == b"host":
                hosts += 1
        http_version = parser.get_http_version()
        if http_version not in ("1.1", "1.0"):
            self.refusal = _VERSION_NOT_SUPPORTED
            raise ValueError(f"HTTP/{http_version} is not supported")
        if http_version != "1.1":
            expect_100 = False  # RFC 9110 10.1.1: an HTTP/1.0 client's expectation is ignored
        elif hosts != 1:
            # RFC 9112 3.2: an HTTP/1.1 request without a Host, or with several, is a 400
            # (which one would the signature and virtual-host addressing go by?)
            raise ValueError("an HTTP/1.1 request needs exactly one Host header")
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": http_version,
            "method": parser.get_method().decode("ascii"),
            "scheme": self.scheme,
            "path": raw_path.decode("latin-1"),
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": self.headers,
            "server": self.server.address,
            "client": self.client,
        }
        exchange = _Exchange(self, scope, parser.should_keep_alive() and not self.server.stopping, expect_100)
        self.exchanges.append(exchange)
        if len(self.exchanges) == 1:
            self._start(exchange)
        elif not self.reading_paused:  # pipelined: read no further until its turn
            self.reading_paused = True
            self.transport.pause_reading()

    def on_body(self, body: bytes) -> None:
        exchange = self.exchanges[-1]
        if exchange.finished:
            return  # answered without reading the body: it is dropped
        exchange.chunks.append(body)
        exchange.buffered += len(body)
        if exchange.buffered > HIGH_WATER and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        exchange.wake()

    def on_message_complete(self) -> None:
        self.in_body = False
        exchange = self.exchanges[-1]
        exchange.body_done = True
        exchange.wake()

    # -- exchanges -----------------------------------------------------------------------

    def _start(self, exchange: _Exchange) -> None:
        task = self.loop.create_task(self._run(exchange))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    async def _run(self, exchange: _Exchange) -> None:
        try:
            await self.app(exchange.scope, exchange.receive, exchange.send)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                raise
            if isinstance(exc, ClientDisconnected):  # the client went: nobody to answer
                return
            log.exception("ASGI app failed")
            if not exchange.started and not self.closed:
                self.transport.write(_ERROR_500)
            self.transport.close()
            return
        if not exchange.finished and not self.closed:
            log.error("ASGI app returned without completing its response")
            self.transport.close()

    def exchange_done(self, exchange: _Exchange) -> None:
        """The response is complete: close, or go on with the next request."""
        if not exchange.keep_alive or (not exchange.body_done and exchange is self.exchanges[-1]):
            # (a body not read to its end would be parsed as the next request: close)
            self.transport.close()
            return
        self.exchanges.popleft()
        if self.exchanges:
            self._start(self.exchanges[0])
            if len(self.exchanges) == 1:
                self.resume_reading()
        elif self.refused:
            self.transport.write(self.refusal)
            self.transport.close()
        elif self.server.stopping:
            self.transport.close()
        else:
            self.resume_reading()
            self.last_active = self.loop.time()

    # One timer per connection, re-armed only when it fires, rather than one per request.

    def _arm_idle_timer(self, delay: float = KEEP_ALIVE_S) -> None:
        self.last_active = self.loop.time()
        self.idle_timer = self.loop.call_later(delay, self._idle_timeout)

    def _cancel_idle_timer(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def _idle_timeout(self) -> None:
        self.idle_timer = None
        if self.closed:
            return
        idle_for = self.loop.time() - self.last_active
        if not self.exchanges and idle_for >= KEEP_ALIVE_S:
            if self.transport.get_write_buffer_size():
                self._abort()  # a response the client never read: close() would wait for it
            else:
                self.transport.close()
        else:
            self.idle_timer = self.loop.call_later(max(KEEP_ALIVE_S - idle_for, 1.0), self._idle_timeout)

    def close_if_idle(self) -> None:
        """At stop: close a connection with no request under way. Aborted when nothing is
        left to send, since a TLS close waits (up to 30 s) for the client's close_notify,
        which an idle pooled client never sends: the stop waited that long."""
        if not self.exchanges and not self.closed:
            if self.transport.get_write_buffer_size():
                self.transport.close()
            else:
                self._abort()


class _BodyOf:
    """The parser callbacks of a request whose Upgrade was declined (`_decline_upgrade`):
    the synthetic head that tells the new parser the body's framing is kept from the
    connection; the body, its end and every request after it go to the connection."""

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn
        self.in_head = True

    def on_message_begin(self) -> None:
        if not self.in_head:
            self.conn.on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self.in_head:
            self.conn.on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.in_head:
            self.conn.on_header(name, value)

    def on_headers_complete(self) -> None:
        if self.in_head:
            self.in_head = False
            return
        self.conn.on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self.conn.on_body(body)

    def on_message_complete(self) -> None:
        self.conn.on_message_complete()


class LeanServer:
    """Serves `app` on `sock` until `stop()`."""

    def __init__(self, app: ASGIApp, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.loop = loop
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        self.address: tuple[str, int] | None = None
        self.scheme = "http"
        self._server: asyncio.AbstractServer | None = None
        self._stopped = asyncio.Event()
        self._date_second = -1
        self._date_line = b""

    def date_line(self) -> bytes:
        """The `date` header line for now (IMF-fixdate), formatted once a second."""
        second = int(time.time())
        if second != self._date_second:
            self._date_line = b"date: %s\r\n" % email.utils.formatdate(second, usegmt=True).encode()
            self._date_second = second
        return self._date_line

    async def serve(self, sock: socket.socket, ssl_context: ssl.SSLContext | None, grace: float) -> None:
        """Serve until `stop()`, then let requests in flight finish (at most `grace` s)."""
        host, port = sock.getsockname()[:2]
        self.address = (str(host), int(port))
        self.scheme = "https" if ssl_context is not None else "http"
        self._server = await self.loop.create_server(
            lambda: _Connection(self), sock=sock, ssl=ssl_context, backlog=2048
        )
        await self._stopped.wait()
        self._server.close()
        for conn in list(self.connections):
            conn.close_if_idle()
        deadline = self.loop.time() + grace
        while (self.tasks or self.connections) and self.loop.time() < deadline:
            for conn in list(self.connections):
                conn.close_if_idle()
            await asyncio.sleep(0.05)
        for conn in list(self.connections):  # the grace is over: nothing more is sent
            conn._abort()
        for task in list(self.tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await self._server.wait_closed()

    def stop(self) -> None:
        self.stopping = True
        self._stopped.set()
