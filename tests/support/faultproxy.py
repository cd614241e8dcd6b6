"""TCP proxies in front of a server, for network faults.

`LosingProxy` loses one answer: the network fault behind "did my request take effect?". It
relays bytes between clients and an upstream server. The first request whose
bytes contain `lose` reaches the server, which handles it; as soon as the server starts to
answer, the proxy closes both sides instead of relaying the answer. The client sees a
dropped connection for a request that did take effect.

Clients are assumed not to pipeline (urllib3, httpx, botocore do not): when a request is
sent, every earlier answer on that connection has been relayed.

`SwitchProxy` relays, hangs or refuses, as switched at run time (a backend that hangs or is
down).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import TypeVar
from urllib.parse import urlsplit


class _Proxy:
    """Listens on a free port (`url`) and hands each client connection, with a new one to
    the upstream server, to `_relay`; a client whose upstream connection fails is closed."""

    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def start(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            self._relay(client, server)

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        raise NotImplementedError


class LosingProxy(_Proxy):
    def __init__(self, upstream_url: str, lose: bytes) -> None:
        super().__init__(upstream_url)
        self.lose = lose
        self.lost = threading.Event()  # set once an answer was dropped
        self._armed = True
        self._lock = threading.Lock()

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        state = {"losing": False}
        threading.Thread(target=self._requests, args=(client, server, state), daemon=True).start()
        threading.Thread(target=self._answers, args=(server, client, state), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        try:
            while data := client.recv(65536):
                with self._lock:
                    if self._armed and self.lose in data:
                        self._armed = False
                        state["losing"] = True
                server.sendall(data)
        except OSError:
            pass
        finally:
            _shut(server)

    def _answers(self, server: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        try:
            while data := server.recv(65536):
                if state["losing"]:
                    self.lost.set()
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            _close(client, server)


class SwitchProxy(_Proxy):
    """A TCP proxy whose behaviour is switched at run time (`mode`):

    - "pass": relay both ways;
    - "hang": accept, read requests and never answer (a backend that hangs);
    - "close": close each connection as soon as a request arrives (a backend that is down).

    `requests` counts the chunks of request bytes received, whatever the mode: how a test
    tells that nothing was asked of this backend.
    """

    def __init__(self, upstream_url: str) -> None:
        super().__init__(upstream_url)
        self.mode = "pass"
        self.requests = 0

    def _relay(self, client: socket.socket, server: socket.socket) -> None:
        threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
        threading.Thread(target=self._answers, args=(server, client), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while data := client.recv(65536):
                self.requests += 1
                if self.mode == "close":
                    break
                if self.mode == "pass":
                    server.sendall(data)
                # "hang": the request goes nowhere, so no answer ever comes
        except OSError:
            pass
        finally:
            for s in (client, server):
                _shut(s)

    def _answers(self, server: socket.socket, client: socket.socket) -> None:
        try:
            while data := server.recv(65536):
                if self.mode == "pass":
                    client.sendall(data)
        except OSError:
            pass
        finally:
            _close(client, server)


def _shut(s: socket.socket) -> None:
    with suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        _shut(s)
        s.close()


P = TypeVar("P", bound=_Proxy)


@contextmanager
def _running(proxy: P) -> Iterator[P]:
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()


def losing_proxy(upstream_url: str, lose: bytes) -> AbstractContextManager[LosingProxy]:
    return _running(LosingProxy(upstream_url, lose))


def switch_proxy(upstream_url: str) -> AbstractContextManager[SwitchProxy]:
    return _running(SwitchProxy(upstream_url))
