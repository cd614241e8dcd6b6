"""A TCP relay in front of a broker that restarts, for clients that must live through the
restart: clients are told (`--advertise`) to connect to the relay, whose own port never
changes, while the broker comes back on a new port 0 each time (`point_to`).

It can also lose answers: `hold_answers` swallows, from then on, what the broker sends on
the connections open at that moment (a request that took effect, its answer lost), while
connections opened later are relayed normally (so a test can still look at the broker).
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tests.compat.broker.helpers import configured_broker

_BOUND = re.compile(r"listening on (\S+:\d+), advertising")


def bound_address(broker: Any) -> str:
    """Where a broker started with `--advertise` really listens (its `address` is the
    advertised one): from its latest start's log line."""
    return _BOUND.findall(broker.output())[-1]


class _Pair:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.holding = False

    def close(self) -> None:
        for s in (self.client, self.server):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


class Relay:
    """Relays every connection to the broker at the address last given to `point_to`."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self._upstream: tuple[str, int] | None = None
        self._pairs: list[_Pair] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def start_broker(self, broker: Any) -> None:
        """Start `broker` (a BrokerProcess, again after a stop or kill), telling its clients
        to connect here, and relay to where it listens now."""
        if "--advertise" not in broker.extra:
            broker.extra += ["--advertise", self.address]
        broker.start()
        self.point_to(bound_address(broker))

    def restart_broker(self, broker: Any, how: str = "stop") -> None:
        """Stop (SIGTERM, `how="stop"`) or kill (SIGKILL) `broker`, close the connections
        its clients had (as a broker that went away leaves them), and start it again."""
        if how == "kill":
            broker.kill()
        else:
            broker.stop()
        self.drop_connections()
        self.start_broker(broker)

    def point_to(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        with self._lock:
            self._upstream = (host, int(port))

    def hold_answers(self) -> None:
        """Swallow from now on what the broker sends on the connections open now."""
        with self._lock:
            for pair in self._pairs:
                pair.holding = True

    def drop_connections(self) -> None:
        """Close every connection (as a broker that went away closes them)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.close()

    def close(self) -> None:
        self._listener.close()
        self.drop_connections()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                upstream = self._upstream
            try:
                if upstream is None:
                    raise OSError("no broker yet")
                server = socket.create_connection(upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()  # as a broker that is down refuses it
                continue
            pair = _Pair(client, server)
            with self._lock:
                self._pairs.append(pair)
            threading.Thread(target=self._pump, args=(pair, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(pair, True), daemon=True).start()

    @staticmethod
    def _pump(pair: _Pair, answers: bool) -> None:
        src, dst = (pair.server, pair.client) if answers else (pair.client, pair.server)
        try:
            while data := src.recv(65536):
                if answers and pair.holding:
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            pair.close()


@contextmanager
def relay() -> Iterator[Relay]:
    r = Relay()
    try:
        yield r
    finally:
        r.close()


@contextmanager
def relayed_broker(data_dir: Path, broker_settings: str = "") -> Iterator[tuple[Relay, Any]]:
    """A relay and a broker over `data_dir` (see helpers.configured_broker) started behind
    it: (relay, broker), the broker stopped at the end."""
    with relay() as front:
        broker = configured_broker(data_dir, broker_settings)
        front.start_broker(broker)
        try:
            yield front, broker
        finally:
            broker.stop()
