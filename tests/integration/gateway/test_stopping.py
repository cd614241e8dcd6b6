"""Stopping a gateway: new connections are refused at once while requests in flight finish,
either HTTP server exits 0 having closed the Gateway, a SIGTERM as soon as the URL is
announced is a clean stop, and a port already taken is named."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import orjson
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support.gateway import ROOT_AK, ROOT_SK, running_gateway, s3_client, signed
from tests.support.procs import Service, start_service, wait_until

pytestmark = pytest.mark.integration


def _refused(svc: Service) -> bool:
    """Whether a new connection to the gateway is refused (not merely left unanswered)."""
    try:
        with socket.create_connection((svc.host, svc.port), timeout=2):
            return False
    except ConnectionRefusedError:
        return True


def _read_to_close(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def _unread_bytes_at_server(port: int) -> list[int]:
    """The receive queues (bytes not yet read by the server) of the established connections
    whose local end is `port` on 127.0.0.1, from /proc/net/tcp."""
    queues = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues_field = fields[1], fields[3], fields[4]
        if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
            queues.append(int(queues_field.split(":")[1], 16))
    return queues


@pytest.mark.parametrize("server", ["lean", "uvicorn"])
def test_several_workers_refuse_new_connections_while_a_request_drains(
    tmp_path: Path, server: str
) -> None:
    """workers = 2: once SIGTERM arrives, a new connection is refused at once (not queued
    until the gateway exits), while the upload in flight still completes with 200."""
    config = f'[gateway]\nhttp_server = "{server}"\nworkers = 2\n'
    with running_gateway(tmp_path / "data", config=config) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="drain")
        url = s3.generate_presigned_url("put_object", Params={"Bucket": "drain", "Key": "slow"})
        path = url.split(gw.address, 1)[1]
        body = b"x" * 1000
        with socket.create_connection((gw.host, gw.port), timeout=20) as up:
            up.sendall(
                f"PUT {path} HTTP/1.1\r\nHost: {gw.address}\r\nContent-Length: {len(body)}\r\n"
                "Expect: 100-continue\r\n\r\n".encode()
            )
            # a worker is reading the body once it says so: the request is in flight
            assert up.recv(100).startswith(b"HTTP/1.1 100 ")
            up.sendall(body[:10])
            gw.proc.send_signal(signal.SIGTERM)
            wait_until(lambda: _refused(gw), timeout=10, what="new connections refused")
            assert gw.proc.poll() is None  # refused while draining, not after exiting
            up.sendall(body[10:])
            answer = _read_to_close(up)
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        assert gw.stop() == 0
    assert not (tmp_path / "data" / "metadata.sqlite-wal").exists()


def _signed_head(method: str, url: str) -> bytes:
    """The head of a bodiless request to `url`, signed with SigV4 by the root credentials."""
    req = AWSRequest(method=method, url=url, data=b"", headers={})
    S3SigV4Auth(Credentials(ROOT_AK, ROOT_SK), "s3", "us-east-1").add_auth(req)
    target = url.split("/", 3)[3]
    lines = [f"{method} /{target} HTTP/1.1"]
    lines += [f"{k}: {v}" for k, v in req.headers.items()]
    if "host" not in {k.lower() for k in req.headers}:
        lines.append(f"Host: {url.split('/')[2]}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_uvicorn_stops_cleanly_and_ends_a_pending_long_poll(tmp_path: Path) -> None:
    """http_server = "uvicorn": SIGTERM with a journal long-poll parked is a clean stop:
    the poll is answered at once, the process exits 0 within seconds, and the Gateway is
    closed (the SQLite WAL checkpointed away)."""
    config = '[gateway]\nhttp_server = "uvicorn"\nworkers = 1\n'
    with running_gateway(tmp_path / "data", config=config) as gw:
        s3 = s3_client(gw.url)
        s3.create_bucket(Bucket="poll")
        s3.put_object(Bucket="poll", Key="k", Body=b"x")
        journal = signed("GET", f"{gw.url}/_/crossbeat/journal?after=0&limit=1000")
        assert journal.status_code == 200
        seq = orjson.loads(journal.content.splitlines()[-1])["seq"]
        head = _signed_head("GET", f"{gw.url}/_/crossbeat/journal?after={seq}&limit=10&wait=25")
        with socket.create_connection((gw.host, gw.port), timeout=20) as poll:
            poll.sendall(head)
            # the gateway has read the request (nothing left in any receive queue): parked
            wait_until(lambda: not any(_unread_bytes_at_server(gw.port)), timeout=10,
                       what="the long-poll read by the gateway")
            started = time.monotonic()
            gw.proc.send_signal(signal.SIGTERM)
            poll.settimeout(10)
            try:
                answer = _read_to_close(poll)
            except TimeoutError:
                pytest.fail("the long-poll was not answered within 10 s of SIGTERM")
            code = gw.proc.wait(timeout=20)
            took = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
        assert code == 0, "".join(gw.output)[-2000:]
        assert took < 5, f"stopping took {took:.1f} s"
    assert not (tmp_path / "data" / "metadata.sqlite-wal").exists()


def test_sigterm_right_after_the_announcement_is_a_clean_stop(tmp_path: Path) -> None:
    """A single-worker gateway has its signal handlers in place before it prints its URL:
    SIGTERM at once exits 0, not by the signal's default action."""
    config = '[gateway]\nworkers = 1\n'
    for attempt in range(10):  # the old race was lost most times, not every time
        with running_gateway(tmp_path / f"data{attempt}", config=config) as gw:
            gw.proc.send_signal(signal.SIGTERM)
            code = gw.proc.wait(timeout=20)
        assert code == 0, (attempt, "".join(gw.output)[-2000:])


def test_a_port_already_taken_is_named(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = tmp_path / "gw.toml"
        cfg.write_text("[gateway]\nworkers = 1\n")
        with pytest.raises(RuntimeError) as failed:
            start_service(
                ["gateway", "--data-dir", str(tmp_path / "data"), "--listen", f"127.0.0.1:{port}",
                 "--config", str(cfg)],
                env={"CROSSBEAT_ACCESS_KEY": ROOT_AK, "CROSSBEAT_SECRET_KEY": ROOT_SK},
            )
    message = str(failed.value)
    assert f"127.0.0.1:{port}" in message, message
    assert "Address already in use" in message, message
