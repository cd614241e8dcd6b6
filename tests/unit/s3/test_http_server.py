"""The lean HTTP/1.1 server: keep-alive, pipelining, bodies, 100-continue, HEAD, errors, stop."""

from __future__ import annotations

import asyncio
import email.utils
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

from crossbeat.s3 import http_server
from crossbeat.s3.http_server import MAX_HEAD_BYTES, LeanServer

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with the method, path, query and the body it read."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/fail":
        raise ValueError("boom")
    if scope["path"] == "/inject":  # a header value smuggling a second header
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1\r\nx-b: 2")]})
    out = b"%s %s %s %s" % (scope["method"].encode(), scope["raw_path"], scope["query_string"], body)
    if scope["path"] == "/dated":  # the app's own Date is kept, not doubled
        date = b"Mon, 02 Mar 2026 10:00:00 GMT"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"date", date), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/chunked":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": out[:3], "more_body": True})
        await send({"type": "http.response.body", "body": out[3:]})
        return
    headers = [(b"content-length", str(len(out)).encode()), (b"x-test", b"1")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": out})


async def serve(app: App, client: Callable[[int], Awaitable[None]]) -> LeanServer:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    server = LeanServer(app, asyncio.get_running_loop())
    serving = asyncio.ensure_future(server.serve(sock, None, grace=5.0))
    try:
        await asyncio.wait_for(client(sock.getsockname()[1]), timeout=30)
    finally:
        server.stop()
        await asyncio.wait_for(serving, timeout=10)
    return server


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lower = head.lower()
    if b"content-length: " in lower:
        length = int(lower.split(b"content-length: ")[1].split(b"\r\n")[0])
        return head, await reader.readexactly(length)
    if b"transfer-encoding: chunked" in lower:
        body = b""
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return head, body
            body += chunk[:-2]
    return head, b""


def run(app: App, client: Callable[[int], Awaitable[None]]) -> None:
    asyncio.run(serve(app, client))


def test_keep_alive_and_pipelining() -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\n")
        head, body = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"x-test: 1" in head
        assert body == b"GET /a x=1 "
        # two requests in one write: answered in order on the same connection
        writer.write(
            b"PUT /b HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
            b"PUT /c HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nbye"
        )
        assert (await read_response(reader))[1] == b"PUT /b  hello"
        assert (await read_response(reader))[1] == b"PUT /c  bye"
        writer.close()

    run(echo, client)


def test_every_response_has_a_date() -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        before = time.time()
        writer.write(b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n")
        head, _ = await read_response(reader)
        dates = [line[6:] for line in head.split(b"\r\n") if line.lower().startswith(b"date: ")]
        assert len(dates) == 1
        sent = email.utils.parsedate_to_datetime(dates[0].decode()).timestamp()
        assert int(before) <= sent <= time.time() + 1  # IMF-fixdate has whole seconds
        writer.write(b"GET /dated HTTP/1.1\r\nHost: h\r\n\r\n")
        head, _ = await read_response(reader)
        assert [line for line in head.split(b"\r\n") if line.lower().startswith(b"date:")] == [
            b"date: Mon, 02 Mar 2026 10:00:00 GMT"
        ]
        writer.close()

    run(echo, client)


def test_chunked_request_and_response_bodies() -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"PUT /chunked HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        )
        head, body = await read_response(reader)
        assert b"transfer-encoding: chunked" in head
        assert body == b"PUT /chunked  abcde"
        writer.close()

    run(echo, client)


def test_expect_100_continue_is_answered_when_the_body_is_read() -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"PUT /e HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"data")
        assert (await read_response(reader))[1] == b"PUT /e  data"
        writer.close()

    run(echo, client)


def test_head_has_no_body_and_errors_are_answered() -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"HEAD /h HTTP/1.1\r\nHost: h\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"content-length: 9" in head  # "HEAD /h  ", not sent
        writer.write(b"GET /after HTTP/1.1\r\nHost: h\r\n\r\n")  # no stray body bytes in between
        assert (await read_response(reader))[1] == b"GET /after  "
        writer.write(b"GET /fail HTTP/1.1\r\nHost: h\r\n\r\n")
        head, body = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 500 ") and b"connection: close" in head
        assert await reader.read() == b""  # closed
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /inject HTTP/1.1\r\nHost: h\r\n\r\n")
        head, body = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 500 ") and b"x-b" not in head + body
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        head, _ = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 400 ")
        writer.close()

    run(echo, client)


def test_stop_lets_the_request_in_flight_finish() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(scope: dict[str, Any], receive: Any, send: Any) -> None:
        started.set()
        await release.wait()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def main() -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        port = sock.getsockname()[1]
        server = LeanServer(slow, asyncio.get_running_loop())
        serving = asyncio.ensure_future(server.serve(sock, None, grace=5.0))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
        await asyncio.wait_for(started.wait(), timeout=5)
        server.stop()
        await asyncio.sleep(0.1)
        assert not serving.done()  # waiting for the request in flight
        release.set()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
        assert head.startswith(b"HTTP/1.1 204 ") and b"connection: close" in head
        await asyncio.wait_for(serving, timeout=5)
        writer.close()

    asyncio.run(main())


def test_a_head_over_the_limit_is_refused_and_a_body_is_not_counted_as_head() -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = b"b" * (3 * MAX_HEAD_BYTES)  # a body many times the head limit, in one write
        writer.write(b"PUT /big HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        assert (await read_response(reader))[1] == b"PUT /big  " + body
        # a header that never ends: refused once past the limit, not buffered forever
        writer.write(b"GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * (MAX_HEAD_BYTES + 1024))
        head, err = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 400 ") and b"<Code>RequestHeaderSectionTooLarge</Code>" in err
        assert await reader.read() == b""  # closed
        writer.close()

    run(echo, client)


def test_a_head_over_the_limit_is_refused_when_it_arrives_in_one_piece() -> None:
    """Measured only while unfinished after a read, a head that arrived whole (70 KB of
    headers in one write) was served; the same head in small pieces was refused."""
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /whole HTTP/1.1\r\nHost: h\r\n"
                     + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(70)) + b"\r\n")
        head, err = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 400 ") and b"<Code>RequestHeaderSectionTooLarge</Code>" in err
        assert await reader.read() == b""  # closed
        writer.close()
        # just under the limit, in one piece: served
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /under HTTP/1.1\r\nHost: h\r\nX-A: " + b"a" * (MAX_HEAD_BYTES - 1024) + b"\r\n\r\n")
        assert (await read_response(reader))[1] == b"GET /under  "
        writer.close()

    run(echo, client)


def test_a_closed_connection_is_freed_without_the_cyclic_gc() -> None:
    """The parser and its connection refer to each other; the gateway runs the cyclic GC
    rarely (it freezes the heap and raises the thresholds), so 2,000 connections that sent
    60 KB of an unfinished head and left kept 50-60 MB each round, for good."""
    import gc

    async def client(port: int) -> None:
        for _ in range(20):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET / HTTP/1.1\r\nHost: h\r\nX-Partial: " + b"p" * 60_000)
            await writer.drain()
            writer.close()
            await writer.wait_closed()

    def connections() -> int:
        return sum(isinstance(o, http_server._Connection) for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        before = connections()
        run(echo, client)  # returns once the server has stopped and every connection is lost
        after = connections()
    finally:
        gc.enable()
    assert after == before, f"{after - before} closed connections still alive"


def test_a_stalled_body_is_answered_request_timeout(monkeypatch: Any) -> None:
    monkeypatch.setattr(http_server, "BODY_IDLE_S", 0.3)
    seen: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            seen.append(message)
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"PUT /slow HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nhello")
        started = time.monotonic()
        head, err = await read_response(reader)  # then nothing more is sent
        assert head.startswith(b"HTTP/1.1 400 ") and b"<Code>RequestTimeout</Code>" in err
        assert 0.25 < time.monotonic() - started < 5
        assert await reader.read() == b""  # closed, and the app's own answer never sent
        writer.close()

    run(app, client)
    assert [m["type"] for m in seen] == ["http.request", "http.disconnect"]


def test_a_body_cut_short_by_the_client_is_answered_incomplete_body() -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"PUT /short HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nhello")
        await writer.drain()
        writer.write_eof()  # half-close: the client can still read the answer
        head, err = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 400 ") and b"<Code>IncompleteBody</Code>" in err
        writer.close()

    run(echo, client)


def test_garbage_after_a_request_is_refused_after_that_request_is_answered() -> None:
    """A Content-Length shorter than the bytes sent: the request it delimits is served and
    answered; the leftover bytes then get a 400 and the connection closes."""

    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"PUT /short HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nhello")
        head, body = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 200 ") and body == b"PUT /short  hel"
        head, _ = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 400 ")
        assert await reader.read() == b""
        writer.close()

    run(echo, client)


