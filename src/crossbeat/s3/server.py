"""Serving a Gateway with uvicorn on a socket we bind ourselves (so port 0 works)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Generator

import uvicorn
import uvloop

from crossbeat.s3.auth import Principal
from crossbeat.s3.gateway import Gateway
from crossbeat.s3.http_server import LeanServer
from crossbeat.s3.lifecycle import LifecycleRunner
from crossbeat.s3.settings import GatewaySettings, parse_listen

log = logging.getLogger("crossbeat.gateway")

_GRACE_S = 30.0  # how long requests in flight at a stop may take to finish


def bind(listen: str) -> socket.socket:
    """A non-blocking socket listening on `listen` (HOST:PORT). A failure to bind or listen
    is an OSError with the original errno whose message names `listen`."""
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        # the bare "[Errno 98] Address already in use" does not say which address
        raise OSError(exc.errno, f"cannot listen on {listen}: {exc.strerror or exc}") from exc
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
        # as LeanServer's grace: requests in flight at a stop get this long to finish
        timeout_graceful_shutdown=int(_GRACE_S),
        proxy_headers=False,
        server_header=False,
        backlog=2048,
    )
    # Worker threads (file I/O, SQLite) and the event loop hand the GIL back and forth at
    # every blocking call; see `gil_switch_interval_ms`.
    sys.setswitchinterval(switch_interval_s(settings))
    # The gateway's long-lived objects (modules, settings, caches) never become garbage:
    # freeze them out of the collector's view so that each full collection does not walk
    # them again, and collect the young generation less often (requests allocate plenty).
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)
    # every serving process has a runner; they take turns (see LifecycleRunner)
    lifecycle = LifecycleRunner(gw)
    lifecycle.start()
    try:
        if settings.http_server == "lean":
            _serve_lean(gw, sock, on_ready)
        else:
            _serve_uvicorn(gw, sock, config, on_ready)
    finally:
        lifecycle.stop()


def _serve_lean(gw: Gateway, sock: socket.socket, on_ready: Callable[[str], None] | None) -> None:
    """Serve with `http_server.LeanServer` on uvloop until SIGTERM/SIGINT."""
    settings = gw.settings
    ssl_context = None
    if settings.tls_cert is not None and settings.tls_key is not None:
        ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ssl_context.load_cert_chain(str(settings.tls_cert), str(settings.tls_key))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = LeanServer(gw, loop)

        def stop() -> None:
            gw.closing = True  # journal long-polls end within a second
            server.stop()

        _handle_stop_signals(loop, stop, sock, settings, on_ready)
        await server.serve(sock, ssl_context, grace=_GRACE_S)

    uvloop.run(main())


class _UvicornServer(uvicorn.Server):
    """A uvicorn.Server that leaves signals to us: uvicorn's own `capture_signals` would
    re-raise a caught SIGTERM with its default action once serving ends, killing the
    process before the caller closes the Gateway (WAL checkpoint, executors, batcher)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _serve_uvicorn(
    gw: Gateway, sock: socket.socket, config: uvicorn.Config, on_ready: Callable[[str], None] | None
) -> None:
    """Serve with uvicorn on uvloop until SIGTERM/SIGINT; returns (does not re-raise the
    signal) once uvicorn has shut down, so that the caller can close the Gateway."""
    server = _UvicornServer(config)

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def stop() -> None:
            gw.closing = True  # journal long-polls end within a second, as with lean
            server.should_exit = True

        _handle_stop_signals(loop, stop, sock, gw.settings, on_ready)
        await server.serve(sockets=[sock])

    uvloop.run(main())


def _handle_stop_signals(
    loop: asyncio.AbstractEventLoop,
    stop: Callable[[], None],
    sock: socket.socket,
    settings: GatewaySettings,
    on_ready: Callable[[str], None] | None,
) -> None:
    """SIGTERM/SIGINT call `stop` from now on; then `on_ready(url)`. In this order: whoever
    learns the URL may send SIGTERM at once, and it must be a clean stop, not death by the
    default action. (The socket already listens: connections wait in its backlog.)"""
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    if on_ready is not None:
        on_ready(_url(sock, settings))


def die_with_parent() -> None:
    """Linux: this process (a forked worker, a child of `crossbeat up`) gets SIGKILL when
    its parent dies, even by kill -9. Call it in the child, forked by a thread that lives
    as long as the parent: PDEATHSIG fires when the forking thread ends."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except OSError:  # not Linux: workers then outlive a killed supervisor
        pass


def effective_workers(settings: GatewaySettings) -> int:
    return settings.workers if settings.workers > 0 else max(1, min(os.cpu_count() or 1, 4))


def switch_interval_s(settings: GatewaySettings) -> float:
    """The GIL switch interval for a gateway process (`gil_switch_interval_ms`)."""
    if settings.gil_switch_interval_ms is not None:
        return settings.gil_switch_interval_ms / 1000
    return 0.0005 if effective_workers(settings) == 1 else 0.005


def run_gateway(
    settings: GatewaySettings,
    principals: dict[str, Principal],
    on_ready: Callable[[str], None] | None = None,
) -> int:
    """Serve S3 until SIGTERM/SIGINT with `settings.workers` processes; returns an exit code.

    Several workers share one listening socket and one metadata store (SQLite serialises
    their commits; journal seqs stay dense). The supervisor runs the cleanup pass once,
    before any worker serves, then forks the workers; if one dies unexpectedly the rest are
    stopped too, so a half-alive gateway never lingers.
    """
    sock = bind(settings.listen)
    workers = effective_workers(settings)
    if workers == 1:
        gw = Gateway.open(settings, principals)
        try:
            serve(gw, sock, on_ready)
        finally:
            gw.close()
        return 0
    Gateway.open(settings, principals).close()  # cleanup pass; leaves no thread behind
    child_settings = settings.model_copy(update={"cleanup_on_start": False})
    pids: set[int] = set()
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:  # worker
            die_with_parent()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            code = 0
            try:
                gw = Gateway.open(child_settings, principals)
                try:
                    serve(gw, sock, None)
                finally:
                    gw.close()
            except BaseException:  # noqa: BLE001 - report, then exit without unwinding the parent's state
                log.exception("gateway worker failed")
                code = 1
            os._exit(code)
        pids.add(pid)
    url = _url(sock, settings)
    # The workers hold the listening socket; the supervisor never forks again, so it drops
    # its copy now. Kept, it would keep the port open after the workers close theirs (as
    # they stop, or when one has died): the kernel would queue new connections that no
    # one accepts, instead of refusing them.
    sock.close()
    return _supervise(pids, url, on_ready)


def _supervise(pids: set[int], url: str, on_ready: Callable[[str], None] | None) -> int:
    """Wait for the worker processes `pids` (announcing `url` first); SIGTERM/SIGINT, or one
    worker exiting on its own, sends SIGTERM to all that remain. Returns the exit code: 0,
    or 1 if a worker exited unasked."""
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if on_ready is not None:
        on_ready(url)
    code = 0
    while pids:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        pids.discard(pid)
        if not stopping:
            log.error("gateway worker %d exited (status %d); stopping the others", pid, status)
            code = 1
            stop(signal.SIGTERM, None)
    return code


def _url(sock: socket.socket, settings: GatewaySettings) -> str:
    host, port = sock.getsockname()[:2]
    tls = settings.tls_cert is not None and settings.tls_key is not None
    return f"{'https' if tls else 'http'}://{host}:{port}"
