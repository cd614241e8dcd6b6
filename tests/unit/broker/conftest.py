"""A real broker (store, server) on an event loop in a background thread, for unit tests
that speak the wire protocol through plain sockets."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossbeat.broker.settings import BrokerSettings


class LoopBroker:
    """`run_broker` in its own thread; `address` once ready; `close()` stops it."""

    def __init__(self, data_dir: Path, **overrides: Any) -> None:
        self.settings = BrokerSettings(data_dir=data_dir, listen="127.0.0.1:0", **overrides)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.address = ""
        self.error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from crossbeat.broker.server import run_broker

        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            self._stop = asyncio.Event()

            def ready(host: str, port: int) -> None:
                self.address = f"{host}:{port}"
                self.ready.set()

            await run_broker(self.settings, ready, self._stop)

        try:
            self.loop.run_until_complete(main())
        except BaseException as exc:  # surfaced by the test
            self.error = exc
            self.ready.set()

    def start(self) -> LoopBroker:
        self._thread.start()
        assert self.ready.wait(30), "broker did not start"
        assert self.error is None, self.error
        return self

    def close(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        self.loop.close()

    def connect(self) -> socket.socket:
        host, port = self.address.rsplit(":", 1)
        return socket.create_connection((host, int(port)), timeout=10)


def recv_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return buf

    (size,) = struct.unpack(">i", exact(4))
    return exact(size)


def call(sock: socket.socket, body: Any, correlation_id: int = 1) -> Any:
    """Send a kafka-python request body (version set) and decode its response."""
    body.with_header(correlation_id=correlation_id, client_id="unit")
    sock.sendall(bytes(body.encode(header=True, framed=True)))
    from crossbeat.broker.codec import APIS

    resp_cls = APIS[body.API_KEY].response
    return resp_cls.decode(recv_frame(sock), version=body.API_VERSION, header=True)


@pytest.fixture
def loop_broker(tmp_path: Path) -> Iterator[LoopBroker]:
    b = LoopBroker(tmp_path / "data").start()
    try:
        yield b
    finally:
        b.close()


class Clock:
    """A settable clock for the group coordinators' timeouts (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