def test_the_apps_connection_close_is_not_doubled() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-length", b"0"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": b""})

    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        head, _ = await read_response(reader)
        assert head.lower().count(b"connection: close") == 1
        assert await reader.read() == b""
        writer.close()

    run(app, client)


class Streamer:
    """An app streaming `pieces` pieces of 64 KiB; records how many `send` took and
    what ended it."""

    def __init__(self, pieces: int) -> None:
        self.pieces = pieces
        self.sent = 0
        self.ended_by: BaseException | None = None
        self.done = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        piece = b"x" * 65536
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-length", b"%d" % (self.pieces * len(piece)))]})
            for _ in range(self.pieces):
                await send({"type": "http.response.body", "body": piece, "more_body": True})
                self.sent += 1
            await send({"type": "http.response.body", "body": b""})
        except BaseException as exc:
            self.ended_by = exc
            raise
        finally:
            self.done.set()


async def bounded(event: asyncio.Event, limit: float = 5.0) -> None:
    await asyncio.wait_for(event.wait(), timeout=limit)


async def small_buffers_connection(port: int) -> socket.socket:
    """A client socket that takes little before the sender's buffers fill."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


def test_a_response_to_a_client_gone_stops_the_apps_stream() -> None:
    """The client reads the start of a long response and closes: the app's next send
    raises ClientDisconnected (it would otherwise produce the rest for nobody), and no
    traceback is logged for it."""
    app = Streamer(pieces=20_000)  # 1.25 GiB

    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(1 << 20)
        writer.transport.abort()
        await bounded(app.done)

    run(app, client)
    assert isinstance(app.ended_by, http_server.ClientDisconnected)
    assert app.sent < 1000, f"{app.sent} pieces sent after the client went"


def test_a_client_that_reads_nothing_is_cut_off(monkeypatch: Any) -> None:
    monkeypatch.setattr(http_server, "SEND_IDLE_S", 0.3)
    app = Streamer(pieces=20_000)

    async def client(port: int) -> None:
        sock = await small_buffers_connection(port)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
        started = time.monotonic()
        await bounded(app.done)  # reads nothing meanwhile
        assert time.monotonic() - started < 5
        sock.close()

    run(app, client)
    assert isinstance(app.ended_by, http_server.ClientDisconnected)


def test_a_slow_reader_is_not_cut_off(monkeypatch: Any) -> None:
    """A client that reads a little at a time, slower than the buffers drain in
    SEND_IDLE_S but never stopping, gets its whole response."""
    monkeypatch.setattr(http_server, "SEND_IDLE_S", 0.3)
    app = Streamer(pieces=3)

    async def client(port: int) -> None:
        sock = await small_buffers_connection(port)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
        got = b""
        while not got.endswith(b"x" * 1024) or len(got) < 3 * 65536:
            got += await loop.sock_recv(sock, 2048)
            await asyncio.sleep(0.02)  # about 100 KB/s
            if app.ended_by is not None:
                break
        sock.close()

    original = socket.socket.listen

    def listen(self: socket.socket, backlog: int = 16) -> None:
        # accepted sockets inherit the listener's send buffer: keep it small, so that our
        # own buffer is what fills and drains
        self.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        original(self, backlog)

    monkeypatch.setattr(socket.socket, "listen", listen)
    run(app, client)
    assert app.ended_by is None and app.sent == 3


def test_a_reader_the_kernel_buffers_for_is_not_cut_off(monkeypatch: Any) -> None:
    """A client reading steadily, slower than the kernel's send queue drains enough for our
    own buffer to move within SEND_IDLE_S: what it takes from the kernel's queue is
    progress. Only our buffer counted, and a client reading 16 KB/s was cut off as idle."""
    monkeypatch.setattr(http_server, "SEND_IDLE_S", 0.3)
    app = Streamer(pieces=48)  # 3 MiB: more than the socket buffers hold

    async def client(port: int) -> None:
        sock = await small_buffers_connection(port)
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(sock, b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
        got = 0
        while got < 48 * 65536 and app.ended_by is None:
            piece = await loop.sock_recv(sock, 65536)
            if not piece:
                break
            got += len(piece)
            await asyncio.sleep(0.004)
        sock.close()

    run(app, client)
    assert app.ended_by is None and app.sent == 48
