"""Serving a Gateway with uvicorn on a socket we bind ourselves (so port 0 works)."""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable

import uvicorn

from crossbeat.s3.gateway import Gateway

log = logging.getLogger("crossbeat.gateway")


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"--listen must be HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)


def bind(listen: str) -> socket.socket:
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def serve(gw: Gateway, sock: socket.socket, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM; `on_ready(url)` runs once the socket is listening."""
    settings = gw.settings
    tls = settings.tls_cert is not None and settings.tls_key is not None
    config = uvicorn.Config(
        gw,
        lifespan="off",
        access_log=False,
        log_level="warning",
        http="httptools",
        loop="uvloop",
        ssl_certfile=str(settings.tls_cert) if tls else None,
        ssl_keyfile=str(settings.tls_key) if tls else None,
        timeout_keep_alive=75,
        backlog=2048,
    )
    # Worker threads (file I/O, SQLite) hold the GIL between their blocking calls; a short
    # switch interval keeps the event loop from queueing 5 ms behind them at each hand-back.
    sys.setswitchinterval(0.0005)
    server = uvicorn.Server(config)
    host, port = sock.getsockname()[:2]
    url = f"{'https' if tls else 'http'}://{host}:{port}"
    if on_ready is not None:
        on_ready(url)
    server.run(sockets=[sock])
